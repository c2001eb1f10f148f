"""SLA clocks with the Slack emulator: a reminder, then one escalation per level, never a decision.

Time is moved, not waited for: the sweeps are run as if it were later.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from refund_desk.policy import parse_policy
from refund_desk.policy.durations import sla_deadline
from tests.bot.helpers import approve, wall_clock
from tests.helpers import ACME
from tests.slack_helpers import SlackHarness

HOUR = 3600


@pytest.fixture()
def desk(any_db_url: str, slack_desk: Callable[[str, str], SlackHarness]) -> SlackHarness:
    return slack_desk(any_db_url, wall_clock(ACME.read_text()))


def thread_lines(desk: SlackHarness) -> list[str]:
    return [m.text for m in desk.slack.thread(desk.card())]


def manager_dms(desk: SlackHarness) -> list[object]:
    return [m for m in desk.slack.messages if m.channel == "D0MGR1"]


def test_reminder_then_escalation_levels_then_a_manager_decides(desk: SlackHarness) -> None:
    payment = desk.payment("900.00")
    case_id = desk.post(desk.request(payment, "600.00")).json()["id"]
    desk.settle()
    case = desk.get(case_id)
    assert case["sla_due_at"] is not None

    desk.sweep(seconds_ahead=1 * HOUR)  # before the reminder: nothing
    assert thread_lines(desk) == []

    desk.sweep(seconds_ahead=2 * HOUR + 5)
    [reminder] = thread_lines(desk)
    assert "Reminder for <@U0FIN1> <@U0FIN2>" in reminder
    assert manager_dms(desk) == []

    desk.sweep(seconds_ahead=4 * HOUR + 5)
    desk.sweep(seconds_ahead=4 * HOUR + 10)  # again: nothing more
    assert desk.get(case_id)["escalation_level"] == 1
    assert len(manager_dms(desk)) == 1
    mentions = [line for line in thread_lines(desk) if "<@U0MGR1>" in line]
    assert len(mentions) == 1 and "level 1" in mentions[0] and "deadline passed" in mentions[0]

    desk.sweep(seconds_ahead=8 * HOUR + 5)
    case = desk.get(case_id)
    assert case["escalation_level"] == 2 and case["status"] == "awaiting_approval"
    assert len(manager_dms(desk)) == 1, "the DM is updated, not sent again"
    assert sum("level 2" in line for line in thread_lines(desk)) == 1
    assert [r["action"] for r in case["audit"]].count("case.escalated") == 2

    [dm] = manager_dms(desk)
    desk.approve("U0MGR1", desk.slack.buttons(dm)["approve"], channel="D0MGR1")
    desk.settle()
    assert desk.get(case_id)["status"] == "refunded"
    desk.sweep(seconds_ahead=20 * HOUR)  # later clocks find nothing left to chase
    assert desk.get(case_id)["escalation_level"] == 2
    assert len(desk.refunds_at_processor(payment)) == 1


def test_a_timeout_never_decides(desk: SlackHarness) -> None:
    payment = desk.payment("900.00")
    case_id = desk.post(desk.request(payment, "600.00")).json()["id"]
    desk.settle()
    for hours in (4, 8, 12, 16, 48):
        desk.sweep(seconds_ahead=hours * HOUR + 5)
    case = desk.get(case_id)
    # one level per SLA period that passed: 4h, 8h, ... 48h
    assert case["status"] == "awaiting_approval" and case["escalation_level"] == 12
    assert desk.refunds_at_processor(payment) == []


def test_processor_down_parks_and_tells_the_thread_then_pays_once(desk: SlackHarness) -> None:
    payment = desk.payment("900.00")
    case_id = desk.post(desk.request(payment, "600.00")).json()["id"]
    desk.settle()
    desk.sandbox.set_fault("down")
    approve(desk, "U0FIN1")
    for step in range(1, 12):
        desk.sweep(seconds_ahead=step * 600, batches=1)
    case = desk.get(case_id)
    assert case["status"] == "parked" and "processor" in case["park_reason"]
    assert any("Parked" in line for line in thread_lines(desk))
    desk.sandbox.set_fault("none")
    desk.approve("U0FIN2", desk.buttons()["approve"])  # the parked card has buttons
    desk.settle()
    assert desk.get(case_id)["status"] == "refunded"
    assert len(desk.refunds_at_processor(payment)) == 1


def test_sla_deadline_counts_business_hours(
    any_db_url: str, slack_desk: Callable[[str, str], SlackHarness]
) -> None:
    desk = slack_desk(any_db_url, ACME.read_text())  # Mon-Fri 09:00-17:00 Berlin
    payment = desk.payment("900.00")
    case_id = desk.post(desk.request(payment, "600.00")).json()["id"]
    case = desk.get(case_id)
    created = datetime.fromisoformat(case["created_at"])
    expected = sla_deadline(parse_policy(ACME.read_text()), 3, created)
    assert expected is not None
    due = datetime.fromisoformat(case["sla_due_at"])
    assert abs(due - expected) < timedelta(seconds=5)
