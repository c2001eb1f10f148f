"""My queue on the web: the same cases, buttons, confirm texts, tokens and refusals as Slack."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from refund_desk.cases.approvals import may_decide
from refund_desk.storage.models import Case
from tests.helpers import Harness
from tests.web.desk.conftest import FINANCE, LEAD, MANAGER, SUPPORT, browser

FINANCE_2 = "U0FIN2"


def waiting_case(desk: Harness, amount: str = "600.00", *, chargebacks: int = 0) -> str:
    """600.00 of a 900.00 payment: the `large` rule, finance decides (tier 4 with a chargeback)."""
    payment = desk.payment("900.00", chargebacks=chargebacks)
    body = desk.post(desk.request(payment, amount)).json()
    assert body["status"] == "awaiting_approval", body
    return str(body["id"])


def buttons_on(page: str, case_id: str) -> dict[str, dict[str, str]]:
    """The buttons a queue page shows for a case: label -> the form they post."""
    section = page.split(f'id="h-{case_id}"', 1)[1].split("</section>", 1)[0]
    found = re.findall(
        r'name="revision" value="(\d+)">\s*<button type="submit" name="action" '
        r'value="([a-z_]+)"[^>]*aria-label="([^:"]+):',
        section,
    )
    return {
        label: {"case": case_id, "revision": revision, "action": action}
        for revision, action, label in found
    }


def token_of(page: str) -> str:
    match = re.search(r'name="token" value="([^"]+)"', page)
    assert match, "no token on the confirmation"
    return match.group(1)


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, "no CSRF token on the page"
    return match.group(1)


def click(client: TestClient, case_id: str, label: str, **typed: str) -> tuple[str, object]:
    """Open my queue, press a case's button, read the confirmation, confirm it."""
    seen = confirmation(client, case_id, label)
    done = client.post(
        "/desk/decide", data={"token": token_of(seen), "csrf": csrf_of(seen), **typed}
    )
    return seen, done


def confirmation(client: TestClient, case_id: str, label: str) -> str:
    """Open my queue and press a case's button: the confirmation page."""
    queue = client.get("/desk").text
    form = buttons_on(queue, case_id)[label]
    seen = client.post("/desk/decide/confirm", data={**form, "csrf": csrf_of(queue)})
    assert seen.status_code == 200, seen.text
    return seen.text


def test_a_finance_case_waits_in_finance_queues_only(desk: Harness) -> None:
    case_id = waiting_case(desk)
    assert case_id in browser(desk, FINANCE).get("/desk").text
    support = browser(desk, SUPPORT).get("/desk").text
    assert case_id not in support and "Nothing waits for you." in support


def test_approve_on_the_web_pays_once(desk: Harness) -> None:
    case_id = waiting_case(desk)
    fin = browser(desk, FINANCE)
    seen, done = click(fin, case_id, "Approve")
    assert "600.00 USD" in seen and "finance approver" in seen
    assert done.status_code == 303 and done.headers["location"].startswith(f"/desk?case={case_id}")
    desk.sweep()
    assert desk.get(case_id)["status"] == "refunded"
    assert case_id not in fin.get("/desk").text


def test_tier_4_takes_two_people_and_says_nothing_is_paid_after_the_first(desk: Harness) -> None:
    case_id = waiting_case(desk, chargebacks=1)
    first = browser(desk, FINANCE)
    seen, _ = click(first, case_id, "Approve (1 of 2)")
    assert "nothing is paid yet" in seen
    assert desk.get(case_id)["status"] == "awaiting_approval"
    assert case_id not in first.get("/desk").text, "the first approver waits for a second"
    click(browser(desk, FINANCE_2), case_id, "Approve (2 of 2)")
    desk.sweep()
    assert desk.get(case_id)["status"] == "refunded"
    assert len(desk.refunds_at_processor(desk.get(case_id)["payment"])) == 1


def test_partial_deny_and_escalate(desk: Harness) -> None:
    partial, denied, escalated = (waiting_case(desk) for _ in range(3))
    fin = browser(desk, FINANCE)
    click(fin, partial, "Approve partially", amount="250.00", reason="Half, as agreed")
    desk.sweep()
    assert desk.get(partial)["status"] == "refunded"
    assert desk.get(partial)["amount"] == "250.00"
    click(fin, denied, "Deny", reason="Outside the return window.")
    assert desk.get(denied)["status"] == "denied"
    click(fin, escalated, "Escalate", reason="Carrier claim first")
    manager = browser(desk, MANAGER).get("/desk").text
    assert escalated in manager
    assert escalated not in fin.get("/desk").text


def test_a_replayed_button_and_a_missing_csrf_token_change_nothing(desk: Harness) -> None:
    case_id = waiting_case(desk)
    fin = browser(desk, FINANCE)
    seen = confirmation(fin, case_id, "Deny")
    token = token_of(seen)
    refused = fin.post("/desk/decide", data={"token": token, "reason": "no"})
    assert refused.status_code == 403
    assert desk.get(case_id)["status"] == "awaiting_approval"
    fin.post("/desk/decide", data={"token": token, "csrf": csrf_of(seen), "reason": "no"})
    again = fin.post("/desk/decide", data={"token": token, "csrf": csrf_of(seen), "reason": "x"})
    assert again.status_code == 409 and "Nothing was changed" in again.text
    assert desk.get(case_id)["status"] == "denied"


def test_a_person_who_may_not_decide_is_refused_with_the_slack_words(desk: Harness) -> None:
    case_id = waiting_case(desk)
    token = token_of(confirmation(browser(desk, FINANCE), case_id, "Approve"))
    lead = browser(desk, LEAD)
    csrf = csrf_of(lead.get("/desk/cases").text)
    refused = lead.post("/desk/decide", data={"token": token, "csrf": csrf})
    assert refused.status_code == 409
    assert "finance" in refused.text and case_id in refused.text
    with desk.runtime.db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None and case.status == "awaiting_approval"
        assert not may_decide(session, case, LEAD)


def test_the_page_knows_when_the_record_moved(desk: Harness) -> None:
    fin = browser(desk, FINANCE)
    mark = fin.get("/desk/changes").json()["mark"]
    assert fin.get(f"/desk/changes?since={mark}").json()["changed"] is False
    waiting_case(desk)
    assert fin.get(f"/desk/changes?since={mark}").json()["changed"] is True
