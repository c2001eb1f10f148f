"""The demo's policy has two leads, people of its Slack workspace, so a loosening publish (which
always takes a second lead) can be finished in the demo; the prompts name who can confirm, and
say so when nobody can."""

from __future__ import annotations

import re
from collections.abc import Callable

from refund_desk.demo.runner import policy_source, users_from
from refund_desk.governance.backtest import ensure_backtest
from refund_desk.governance.drafts import save_draft
from refund_desk.governance.versions import control
from refund_desk.policy import parse_policy
from refund_desk.storage.audit import Actor
from tests.slack_helpers import SlackHarness

LEE, LINA = "U0LEAD1", "U0LEAD2"
# Damaged items up to 80.00 refund themselves (50.00 before): looser, so two leads.
LOOSER = policy_source().replace("request.amount <= 50 and", "request.amount <= 80 and")


def one_lead(source: str) -> str:
    return re.sub(r"(?m)^leads: .*$", "leads: [U0LEAD1]", source)


def say(desk: SlackHarness, command: str, user: str) -> str:
    answer = desk.slash(user, "/refund-policy", command)
    assert answer.status_code == 200, answer.text
    return str(answer.text)


def looser_draft(desk: SlackHarness, source: str) -> None:
    """Draft d1 (looser), backtested, as Lee would have it from the draft modal."""
    assert policy_source() != LOOSER, "the demo policy's damaged-small rule changed"
    with desk.runtime.db.write() as session:
        audit, lee = desk.runtime.desk.audit, Actor("human", LEE)
        save_draft(session, audit, source=source, actor=lee)
        ensure_backtest(session, audit, source=source, actor=lee)


def active_version(desk: SlackHarness) -> int | None:
    with desk.runtime.db.read() as session:
        return control(session).active_version


def test_the_demo_policy_has_two_leads_the_workspace_shows_as_leads() -> None:
    doc = parse_policy(policy_source())
    assert list(doc.leads or []) == [LEE, LINA]
    roles = {user.id: user for user in users_from(doc)}
    assert roles[LEE].role.startswith("lead") and roles[LINA].role.startswith("lead")
    assert roles[LINA].name == "Lina Haddad"


def test_a_loosening_publish_is_finished_by_the_second_lead_named_in_the_prompts(
    sqlite_url: str, slack_desk: Callable[[str, str], SlackHarness]
) -> None:
    desk = slack_desk(sqlite_url, policy_source())
    looser_draft(desk, LOOSER)
    preview = say(desk, "publish d1", LEE)
    assert (
        f"Then a second lead confirms it (it is more permissive) with the same hash: <@{LINA}>."
        in preview
    ), preview
    command = re.search(r"`/refund-policy (publish d1 confirm [0-9a-f]{16})`", preview)
    assert command, preview
    asked = say(desk, command[1], LEE)
    assert (
        f"To publish d1 needs a second lead (it is more permissive): <@{LINA}> confirms with "
        f"`/refund-policy {command[1]}`." in asked
    ), asked
    assert active_version(desk) == 1
    again = say(desk, "publish d1", LINA)
    assert (
        f"<@{LEE}> asked to publish d1 (it is more permissive); a different lead (<@{LINA}>) "
        "confirms it with the same hash." in again
    ), again
    assert "published d1 as" in say(desk, command[1], LINA)
    assert active_version(desk) == 2


def test_with_one_lead_the_prompt_says_nobody_can_confirm_in_slack(
    sqlite_url: str, slack_desk: Callable[[str, str], SlackHarness]
) -> None:
    desk = slack_desk(sqlite_url, one_lead(policy_source()))
    looser_draft(desk, one_lead(LOOSER))
    preview = say(desk, "publish d1", LEE)
    assert (
        "It needs a second lead (it is more permissive), and the active policy names no other "
        "lead, so nobody can confirm it here" in preview
    ), preview
    command = re.search(r"`/refund-policy (publish d1 confirm [0-9a-f]{16})`", preview)
    assert command, preview
    asked = say(desk, command[1], LEE)
    assert "needs a second lead (it is more permissive): nobody can confirm it in Slack" in asked
