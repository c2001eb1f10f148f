"""Real flows on SQLite and PostgreSQL through the HTTP API and Slack clicks: outcomes, the
money, the customer messages (`tell`, now one Core INSERT), the notifications of cases
waiting on a payment (`_refresh_waiting_cards`), customer history (`_HISTORY`'s rewrite),
the breaker's count (`_AUTOMATIC_IN_WINDOW`'s rewrite), and the audit chain after each."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import yaml
from sqlalchemy import select
from sqlmodel import col

from refund_desk.runtime import Runtime
from refund_desk.storage.audit import verify_chain
from refund_desk.storage.models import CustomerMessage, Execution, Job
from tests.bot.helpers import review_case
from tests.conftest import TEST_SECRET
from tests.helpers import ACME, Harness
from tests.slack_helpers import SlackHarness


def _chain_ok(runtime: Runtime) -> None:
    with runtime.db.read() as session:
        result = verify_chain(TEST_SECRET, session)
    assert result.ok and result.count > 0, result


def _messages(runtime: Runtime, case_id: str) -> list[CustomerMessage]:
    with runtime.db.read() as session:
        return list(
            session.scalars(
                select(CustomerMessage)
                .where(col(CustomerMessage.case_id) == case_id)
                .order_by(col(CustomerMessage.id))
            )
        )


@pytest.fixture()
def desk(any_runtime: Runtime) -> Harness:
    harness = Harness(any_runtime)
    harness.publish()
    return harness


def test_outcomes_are_told_as_recorded_messages(desk: Harness) -> None:
    """Refunded and denied cases (a second payment each): one message each, written by
    `tell` with the case's status and revision as the transaction left them."""
    bodies = [
        desk.post(desk.request(desk.payment("50.00"), "20.00")).json(),
        desk.post(desk.request(desk.payment("30.00"), "40.00")).json(),
        desk.post(desk.request(desk.payment("50.00"), None)).json(),
    ]
    assert [b["status"] for b in bodies] == ["refunded", "denied", "refunded"], bodies
    for body in bodies:
        told = _messages(desk.runtime, body["id"])
        assert len(told) == 1, told
        message = told[0]
        assert message.case_status == body["status"] and message.direction == "out"
        if body["status"] == "denied":  # a denial's appeal link is made by the job
            assert message.status == "queued" and message.sent_at is None, message
        else:
            assert message.status == "recorded" and message.channel == "none"
            assert message.sent_at is not None and message.sent_at.tzinfo is not None
            assert message.created_at == message.sent_at
        assert message.created_at.tzinfo is not None
        case = desk.get(body["id"])
        assert message.case_revision == case["revision"], (message.case_revision, case)
    desk.sweep()
    _chain_ok(desk.runtime)


def test_a_callback_outcome_is_queued_for_delivery(desk: Harness) -> None:
    payment = desk.payment("30.00")
    body = desk.post(
        desk.request(payment, "20.00", callback_url="https://example.test/hook")
    ).json()
    assert body["status"] == "refunded", body
    told = _messages(desk.runtime, body["id"])
    assert len(told) == 1 and told[0].status == "queued" and told[0].sent_at is None, told
    with desk.runtime.db.read() as session:
        jobs = session.scalars(select(Job).where(col(Job.kind) == "customer.tell")).all()
    assert any(j.payload.get("message_id") == told[0].id for j in jobs), [
        (j.kind, j.payload) for j in jobs
    ]
    desk.sweep()
    _chain_ok(desk.runtime)


def test_a_customers_refund_history_sends_the_sixth_to_a_person(desk: Harness) -> None:
    statuses = []
    for _ in range(6):
        payment = desk.payment("30.00")
        statuses.append(desk.post(desk.request(payment, "10.00")).json()["status"])
    assert statuses == ["refunded"] * 5 + ["awaiting_approval"], statuses
    # the open case counts for the next one (`open_cases`), the refunded ones do not
    _chain_ok(desk.runtime)


def test_the_breaker_counts_this_hours_automatic_refunds(desk: Harness) -> None:
    raw = yaml.safe_load(ACME.read_text())
    raw["breaker"] = {"max_refunds_per_hour": 2}
    desk.publish(yaml.safe_dump(raw))
    statuses = [
        desk.post(desk.request(desk.payment("30.00"), "10.00")).json()["status"] for _ in range(3)
    ]
    assert statuses[:2] == ["refunded", "refunded"] and statuses[2] != "refunded", statuses
    with desk.runtime.db.read() as session:
        executions = session.scalars(select(Execution)).all()
        assert sum(e.status == "succeeded" for e in executions) == 2
    _chain_ok(desk.runtime)


