"""Errors reach people: a card Slack will never take is a permanent failure that the case, the
leads and App Home show; answers go through response_url, else ephemeral, else a DM; an
unexpected error shows an incident id; one Slack call per step, so a 429 never posts twice."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select
from sqlmodel import col

from refund_desk.bot.outbox import SLACK_CALL
from refund_desk.cases import approvals
from refund_desk.storage.models import Job
from tests.bot.helpers import approve, finance_case
from tests.helpers import ACME
from tests.slack_helpers import SlackHarness, fixture


@pytest.fixture()
def desk(sqlite_url: str, slack_desk: Callable[[str, str], SlackHarness]) -> SlackHarness:
    return slack_desk(sqlite_url, ACME.read_text())


def _home(desk: SlackHarness, user: str) -> str:
    event = fixture("app_home_opened.json")
    event["event"]["user"] = user
    desk.event(event)
    desk.settle()
    return str(desk.slack.home[user]["blocks"])


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"member": False}, "not_in_channel"),
        ({"archived": True}, "is_archived"),
        (None, "channel_not_found"),
    ],
)
def test_a_card_slack_will_not_take_is_not_retried_and_reaches_the_leads(
    desk: SlackHarness, change: dict[str, Any] | None, code: str
) -> None:
    ws = desk.slack.workspace
    if change is None:
        del ws.channels["C0FINANCE"]
    else:
        for key, value in change.items():
            setattr(ws.channels["C0FINANCE"], key, value)
    case_id = finance_case(desk)
    for seconds in (60, 600, 3600):
        desk.sweep(seconds_ahead=seconds)
    posts = [p for m, p in desk.slack.calls if m == "chat.postMessage"]
    assert [p["channel"] for p in posts].count("C0FINANCE") == 1, "a permanent failure: no retry"
    case = desk.get(case_id)
    assert case["status"] == "awaiting_approval"
    assert case["slack"] == {
        "status": "not delivered to Slack",
        "channel": "C0FINANCE",
        "error": code,
    }
    assert "slack.undelivered" in [r["action"] for r in case["audit"]]
    [dm] = [m for m in desk.slack.messages if m.channel == "D0LEAD1"]
    assert case_id in dm.text and "C0FINANCE" in dm.text and code in dm.text
    home = _home(desk, "U0LEAD1")
    assert "Not delivered to Slack" in home and case_id in home
    assert "Not delivered to Slack" not in _home(desk, "U0STRANGER")
    # Sweeps and more notifications about the case never post the card there again.
    desk.sweep(seconds_ahead=7200)
    posts = [p for m, p in desk.slack.calls if m == "chat.postMessage"]
    assert [p["channel"] for p in posts].count("C0FINANCE") == 1
    assert len([m for m in desk.slack.messages if m.channel == "D0LEAD1"]) == 1


def test_a_delivered_card_is_on_the_case(desk: SlackHarness) -> None:
    case_id = finance_case(desk)
    slack = desk.get(case_id)["slack"]
    assert slack["status"] == "delivered" and slack["channel"] == "C0FINANCE"


def test_a_rate_limit_on_the_managers_dm_never_posts_the_thread_line_twice(
    desk: SlackHarness,
) -> None:
    finance_case(desk)
    desk.slack.rate_limits["chat.postMessage U0MGR1"] = 1
    desk.escalate("U0FIN1", desk.buttons()["escalate"])
    desk.settle()
    assert [m for m in desk.slack.messages if m.channel == "D0MGR1"] == []  # waiting
    desk.sweep(seconds_ahead=5)
    assert len([m for m in desk.slack.messages if m.channel == "D0MGR1"]) == 1
    lines = [m.text for m in desk.slack.thread(desk.card()) if "Escalated" in m.text]
    assert len(lines) == 1, lines
    with desk.runtime.db.read() as session:
        steps = session.scalars(select(Job).where(col(Job.kind) == SLACK_CALL)).all()
    assert all(j.status == "done" for j in steps)


def test_a_refusal_is_shown_in_the_modal_the_click_opens_naming_the_case(
    desk: SlackHarness,
) -> None:
    case_id = finance_case(desk)
    approve(desk, "U0STRANGER")
    said = desk.refused("U0STRANGER")
    assert said.startswith(f":no_entry: Case `{case_id}` (600.00 USD"), said
    assert "Only the finance group may decide this case." in said


def _trigger_expired(desk: SlackHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Slack's trigger_id lasts three seconds: this one is past them when views.open runs."""
    monkeypatch.setattr(desk.slack.workspace, "issue_trigger", lambda user: "1.expired")


