"""Every outcome reaches the customer once, through the channel the request came from."""

from __future__ import annotations

import hashlib
import hmac
import json

from refund_desk.cases import approvals
from tests.customers.conftest import WEBHOOK_SECRET, Channels
from tests.fakes.receiver import Receiver
from tests.helpers import CUSTOMER, button_token


def _form(channels: Channels, payment: str, amount: str = "20.00") -> str:
    response = channels.submit_form(
        {
            "email": CUSTOMER,
            "payment": payment,
            "amount": amount,
            "reason": "damaged",
            "message": "It arrived broken.",
        }
    )
    assert response.status_code == 201, response.text
    return str(response.headers["X-Refund-Desk-Case"])


def _act(channels: Channels, case_id: str, action: str, user: str, **kw: str) -> None:
    case = channels.case(case_id)
    desk = channels.runtime.desk
    token = button_token(desk, case, action)
    outcome = approvals.act(desk, token_value=token, user=user, **kw)
    for job in outcome.jobs:
        desk.jobs.run_now(job)


def _verify(header: str, body: bytes) -> bool:
    parts = dict(p.split("=", 1) for p in header.split(","))
    mac = hmac.new(WEBHOOK_SECRET.encode(), parts["t"].encode() + b"." + body, hashlib.sha256)
    return hmac.compare_digest(mac.hexdigest(), parts["v1"])


def test_refund_by_web_form_is_emailed_exactly_once(channels: Channels) -> None:
    case_id = _form(channels, channels.payment("30.00"))
    assert channels.case(case_id).status == "refunded"
    channels.sweep()
    channels.sweep()
    [mail] = channels.mail.inbox.to(CUSTOMER)
    body = mail.get_content()
    assert "Your refund of 20.00 USD has been issued." in body and case_id in body
    assert case_id in str(mail["Subject"])
    [told] = channels.told(case_id)
    assert told.status == "sent" and told.channel == "email" and told.kind == "refunded"
    actions = [r["action"] for r in channels.get(case_id)["audit"]]
    assert actions.count("customer.told") == 1


def test_api_outcome_is_posted_signed_to_the_callback_once(
    channels: Channels, receiver: Receiver
) -> None:
    assert receiver.server is not None
    url = f"http://127.0.0.1:{receiver.server.server_address[1]}"
    receiver.statuses = [500]  # the first delivery fails: retried through the jobs table
    payment = channels.payment("30.00")
    body = channels.post(
        channels.request(
            payment, "20.00", reason="damaged", callback_url=f"{url}/hook", external_id="ord-7"
        )
    ).json()
    assert body["status"] == "refunded"
    channels.sweep()
    assert len(receiver.requests) == 1 and channels.told(body["id"])[0].status == "queued"
    channels.sweep(seconds_ahead=3600)
    channels.sweep(seconds_ahead=7200)
    assert len(receiver.requests) == 2
    first, second = receiver.requests
    assert first.headers["X-Refund-Desk-Delivery"] == second.headers["X-Refund-Desk-Delivery"]
    assert _verify(second.headers["X-Refund-Desk-Signature"], second.body)
    event = json.loads(second.body)
    assert event["case_id"] == body["id"] and event["external_id"] == "ord-7"
    assert event["outcome"] == "refunded" and event["amount"] == "20.00"
    assert channels.mail.inbox.messages == []  # the integrator's customer, the integrator's call


def test_denial_by_a_person_never_shows_the_counterfactual(channels: Channels) -> None:
    case_id = _form(channels, channels.payment("900.00"), amount="600.00")
    case = channels.case(case_id)
    assert case.status == "awaiting_approval"
    counterfactual = (case.decision or {}).get("counterfactual")
    assert counterfactual
    _act(channels, case_id, "deny", "U0FIN1", reason="The item was used for months.")
    channels.sweep()
    [mail] = channels.mail.inbox.to(CUSTOMER)
    text = mail.get_content()
    assert "The item was used for months." in text
    assert counterfactual not in text and "would" not in text.lower()
    assert "/appeal/" in text


def test_partial_approval_says_so(channels: Channels) -> None:
    case_id = _form(channels, channels.payment("900.00"), amount="600.00")
    _act(
        channels,
        case_id,
        "approve_partial",
        "U0FIN1",
        amount="250.00",
        reason="We refund the damaged part.",
    )
    channels.sweep()
    assert channels.case(case_id).status == "refunded"
    [mail] = channels.mail.inbox.to(CUSTOMER)
    text = mail.get_content()
    assert "250.00 USD" in text and "part of the 600.00 USD" in text
    assert "We refund the damaged part." in text
    assert channels.told(case_id)[0].kind == "partially_refunded"


def test_parked_case_tells_the_customer_when_to_expect_an_answer(channels: Channels) -> None:
    case_id = _form(channels, channels.payment("30.00"))
    desk = channels.runtime.desk
    from refund_desk.cases.lifecycle import Status, move
    from refund_desk.cases.rows import load_for_update
    from refund_desk.storage.audit import SYSTEM

    with desk.db.write() as session:  # a refund reversed by the processor reopens the case
        case = load_for_update(session, case_id)
        case.park_reason = "internal: processor reversed refund re_123"
        move(session, desk.audit, case, Status.parked, actor=SYSTEM)
    channels.sweep()
    mails = channels.mail.inbox.to(CUSTOMER)
    assert len(mails) == 2
    text = mails[1].get_content()
    assert "closer look" in text and "expect to answer by" in text
    assert "re_123" not in text and "internal" not in text
    assert channels.told(case_id)[1].expected_by is not None


def test_helpdesk_request_is_answered_on_the_ticket(channels: Channels) -> None:
    payment = channels.payment("30.00")
    ticket = {
        "ticket": {
            "id": 4711,
            "tags": ["refund", "vip"],
            "subject": "Broken vase",
            "description": f"Order {payment}: it arrived broken.",
            "requester": {"email": CUSTOMER},
        }
    }
    response = channels.post_zendesk(json.dumps(ticket).encode())
    assert response.status_code == 201, response.text
    case = channels.case(response.json()["case"])
    assert case.source == "zendesk" and case.external_id == "4711"
    assert case.status == "refunded"
    channels.sweep()
    channels.sweep()
    [comment] = [r for r in channels.helpdesk.requests if r.path == "/api/v2/tickets/4711.json"]
    assert comment.method == "PUT"
    assert comment.headers["Authorization"].startswith("Basic ")
    assert json.loads(comment.body)["ticket"]["comment"]["public"] is True
    assert channels.mail.inbox.messages == []  # the ticket is where the customer hears it