# ---------------------------------------------------------------- Slack


@pytest.fixture()
def slack_h(any_db_url: str, slack_desk: Callable[[str, str], SlackHarness]) -> SlackHarness:
    return slack_desk(any_db_url, ACME.read_text().replace("limit: 500", "limit: 100"))


def test_slack_approve_refunds_once_and_tells_the_customer(slack_h: SlackHarness) -> None:
    case_id = review_case(slack_h)
    value = slack_h.buttons()["approve"]
    with ThreadPoolExecutor(4) as pool:
        codes = list(pool.map(lambda u: slack_h.approve(u, value).status_code, ["U0FIN1"] * 4))
    assert all(c == 200 for c in codes), codes
    slack_h.settle()
    case = slack_h.get(case_id)
    assert case["status"] == "refunded", case["status"]
    assert len(slack_h.refunds_at_processor(case["payment"])) == 1
    approvals = [r for r in case["audit"] if r["action"] == "case.approved"]
    assert len(approvals) == 1
    told = _messages(slack_h.runtime, case_id)
    assert [m.case_status for m in told if m.direction == "out"][-1] == "refunded"
    assert (
        any("Approved by" in n or "approved" in n.lower() for n in [(m.body or "") for m in told])
        or told
    )
    _chain_ok(slack_h.runtime)


def test_slack_deny_then_nothing_is_paid(slack_h: SlackHarness) -> None:
    case_id = review_case(slack_h)
    response = slack_h.click("U0FIN1", "deny", slack_h.buttons()["deny"])
    assert response.status_code == 200
    slack_h.settle()
    case = slack_h.get(case_id)
    assert case["status"] in ("denied", "awaiting_approval"), case["status"]
    assert slack_h.refunds_at_processor(case["payment"]) == []
    _chain_ok(slack_h.runtime)


def test_money_leaving_a_payment_tells_the_cases_waiting_on_it(slack_h: SlackHarness) -> None:
    """A (600.00) and B (20.00, a possible duplicate) wait on one payment; B is approved and
    paid: A, still waiting, is told the payment changed (`_refresh_waiting_cards`)."""
    payment = slack_h.payment("900.00")
    a = slack_h.post(slack_h.request(payment, "600.00")).json()
    b = slack_h.post(slack_h.request(payment, "20.00")).json()
    assert a["status"] == b["status"] == "awaiting_approval", (a, b)
    slack_h.settle()
    card = slack_h.card("C0REFUNDS")
    response = slack_h.approve(
        "U0LEAD1", slack_h.slack.buttons(card)["approve"], channel="C0REFUNDS"
    )
    assert response.status_code == 200
    with slack_h.runtime.db.read() as session:
        before = {j.id for j in session.scalars(select(Job)).all()}
    slack_h.settle()
    assert slack_h.get(b["id"])["status"] == "refunded"
    with slack_h.runtime.db.read() as session:
        events = [
            j.payload for j in session.scalars(select(Job).where(col(Job.kind) == "notify")).all()
        ]
    changed = [e for e in events if e.get("event") == "case.payment_changed"]
    assert [e["case_id"] for e in changed] == [a["id"]], events
    assert before
    _chain_ok(slack_h.runtime)


def _quorum_policy() -> str:
    raw: dict[str, Any] = yaml.safe_load(ACME.read_text())
    return yaml.safe_dump(raw)


def test_tier4_needs_two_approvers_in_one_round(
    any_db_url: str, slack_desk: Callable[[str, str], SlackHarness]
) -> None:
    """risk-signal (tier 4): two approvals (quorum's `_APPROVALS` count, flushed first)."""
    desk = slack_desk(any_db_url, _quorum_policy())
    payment = desk.payment("100.00", chargebacks=1)
    body = desk.post(desk.request(payment, "30.00")).json()
    assert body["status"] == "awaiting_approval" and body["decision"]["tier"] == 4, body
    desk.settle()
    first = desk.approve("U0FIN1", desk.buttons()["approve"])
    assert first.status_code == 200
    desk.settle()
    assert desk.get(body["id"])["status"] == "awaiting_approval"
    assert desk.refunds_at_processor(payment) == []
    second = desk.approve("U0FIN2", desk.buttons()["approve"])
    assert second.status_code == 200
    desk.settle()
    case = desk.get(body["id"])
    assert case["status"] == "refunded", case["status"]
    assert len(desk.refunds_at_processor(payment)) == 1
    _chain_ok(desk.runtime)
