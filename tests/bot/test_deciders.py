"""Who may decide a case, said once: the card's header and "Decides:" line, App Home's queue and
the click all give the same answer (`cases.approvals.deciders`).

A person's escalation hands the case to the managers (its group may no longer decide it); an
SLA escalation calls the managers in beside the group; a group named as a Slack user group is
named on the card as that group, and its members decide.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest

from refund_desk.cases import approvals
from refund_desk.cases.approvals import may_decide
from refund_desk.demo.slack import SlackEmulator
from refund_desk.storage.models import Case
from tests.bot.helpers import approve, review_case, wall_clock
from tests.helpers import ACME
from tests.slack_helpers import PEOPLE, SlackHarness, fixture

HOUR = 3600
WHY = "want a manager to check carrier claim first"


GROUPS = (
    ACME.read_text()
    .replace(
        "finance: {members: [U0FIN1, U0FIN2], limit: 5000, channel: C0FINANCE}",
        "finance: {usergroup: S0FINANCE, limit: 5000, channel: C0FINANCE}",
    )
    .replace(
        "managers: {members: [U0MGR1], limit: 10000}",
        "managers: {usergroup: S0MANAGERS, limit: 10000}",
    )
)


@pytest.fixture()
def desk(any_db_url: str, slack_desk: Callable[[str, str], SlackHarness]) -> SlackHarness:
    return slack_desk(any_db_url, wall_clock(ACME.read_text()))


@pytest.fixture()
def group_desk(
    any_db_url: str, slack: SlackEmulator, slack_desk: Callable[[str, str], SlackHarness]
) -> SlackHarness:
    slack.workspace.usergroups.update(S0FINANCE=["U0FIN1", "U0FIN2"], S0MANAGERS=["U0MGR1"])
    return slack_desk(any_db_url, wall_clock(GROUPS))


def header(desk: SlackHarness) -> str:
    return str(desk.card().blocks[0]["text"]["text"])


def decides(desk: SlackHarness) -> str:
    """The card's "Decides:" line."""
    people = desk.card().blocks[1]["text"]["text"]
    [line] = [line for line in people.splitlines() if line.startswith("*Decides:*")]
    return str(line)


def named(line: str, groups: dict[str, list[str]]) -> set[str]:
    """The people a "Decides:" line names: mentioned, or members of a group it mentions."""
    people = set(re.findall(r"<@(U\w+)>", line))
    for group in re.findall(r"<!subteam\^(S\w+)>", line):
        people |= set(groups.get(group, []))
    return people


def clickable(desk: SlackHarness, case_id: str) -> set[str]:
    """Who of the workspace a click on the case would accept now (the click's own checks)."""
    directory = desk.surface.directory
    assert directory is not None
    directory.refresh()
    with desk.runtime.db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None
        return {u for u in PEOPLE if may_decide(session, case, u, directory)}


def refused_codes(desk: SlackHarness, case_id: str) -> list[str]:
    return [r["payload"]["code"] for r in desk.refusals(case_id)]


def home_queue(desk: SlackHarness, user: str) -> str:
    opened = fixture("app_home_opened.json")
    opened["event"]["user"] = user
    assert desk.event(opened).status_code == 200
    desk.settle()
    return json.dumps(desk.slack.home[user]["blocks"]).split("Recent decisions")[0]


def deny(desk: SlackHarness, user: str, value: str) -> None:
    """Click Deny and give a reason, unless the click is refused at once (its modal says)."""
    desk.click(user, "deny", value)
    view = desk.opened(user)
    if view is None or view["callback_id"] != "deny_modal":
        return
    desk.submit(user, "deny_modal", view["private_metadata"], {"reason": "Not eligible."})
    desk.settle()


# ---------------------------------------------------------------- a person escalates


def test_a_person_escalating_hands_the_case_to_the_managers_and_finance_may_no_longer_pay(
    desk: SlackHarness,
) -> None:
    case_id = review_case(desk)
    desk.escalate("U0FIN1", desk.buttons()["escalate"], reason=WHY)
    desk.settle()
    assert "needs 1 approver from the managers" in header(desk)
    assert named(decides(desk), {}) == {"U0MGR1"}, decides(desk)
    assert desk.get(case_id)["deciders"] == {
        "approvers": None,
        "managers": True,
        "people": ["U0MGR1"],
        "escalated_by": "U0FIN1",
    }

    desk.approve("U0FIN2", desk.buttons()["approve"])  # the fresh card's button
    desk.settle()
    deny(desk, "U0FIN2", desk.buttons()["deny"])
    assert desk.get(case_id)["status"] == "awaiting_approval"
    assert desk.refunds_at_processor(desk.get(case_id)["payment"]) == []
    assert refused_codes(desk, case_id) == ["not_an_approver", "not_an_approver"]
    said = desk.refused("U0FIN2")  # in the modal the click opened, naming the case
    assert "escalated to the managers: only they may decide it now" in said, said
    assert f"Case `{case_id}` (600.00 USD" in said, said

    approve(desk, "U0MGR1")
    assert desk.get(case_id)["status"] == "refunded"
    assert desk.get(case_id)["deciders"] is None, "a decided case waits for nobody"


