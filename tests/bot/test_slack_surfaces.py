"""Slash commands, App Home, escalation DMs and the outbox's patience with Slack."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from refund_desk.demo.slack import SlackEmulator
from tests.bot.helpers import approve, finance_case
from tests.helpers import ACME
from tests.slack_helpers import TOKEN, SlackHarness, fixture


@pytest.fixture()
def desk(sqlite_url: str, slack_desk: Callable[[str, str], SlackHarness]) -> SlackHarness:
    return slack_desk(sqlite_url, ACME.read_text())


def test_refund_command_files_a_case_with_the_operator_as_requester(desk: SlackHarness) -> None:
    payment = desk.payment("900.00")
    assert desk.slash("U0FIN1", "/refund").status_code == 200
    [view] = desk.slack.views
    assert view["callback_id"] == "file_case_modal"
    bad = desk.submit(
        "U0FIN1",
        "file_case_modal",
        view["private_metadata"],
        {
            "payment": payment,
            "email": "not-an-email",
            "currency": "USD",
            "amount": "600.00",
            "reason": "damaged",
            "message": None,
        },
    )
    assert bad.json()["response_action"] == "errors" and "email" in bad.json()["errors"]
    desk.submit(
        "U0FIN1",
        "file_case_modal",
        view["private_metadata"],
        {
            "payment": payment,
            "email": "ada@example.com",
            "currency": "USD",
            "amount": "600.00",
            "reason": "damaged",
            "message": "Box crushed.",
        },
    )
    desk.settle()
    told = [m for m in desk.slack.ephemeral if m.to == "U0FIN1"]
    assert told and "Filed case" in told[-1].text
    case_id = told[-1].text.split("`")[1]
    case = desk.get(case_id)
    assert case["status"] == "awaiting_approval" and case["source"] == "slack"
    # Segregation of duties: the operator who filed it may not approve it.
    approve(desk, "U0FIN1")
    assert [r["payload"]["code"] for r in desk.refusals(case_id)] == ["own_request"]
    approve(desk, "U0FIN2")
    assert desk.get(case_id)["status"] == "refunded"


def test_refund_command_reports_an_unknown_payment(desk: SlackHarness) -> None:
    desk.slash("U0FIN1", "/refund")
    [view] = desk.slack.views
    desk.submit(
        "U0FIN1",
        "file_case_modal",
        view["private_metadata"],
        {
            "payment": "py_nope",
            "email": "ada@example.com",
            "currency": "USD",
            "amount": None,
            "reason": "other",
            "message": None,
        },
    )
    desk.settle()
    assert "not filed" in desk.slack.ephemeral[-1].text
    assert desk.counts()[0] == 0


def test_refund_policy_command_reads_the_policy(desk: SlackHarness) -> None:
    response = desk.slash("U0LEAD2", "/refund-policy", "history")
    assert "v1" in response.text  # Slack shows an acknowledgement's text to the user alone
    shown = desk.slash("U0LEAD2", "/refund-policy", "show v1").text
    assert "acme-refunds v1" in shown and "damaged-small" in shown
    assert "show [vN]" in desk.slash("U0LEAD2", "/refund-policy", "").text


def test_app_home_shows_the_viewers_queue(desk: SlackHarness) -> None:
    case_id = finance_case(desk)
    assert desk.event(fixture("app_home_opened.json")).status_code == 200
    desk.settle()
    home = desk.slack.home["U0FIN1"]
    text = str(home["blocks"])
    assert case_id in text and "Waiting for you" in text and "Rules fired this week" in text
    other = fixture("app_home_opened.json")
    other["event"]["user"] = "U0LEAD1"  # not in finance: the case is not in their queue
    desk.event(other)
    desk.settle()
    assert case_id not in str(desk.slack.home["U0LEAD1"]["blocks"]).split("Recent decisions")[0]


def test_escalation_sends_the_card_to_managers_who_may_approve(desk: SlackHarness) -> None:
    case_id = finance_case(desk)
    desk.approve("U0MGR1", desk.buttons()["approve"])  # not yet escalated
    desk.escalate("U0FIN1", desk.buttons()["escalate"])
    desk.settle()
    [dm] = [m for m in desk.slack.messages if m.channel == "D0MGR1"]
    assert "approve" in desk.slack.buttons(dm)
    desk.approve("U0MGR1", desk.slack.buttons(dm)["approve"], channel="D0MGR1")
    desk.settle()
    assert desk.get(case_id)["status"] == "refunded"
    assert desk.slack.buttons(dm) == {} and desk.slack.buttons(desk.card()) == {}
    assert [r["payload"]["code"] for r in desk.refusals(case_id)] == ["not_an_approver"]


def test_outbox_waits_out_a_rate_limit_and_loses_nothing(desk: SlackHarness) -> None:
    desk.slack.rate_limits["chat.postMessage"] = 2
    finance_case(desk)
    assert desk.slack.in_channel("C0FINANCE") == []  # rate limited: waiting, not failed
    desk.sweep(seconds_ahead=5)
    desk.sweep(seconds_ahead=10)
    assert len(desk.slack.in_channel("C0FINANCE")) == 1


def test_the_emulator_refuses_what_slack_refuses(slack: SlackEmulator) -> None:
    client = WebClient(token=TOKEN, base_url=slack.api_url)
    with pytest.raises(SlackApiError, match="invalid_blocks"):
        client.chat_postMessage(channel="C0REFUNDS", text="x", blocks=[{"type": "divider"}] * 51)
    with pytest.raises(SlackApiError, match="invalid_blocks"):
        client.chat_postMessage(
            channel="C0REFUNDS",
            text="x",
            blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": "a" * 3001}}],
        )
    with pytest.raises(SlackApiError, match="unknown_method"):
        client.api_call("chat.teleport")
    with pytest.raises(SlackApiError, match="invalid_auth"):
        WebClient(token="xoxb-wrong", base_url=slack.api_url).auth_test()
