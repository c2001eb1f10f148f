"""The gate's proof covers who may pay and how much, not only the rules: approver groups,
managers, `rates`, `leads` and `operators` (issue item 8)."""

from __future__ import annotations

import pytest

from refund_desk.policy.prove import prove, to_json
from tests.helpers import ACME

BASE = ACME.read_text().replace("leads: [U0LEAD1]", "leads: [U0LEAD1, U0LEAD2]")
REVIEW = "review_sample_rate: 0.05"
WITH_EUR = BASE.replace(REVIEW, REVIEW + "\nrates: {EUR: 1.08}")


def settings(old: str, new: str) -> dict[str, bool]:
    """What the proof says of each changed setting: permissive or not."""
    report = prove(old, new, describe=False)
    return {s.name: s.permissive for s in report.settings}


LOOSER = {
    "a lead added to the managers": (
        BASE,
        BASE.replace("managers: {members: [U0MGR1]", "managers: {members: [U0MGR1, U0LEAD1]"),
        "managers.members",
    ),
    "the managers as a user group": (
        BASE,
        BASE.replace("managers: {members: [U0MGR1]", "managers: {usergroup: S0ALL"),
        "managers.usergroup",
    ),
    "a lead swapped for a stranger": (
        BASE,
        BASE.replace("leads: [U0LEAD1, U0LEAD2]", "leads: [U0LEAD1, U0STRANGER]"),
        "leads",
    ),
    "a far lower EUR rate": (WITH_EUR, WITH_EUR.replace("EUR: 1.08", "EUR: 0.0001"), "rates.EUR"),
    "a rate where there was none": (BASE, WITH_EUR, "rates.EUR"),
    "an operator added": (
        BASE,
        BASE.replace(REVIEW, REVIEW + "\noperators: {members: [U0OPS]}"),
        "operators.members",
    ),
    "a group's limit raised": (
        BASE,
        BASE.replace(
            "finance: {members: [U0FIN1, U0FIN2], limit: 5000",
            "finance: {members: [U0FIN1, U0FIN2], limit: 9000",
        ),
        "approvers.finance.limit",
    ),
    "a new approver group": (
        BASE,
        BASE.replace("approvers:\n", "approvers:\n  audit: {members: [U0AUD], limit: 100000}\n"),
        "approvers.audit",
    ),
}


@pytest.mark.parametrize("name", list(LOOSER))
def test_widening_authority_is_more_permissive(name: str) -> None:
    old, new, setting = LOOSER[name]
    assert new != old
    report = prove(old, new, describe=False)
    assert settings(old, new).get(setting) is True, report.settings
    assert report.more_permissive
    assert to_json(report)["more_permissive"] is True


def test_a_lower_rate_is_looser_a_higher_one_and_removing_it_are_not() -> None:
    higher = WITH_EUR.replace("EUR: 1.08", "EUR: 1.50")
    assert settings(WITH_EUR, higher) == {"rates.EUR": False}
    assert settings(WITH_EUR, BASE) == {"rates.EUR": False}
    assert settings(higher, WITH_EUR) == {"rates.EUR": True}


def test_narrowing_authority_is_not_more_permissive() -> None:
    narrower = (
        BASE.replace("managers: {members: [U0MGR1], limit: 10000}", "")
        .replace("leads: [U0LEAD1, U0LEAD2]", "leads: [U0LEAD1]")
        .replace("members: [U0FIN1, U0FIN2], limit: 5000", "members: [U0FIN1], limit: 4000")
    )
    report = prove(BASE, narrower, describe=False)
    assert report.settings and not any(s.permissive for s in report.settings), report.settings
    # a review now goes to fewer people with a lower limit: listed, not looser
    assert {r.kind for r in report.regions} == {"stricter-review"}
    assert not report.more_permissive


def test_a_routed_group_with_someone_new_is_a_looser_review() -> None:
    wider = BASE.replace(
        "finance: {members: [U0FIN1, U0FIN2]", "finance: {members: [U0FIN1, U0FIN2, U0LEAD1]"
    )
    report = prove(BASE, wider, describe=False)
    assert "looser-review" in {r.kind for r in report.regions}
    assert report.more_permissive
