"""The Slack click path: buttons that cannot be abused, checked through signed HTTP requests
against the Slack emulator on loopback."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlmodel import col

from refund_desk import clock
from refund_desk.cases import tokens
from refund_desk.storage.models import AuditRecord
from tests.bot.helpers import approve, review_case
from tests.helpers import ACME
from tests.slack_helpers import SlackHarness


@pytest.fixture()
def desk(any_db_url: str, slack_desk: Callable[[str, str], SlackHarness]) -> SlackHarness:
    return slack_desk(any_db_url, ACME.read_text().replace("limit: 500", "limit: 100"))


def test_a_case_for_review_becomes_a_card_with_buttons(desk: SlackHarness) -> None:
    review_case(desk)
    card = desk.card("C0FINANCE")  # the `large` rule names finance, whose channel is C0FINANCE
    assert set(desk.slack.buttons(card)) == {"approve", "approve_partial", "deny", "escalate"}
    text = json.dumps(card.blocks)
    assert "600.00 USD" in text and "large" in text and "policy v1" in text
    assert "Advisory (AI" in text
    assert "ada@example.com" not in text and "a**@example.com" in text


def test_an_authorized_click_refunds_once_and_updates_the_card(desk: SlackHarness) -> None:
    case_id = review_case(desk)
    response = desk.approve("U0FIN1", desk.buttons()["approve"])
    assert response.status_code == 200
    desk.settle()
    case = desk.get(case_id)
    assert case["status"] == "refunded"
    assert len(desk.refunds_at_processor(case["payment"])) == 1
    card = desk.card()
    assert card.updates >= 1 and desk.slack.buttons(card) == {}, "decided cards lose buttons"
    replies = [m.text for m in desk.slack.thread(card)]
    assert any("Approved by <@U0FIN1>" in r for r in replies)
    assert any("Refunded 600.00 USD" in r for r in replies)
    approvals = [r for r in case["audit"] if r["action"] == "case.approved"]
    assert approvals[0]["actor_kind"] == "human" and approvals[0]["actor_id"] == "U0FIN1"


def test_bad_signature_is_401_and_old_requests_are_refused(desk: SlackHarness) -> None:
    case_id = review_case(desk)
    value = desk.buttons()["approve"]
    forged = {"X-Slack-Request-Timestamp": "1", "X-Slack-Signature": "v0=00"}
    headers = {**forged, "Content-Type": "application/x-www-form-urlencoded"}
    assert desk.post_slack("payload=%7B%7D", headers).status_code == 401
    old = int((clock.now() - timedelta(minutes=6)).timestamp())
    assert desk.click("U0FIN1", "approve", value, timestamp=old).status_code == 401
    desk.settle()
    assert desk.get(case_id)["status"] == "awaiting_approval"


def test_a_replayed_click_moves_no_money_and_is_recorded(desk: SlackHarness) -> None:
    case_id = review_case(desk)
    value = desk.buttons()["approve"]
    desk.approve("U0FIN1", value)
    desk.settle()
    desk.approve("U0FIN1", value)
    desk.settle()
    case = desk.get(case_id)
    assert len(desk.refunds_at_processor(case["payment"])) == 1
    [refusal] = desk.refusals(case_id)
    assert refusal["payload"]["code"] == "already_decided"
    said = desk.refused("U0FIN1")  # the modal the second click opened
    assert "Already decided by <@U0FIN1>" in said and f"Case `{case_id}`" in said


def test_twenty_concurrent_confirmations_are_one_refund(desk: SlackHarness) -> None:
    case_id = review_case(desk)
    desk.click("U0FIN1", "approve", desk.buttons()["approve"])
    view = desk.opened("U0FIN1")
    assert view is not None and view["callback_id"] == "approve_modal"

    def confirm(_: int) -> Any:
        return desk.submit("U0FIN1", "approve_modal", view["private_metadata"], {})

    with ThreadPoolExecutor(20) as pool:
        responses = list(pool.map(confirm, range(20)))
    assert {r.status_code for r in responses} == {200}
    desk.settle()
    case = desk.get(case_id)
    assert case["status"] == "refunded"
    assert len(desk.refunds_at_processor(case["payment"])) == 1
    assert len(desk.refusals(case_id)) == 19


def _global_refusals(desk: SlackHarness) -> list[dict[str, object]]:
    """Refusals of tokens that could not be verified carry no case id, only the claimed one."""
    with desk.runtime.db.read() as session:
        rows = session.scalars(
            select(AuditRecord)
            .where(
                col(AuditRecord.action) == "approval.refused", col(AuditRecord.case_id).is_(None)
            )
            .order_by(col(AuditRecord.seq))
        ).all()
        return [r.payload for r in rows]


def _edit(value: str, **changes: object) -> str:
    body, _, signature = value.partition(".")
    data = json.loads(base64.urlsafe_b64decode(body))
    data.update(changes)
    forged = base64.urlsafe_b64encode(json.dumps(data).encode()).decode()
    return f"{forged}.{signature}"


def test_a_token_edited_to_another_amount_is_refused(desk: SlackHarness) -> None:
    case_id = review_case(desk)
    desk.approve("U0FIN1", _edit(desk.buttons()["approve"], amount=1))
    desk.settle()
    assert desk.get(case_id)["status"] == "awaiting_approval"
    assert desk.refusals(case_id) == []  # an unverifiable token is not trusted to name a case
    [refusal] = _global_refusals(desk)
    assert refusal["code"] == "token_invalid"
    assert refusal["claimed_case_id"] == case_id


def test_stale_and_expired_tokens_are_refused(desk: SlackHarness) -> None:
    case_id = review_case(desk)
    old_approve = desk.buttons()["approve"]
    desk.escalate("U0FIN1", desk.buttons()["escalate"])  # bumps the revision
    desk.settle()
    desk.approve("U0FIN1", old_approve)
    expired = tokens.issue(
        desk.runtime.desk.secret,
        case_id=case_id,
        action="approve",
        amount=60000,
        currency="USD",
        revision=desk.get(case_id)["revision"],
        policy_version=1,
        now=clock.now() - timedelta(days=30),
    )
    desk.approve("U0FIN1", expired)
    desk.settle()
    case = desk.get(case_id)
    assert case["status"] == "awaiting_approval" and case["escalation_level"] == 1
    assert [r["payload"]["code"] for r in desk.refusals(case_id)] == ["stale"]
    assert _global_refusals(desk)[-1]["code"] == "token_expired"
    assert desk.refunds_at_processor(case["payment"]) == []


def test_outsiders_and_over_limit_approvers_are_refused(desk: SlackHarness) -> None:
    case_id = review_case(desk)
    desk.approve("U0LEAD1", desk.buttons()["approve"])  # not in finance
    desk.settle()
    small = review_case(desk, amount="150.00", paid="200.00")  # default rule: support-leads
    desk.approve("U0LEAD1", desk.buttons("C0REFUNDS")["approve"])  # limit 100
    desk.settle()
    assert [r["payload"]["code"] for r in desk.refusals(case_id)] == ["not_an_approver"]
    assert [r["payload"]["code"] for r in desk.refusals(small)] == ["over_limit"]
    assert desk.get(case_id)["status"] == desk.get(small)["status"] == "awaiting_approval"


def test_tier_four_needs_two_approvers_the_second_on_the_fresh_card(desk: SlackHarness) -> None:
    case_id = review_case(desk, amount="40.00", paid="50.00", chargebacks=1)
    assert desk.get(case_id)["decision"]["tier"] == 4
    first_card = desk.buttons()
    desk.approve("U0FIN1", first_card["approve"])
    desk.settle()
    case = desk.get(case_id)
    assert case["status"] == "awaiting_approval"
    assert desk.refunds_at_processor(case["payment"]) == []
    desk.approve("U0FIN1", desk.buttons()["approve"])  # the same person again
    desk.approve("U0FIN2", first_card["approve"])  # a used token from before
    desk.click("U0FIN2", "deny", first_card["deny"])  # an unused token from before
    assert "out of date" in desk.refused("U0FIN2"), "refused before any modal asks a reason"
    desk.settle()
    assert [r["payload"]["code"] for r in desk.refusals(case_id)] == [
        "already_approved",
        "already_decided",
        "stale",
    ]
    approve(desk, "U0FIN2")
    case = desk.get(case_id)
    assert case["status"] == "refunded"
    assert len(desk.refunds_at_processor(case["payment"])) == 1
    approved = next(r for r in case["audit"] if r["action"] == "case.approved")
    assert approved["payload"]["approvers"] == ["U0FIN1", "U0FIN2"]


def test_deny_through_the_modal_tells_the_customer_the_reason(desk: SlackHarness) -> None:
    case_id = review_case(desk)
    desk.click("U0FIN1", "deny", desk.buttons()["deny"])
    [view] = desk.slack.views
    assert view["callback_id"] == "deny_modal"
    desk.submit(
        "U0FIN1",
        "deny_modal",
        view["private_metadata"],
        {"reason": "The order was delivered and signed for."},
    )
    desk.settle()
    case = desk.get(case_id)
    assert case["status"] == "denied"
    assert case["customer_message"] == "The order was delivered and signed for."
    assert desk.refunds_at_processor(case["payment"]) == []


def test_partial_approval_never_above_the_card_amount(desk: SlackHarness) -> None:
    case_id = review_case(desk)
    desk.click("U0FIN1", "approve_partial", desk.buttons()["approve_partial"])
    [view] = desk.slack.views
    too_much = desk.submit(
        "U0FIN1", "partial_modal", view["private_metadata"], {"amount": "600.01", "reason": None}
    )
    assert too_much.json()["response_action"] == "errors"
    assert "At most 600.00 USD" in too_much.json()["errors"]["amount"]
    desk.submit(
        "U0FIN1", "partial_modal", view["private_metadata"], {"amount": "250.00", "reason": None}
    )
    desk.settle()
    case = desk.get(case_id)
    assert case["status"] == "refunded" and case["amount"] == "250.00"
    assert case["amount_source"] == "human_entry"
    assert case["provenance"]["amount"] == "human_entry"
    [refund] = desk.refunds_at_processor(case["payment"])
    assert refund["amount"] == 25000
