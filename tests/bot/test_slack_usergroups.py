"""People from Slack's directory: approver groups, managers, leads and operators may name a Slack
user group; membership is read with usergroups.users.list, at most a minute old, on every click;
and reads of the policy are for the people the policy names."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from slack_sdk import WebClient
from sqlalchemy import update
from sqlmodel import col

from refund_desk import clock
from refund_desk.bot.directory import SlackDirectory
from refund_desk.demo.slack import SlackEmulator
from refund_desk.policy.errors import PolicyInvalid
from refund_desk.policy.schema import parse_policy
from refund_desk.runtime import Runtime
from refund_desk.storage.models import Case
from tests.bot.helpers import approve, finance_case
from tests.helpers import ACME, Harness
from tests.slack_helpers import SlackHarness

GROUPS_POLICY = (
    ACME.read_text()
    .replace(
        "finance: {members: [U0FIN1, U0FIN2], limit: 5000, channel: C0FINANCE}",
        "finance: {usergroup: S0FINANCE, limit: 5000, channel: C0FINANCE}",
    )
    .replace("leads: [U0LEAD1]", "leads: {usergroup: S0LEADS}\noperators: {usergroup: S0OPS}")
)


@pytest.fixture()
def desk(
    sqlite_url: str, slack: SlackEmulator, slack_desk: Callable[[str, str], SlackHarness]
) -> SlackHarness:
    slack.workspace.usergroups.update(
        S0FINANCE=["U0FIN1", "U0FIN2"], S0LEADS=["U0LEAD1"], S0OPS=["U0OPS1"]
    )
    return slack_desk(sqlite_url, GROUPS_POLICY)


def test_someone_removed_from_the_group_can_no_longer_approve_an_open_case(
    desk: SlackHarness,
) -> None:
    case_id = finance_case(desk)
    card = desk.card("C0FINANCE")
    token = desk.slack.buttons(card)["approve"]
    desk.slack.workspace.usergroups["S0FINANCE"] = ["U0FIN1"]  # an admin removes U0FIN2
    with clock.travel(timedelta(seconds=61)):  # what was read is relied on for a minute at most
        desk.approve("U0FIN2", token)
        desk.settle()
        assert [r["payload"]["code"] for r in desk.refusals(case_id)] == ["not_an_approver"]
        assert desk.get(case_id)["status"] == "awaiting_approval"
        desk.approve("U0FIN1", token)
        desk.settle()
    assert desk.get(case_id)["status"] == "refunded"
    reads = [p for m, p in desk.slack.calls if m == "usergroups.users.list"]
    assert {p["usergroup"] for p in reads} >= {"S0FINANCE"}


def test_a_group_member_approves_and_a_stranger_is_refused(desk: SlackHarness) -> None:
    case_id = finance_case(desk)
    approve(desk, "U0STRANGER")
    assert [r["payload"]["code"] for r in desk.refusals(case_id)] == ["not_an_approver"]
    approve(desk, "U0FIN2")
    assert desk.get(case_id)["status"] == "refunded"


def test_leads_and_readers_come_from_their_groups(desk: SlackHarness) -> None:
    assert "acme-refunds v1" in desk.slash("U0OPS1", "/refund-policy", "show").text  # operator
    assert "acme-refunds v1" in desk.slash("U0FIN1", "/refund-policy", "show").text  # approver
    refused = desk.slash("U0STRANGER", "/refund-policy", "show").text
    assert "Only the policy's leads, approvers, managers, operators and viewers" in refused
    assert "damaged-small" not in refused
    assert "acme-refunds" not in desk.slash("U0STRANGER", "/refund-policy", "history").text
    assert "show [vN]" in desk.slash("U0STRANGER", "/refund-policy", "help").text
    assert "not_a_lead" not in desk.slash("U0LEAD1", "/refund-policy", "pause").text
    assert "Mode: *paused*" in desk.slash("U0LEAD1", "/refund-policy", "help").text
    refused = desk.slash("U0LEAD2", "/refund-policy", "resume").text
    assert "Only the policy's leads (<!subteam^S0LEADS>)" in refused


def test_a_group_names_members_a_usergroup_or_both() -> None:
    both = parse_policy(GROUPS_POLICY.replace("usergroup: S0FINANCE", "members: [U0FIN1]"))
    assert both.approvers["finance"].members == ["U0FIN1"]
    assert parse_policy(GROUPS_POLICY).leads == ["S0LEADS"]
    with pytest.raises(PolicyInvalid, match="usergroup"):
        parse_policy(GROUPS_POLICY.replace("usergroup: S0FINANCE, ", ""))
    with pytest.raises(PolicyInvalid):
        parse_policy(GROUPS_POLICY.replace("S0FINANCE", "U0FINANCE"))


def test_the_groups_named_follow_the_active_policy_and_the_open_cases(runtime: Runtime) -> None:
    """What a click refreshes before its transaction: the groups of the active version and of
    every version an open case keeps, read afresh each time (each version's groups are read
    once: a published version never changes)."""
    harness = Harness(runtime)
    directory = SlackDirectory(client=WebClient(token="xoxb-test"), db=runtime.db)
    assert directory.named() == set()  # no policy yet
    harness.publish(GROUPS_POLICY)
    assert directory.named() == {"S0FINANCE", "S0LEADS", "S0OPS"}
    case_id = harness.post(harness.request(harness.payment("900.00"), "600.00")).json()["id"]
    assert harness.get(case_id)["status"] == "awaiting_approval"  # kept under that version
    harness.publish(GROUPS_POLICY.replace("S0FINANCE", "S0TREASURY"))
    assert directory.named() == {"S0FINANCE", "S0TREASURY", "S0LEADS", "S0OPS"}
    with runtime.db.write() as session:  # the open case closes: its version's groups go
        session.execute(update(Case).where(col(Case.id) == case_id).values(status="denied"))
    assert directory.named() == {"S0TREASURY", "S0LEADS", "S0OPS"}