def test_after_a_person_escalates_app_home_queues_the_case_for_the_managers_only(
    desk: SlackHarness,
) -> None:
    case_id = review_case(desk)
    assert case_id in home_queue(desk, "U0FIN2")
    desk.escalate("U0FIN1", desk.buttons()["escalate"], reason=WHY)
    desk.settle()
    assert case_id not in home_queue(desk, "U0FIN2")
    assert case_id in home_queue(desk, "U0MGR1")


# ---------------------------------------------------------------- the deadline passes


def test_a_passed_deadline_calls_the_managers_in_beside_finance_and_finance_still_decides(
    desk: SlackHarness,
) -> None:
    case_id = review_case(desk)
    desk.sweep(seconds_ahead=4 * HOUR + 5)
    assert desk.get(case_id)["escalation_level"] == 1
    assert "needs 1 approver from finance or the managers" in header(desk)
    assert named(decides(desk), {}) == {"U0FIN1", "U0FIN2", "U0MGR1"}, decides(desk)
    assert desk.get(case_id)["deciders"] == {
        "approvers": "finance",
        "managers": True,
        "people": ["U0FIN1", "U0FIN2", "U0MGR1"],
        "escalated_by": None,
    }
    approve(desk, "U0FIN2")
    assert desk.get(case_id)["status"] == "refunded"
    assert refused_codes(desk, case_id) == []


@pytest.mark.parametrize("escalation", ["none", "deadline", "person"])
def test_the_card_names_exactly_whom_a_click_accepts(desk: SlackHarness, escalation: str) -> None:
    case_id = review_case(desk)
    if escalation == "deadline":
        desk.sweep(seconds_ahead=4 * HOUR + 5)
    elif escalation == "person":
        desk.escalate("U0FIN1", desk.buttons()["escalate"], reason=WHY)
        desk.settle()
    assert named(decides(desk), {}) == clickable(desk, case_id)
    assert named(" ".join(f"<@{u}>" for u in desk.get(case_id)["deciders"]["people"]), {}) == (
        clickable(desk, case_id)
    ), "the API names the same people"


# ---------------------------------------------------------------- user groups


def test_a_user_group_of_deciders_is_named_on_the_card_and_its_members_decide(
    group_desk: SlackHarness,
) -> None:
    desk = group_desk
    case_id = review_case(desk)
    line = decides(desk)
    assert "<!subteam^S0FINANCE>" in line and "nobody" not in line, line
    assert "needs 1 approver from finance" in header(desk)
    groups = desk.slack.workspace.usergroups
    assert named(line, groups) == clickable(desk, case_id) == {"U0FIN1", "U0FIN2"}
    assert desk.get(case_id)["deciders"]["people"] == ["S0FINANCE"]
    approve(desk, "U0STRANGER")
    assert refused_codes(desk, case_id) == ["not_an_approver"]
    approve(desk, "U0FIN2")
    assert desk.get(case_id)["status"] == "refunded"


def test_escalated_to_managers_named_as_a_user_group_the_card_names_that_group(
    group_desk: SlackHarness,
) -> None:
    desk = group_desk
    case_id = review_case(desk)
    desk.escalate("U0FIN1", desk.buttons()["escalate"], reason=WHY)
    desk.settle()
    line = decides(desk)
    assert "<!subteam^S0MANAGERS>" in line and "S0FINANCE" not in line, line
    groups = desk.slack.workspace.usergroups
    assert named(line, groups) == clickable(desk, case_id) == {"U0MGR1"}
    approve(desk, "U0FIN2")
    assert refused_codes(desk, case_id) == ["not_an_approver"]
    approve(desk, "U0MGR1")
    assert desk.get(case_id)["status"] == "refunded"


# ---------------------------------------------------------------- what a click will do, said first


def test_the_modal_refuses_exactly_whom_the_click_refuses_and_for_the_same_reason(
    desk: SlackHarness,
) -> None:
    case_id = review_case(desk)
    core = desk.runtime.desk
    value = desk.buttons()["approve"]
    allowed = set()
    for user in PEOPLE:
        try:
            seen = approvals.preview(core, token_value=value, user=user)
        except approvals.ClickRefused as refusal:
            with pytest.raises(approvals.Refused) as clicked:
                approvals.act(core, token_value=value, user=user)
            assert clicked.value.code == refusal.code, user
            assert refusal.case is not None and case_id in refusal.case.as_text()
            continue
        assert seen.effect.as_text() == "Refunds 600.00 USD now to the customer's payment."
        allowed.add(user)
    assert allowed == clickable(desk, case_id) == {"U0FIN1", "U0FIN2"}
    assert desk.get(case_id)["status"] == "awaiting_approval", "a preview decides nothing"
