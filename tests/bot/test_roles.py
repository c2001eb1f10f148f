"""Roles mean one thing everywhere: the words the demo shows beside each person come from the
function the checks use (`people.roles`), so nobody shown a role is refused what it allows."""

from __future__ import annotations

from collections.abc import Callable

from refund_desk.cases.people import may_read, roles
from refund_desk.demo.runner import policy_source, users_from
from refund_desk.policy import parse_policy
from tests.slack_helpers import SlackHarness


def test_each_person_the_demo_shows_with_a_role_may_look_cases_up(
    sqlite_url: str, slack_desk: Callable[[str, str], SlackHarness]
) -> None:
    desk = slack_desk(sqlite_url, policy_source())
    shown = {user.id: user.role for user in users_from(parse_policy(policy_source()))}
    assert shown["U0OPS1"] == "operator", "Olivia is the policy's operator"
    assert shown["U0LEAD1"].startswith("lead")
    for user, role in shown.items():
        answer = desk.slash(user, "/refund", "find nobody@example.com").text
        assert "No case matches" in answer, (user, role, answer)


def test_someone_the_policy_does_not_name_has_no_role_and_may_not_read() -> None:
    doc = parse_policy(policy_source())
    assert roles(doc, "U0STRANGER", None) == []
    assert not may_read(doc, "U0STRANGER", None)
    assert roles(doc, "U0MGR1", None) == ["manager"]
    assert roles(doc, "U0LEAD1", None) == ["lead", "support-leads approver"]