def test_a_refusal_whose_modal_cannot_open_answers_through_the_response_url(
    desk: SlackHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    case_id = finance_case(desk)
    _trigger_expired(desk, monkeypatch)
    approve(desk, "U0STRANGER")
    [told] = [m for m in desk.slack.ephemeral if m.to == "U0STRANGER"]
    assert told.text.startswith(f":no_entry: Case `{case_id}`")
    assert "chat.postEphemeral" not in desk.slack.methods()  # respond(), not the Web API


def test_a_refusal_in_a_channel_without_the_bot_reaches_the_person_as_a_dm(
    desk: SlackHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    finance_case(desk)
    token = desk.buttons()["approve"]
    desk.slack.workspace.channels["C0FINANCE"].member = False
    expired = f"{desk.slack.base_url}sandbox/slack/respond/expired"
    monkeypatch.setattr(desk.slack, "response_url", lambda *args: expired)
    _trigger_expired(desk, monkeypatch)
    desk.approve("U0STRANGER", token)
    desk.settle()
    [dm] = [m for m in desk.slack.messages if m.channel == "D0STRANGER"]
    assert dm.text.startswith(":no_entry:")


def test_an_unexpected_error_shows_an_incident_id_never_the_exception(
    desk: SlackHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("database password is hunter2")

    monkeypatch.setattr(approvals, "preview", boom)
    finance_case(desk)
    approve(desk, "U0FIN1")
    [told] = [m for m in desk.slack.ephemeral if m.to == "U0FIN1"]
    assert "incident `" in told.text and "hunter2" not in told.text


def test_a_click_is_acknowledged_while_background_work_fills_its_pool(
    desk: SlackHarness,
) -> None:
    case_id = finance_case(desk)
    token = desk.buttons()["approve"]
    release = threading.Event()
    busy = [desk.surface.pool.submit(release.wait) for _ in range(8)]  # Stripe, backtests...
    answered: list[int] = []
    try:
        clicker = threading.Thread(
            target=lambda: answered.append(desk.approve("U0FIN1", token).status_code)
        )
        clicker.start()
        clicker.join(timeout=20)  # a liveness bound, far above Slack's 3 s: not a timing test
        assert answered == [200], "the acknowledgement waited behind background jobs"
        actions = [r["action"] for r in desk.get(case_id)["audit"]]
        assert "approval.recorded" in actions or "case.approved" in actions, actions
    finally:
        release.set()
        for future in busy:
            future.result(timeout=10)
    desk.settle()
    assert desk.get(case_id)["status"] == "refunded"


def test_inviting_the_bot_posts_the_cards_it_could_not_take(desk: SlackHarness) -> None:
    desk.slack.workspace.channels["C0FINANCE"].member = False
    case_id = finance_case(desk)
    assert desk.get(case_id)["slack"]["status"] == "not delivered to Slack"
    desk.slack.workspace.channels["C0FINANCE"].member = True  # /invite @Refund Desk
    joined = fixture("app_home_opened.json")
    joined["event"] = {
        "type": "member_joined_channel",
        "user": "U0BOT",
        "channel": "C0FINANCE",
        "channel_type": "C",
        "team": "T0FAKE",
        "event_ts": "1700000000.9",
    }
    assert desk.event(joined).status_code == 200
    desk.settle()
    assert desk.get(case_id)["slack"]["status"] == "delivered"
    assert "approve" in desk.buttons("C0FINANCE")
    assert "Not delivered to Slack" not in _home(desk, "U0LEAD1")
    actions = [r["action"] for r in desk.get(case_id)["audit"]]
    assert actions.count("slack.undelivered") == 1 and "slack.redelivered" in actions
