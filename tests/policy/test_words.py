"""The policy in words: the prover's bounds as phrases, a condition's change alone, settings
with people by name, the diff and the proof a lead reads."""

from __future__ import annotations

import pytest

from refund_desk.bot import mrkdwn
from refund_desk.governance.proof import proof_between, proof_summary
from refund_desk.policy import PolicyDocument, parse_policy
from refund_desk.policy.authority import Setting
from refund_desk.policy.diff import diff_policies, diff_text, when_change
from refund_desk.policy.words import bound_words, rule_name, setting_words
from tests.policy.conftest import acme_text

LOOSER = acme_text().replace("request.amount <= 50 and", "request.amount <= 80 and")


@pytest.mark.parametrize(
    ("fact", "bound", "said"),
    [
        ("request.amount", "from 50.01 USD to 80.00 USD", "amount 50.01 to 80.00 USD"),
        ("request.amount", "above 50.00 USD to 80.00 USD", "amount over 50.00 to 80.00 USD"),
        ("request.amount", "> 500.00 USD", "amount over 500.00 USD"),
        ("order.age_days", "≤ 30", "order up to 30 days old"),
        ("order.age_days", "> 90", "order 91 or more days old"),
        ("customer.chargebacks_365d", "≤ 0 or null", "0 chargebacks in a year (or unknown)"),
        ("request.reason", "one of damaged, wrong_item", "reason damaged or wrong item"),
        ("request.reason", "null (unknown)", "reason unknown"),
        ("customer.verified", "false", "the customer not verified"),
        ("request.possible_duplicate", "true", "a possible duplicate"),
        ("advisor.confidence", "< 0.6", "AI confidence under 0.6"),
    ],
)
def test_a_bound_reads_as_a_phrase(fact: str, bound: str, said: str) -> None:
    assert bound_words(fact, bound) == said


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (
            'request.reason == "damaged" and request.amount <= 50 and order.age_days <= 30',
            'request.reason == "damaged" and request.amount <= 80 and order.age_days <= 30',
            "when `request.amount &lt;=` `50` → `80`",
        ),
        (
            "request.amount > 200",
            "request.amount > 200 and customer.verified",
            "when after `request.amount &gt; 200`: added `and customer.verified`",
        ),
        (
            'request.reason == "damaged" and request.amount <= 50',
            "request.amount <= 50",
            'when removed `request.reason == "damaged" and`',
        ),
        (
            "order.age_days > 90",
            "order.refunded > 90",
            "when `order.age_days` → `order.refunded` `&gt; 90`",
        ),
        ("order.age_days > 90", "order.age_days>90", "when: only its spacing changed"),
    ],
)
def test_a_changed_condition_shows_only_what_changed(old: str, new: str, said: str) -> None:
    assert mrkdwn.render(when_change(old, new)) == said


def test_settings_name_people_and_limits_in_words() -> None:
    leads = Setting("leads", "U0LEAD1, U0LEAD2", "U0LEAD1, U0X", True)
    assert mrkdwn.render(setting_words(leads)) == "leads: added <@U0X>; removed <@U0LEAD2> (looser)"
    limit = Setting("approvers.finance.limit", "5000 USD", "8000 USD", True)
    assert setting_words(limit).as_text() == "finance's limit: 5000 USD → 8000 USD (looser)"
    group = Setting("approvers.audit", "none", "U0AUD1 up to 10 USD", True)
    said = "group audit: none → <@U0AUD1> up to 10 USD (looser)"
    assert mrkdwn.render(setting_words(group)) == said


def test_rules_are_named_by_what_they_are_for(acme: PolicyDocument) -> None:
    assert rule_name(acme, "large").as_text() == "“Refunds over 500.00 USD go to finance” (large)"
    assert rule_name(acme, "default").as_text() == (
        "the default (Anything else goes to the support leads)"
    )
    assert rule_name(acme, "guardrail:possible-duplicate").as_text() == (
        "a hard limit (another open case or a recent refund of this amount exists)"
    )
    assert rule_name(None, "large").as_text() == "large"


def test_a_diff_in_words_names_rules_people_and_only_what_changed(acme: PolicyDocument) -> None:
    text = LOOSER.replace("leads: [U0LEAD1]", "leads: [U0LEAD1, U0LEAD2]")
    text = text.replace("limit: 5000, channel: C0FINANCE", "limit: 8000, channel: C0MONEY")
    text = text.replace(
        "  - id: large\n",
        "  - id: huge\n    description: Huge refunds are refused\n    when: request.amount > "
        "5000\n    outcome: deny\n  - id: large\n",
    )
    new = parse_policy(text)
    said = mrkdwn.render(diff_text(acme, new, old="v1", new="d2")).split("\n")
    assert said == [
        "Changes from v1 to d2:",
        "~ “Damaged items up to 50.00 USD, bought in the last 30 days, refund themselves” "
        "(`damaged-small`): when `request.amount &lt;=` `50` → `80`",
        "+ New rule “Huge refunds are refused” (`huge`) at position 4: denied",
        "    details: `huge` when `request.amount &gt; 5000`",
        "• finance's limit: 5000 USD → 8000 USD; finance's channel: <#C0FINANCE> → <#C0MONEY>",
        "• leads: added <@U0LEAD2>",
    ]
    # the record keeps its shape: kind, name, detail (the CLI's and MCP's JSON)
    assert [(c.kind, c.name) for c in diff_policies(acme, new)] == [
        ("changed", "damaged-small"),
        ("added", "huge"),
        ("setting", "approvers"),
        ("setting", "leads"),
    ]


def test_the_proof_says_which_requests_change_with_an_example(acme: PolicyDocument) -> None:
    looser = parse_policy(LOOSER)
    said = proof_summary(1, proof_between(acme_text(), LOOSER), (acme, looser)).as_text()
    head, line = said.split("\n")
    assert head == "Proved against v1: more permissive (1 kind of request):"
    assert line.startswith(
        "• Pays automatically: amount 50.01 to 80.00 USD, reason damaged, order up to 30 days "
        "old — e.g. "
    )
    example = line.split(" — e.g. ")[1].split(" (was: ")[0]
    amount, reason, age = example.split(", ")
    assert 50.01 <= float(amount.removesuffix(" USD")) <= 80 and reason == "damaged"
    assert 0 <= int(age.removesuffix(" days old")) <= 30
    assert line.endswith(
        "(was: support leads (up to 500.00 USD), tier 3, by the default (Anything else goes to "
        "the support leads); now: paid automatically by “Damaged items up to 50.00 USD, bought "
        "in the last 30 days, refund themselves” (damaged-small))"
    )
    assert "refund-desk policy prove" not in said  # nothing for a terminal


def test_regions_alike_share_a_line_and_settings_follow(acme: PolicyDocument) -> None:
    raised = acme_text().replace("limit: 5000,", "limit: 8000,")
    said = proof_summary(1, proof_between(acme_text(), raised), (acme, parse_policy(raised)))
    lines = said.as_text().split("\n")
    assert lines[0].startswith("Proved against v1: more permissive (") and lines[0].endswith(
        "kinds of request and 1 setting):"
    )
    assert any(
        line.startswith("• A looser review: ")
        and "(was: finance (up to 5000.00 USD), tier 4; now: finance (up to 8000.00 USD), tier 4)"
        in line
        for line in lines
    ), lines
    assert lines[-1] == "• finance's limit: 5000 USD → 8000 USD (looser)"
    alike = proof_summary(1, proof_between(acme_text(), acme_text()), (acme, acme))
    assert alike.as_text() == "Proved against v1: no request is decided differently."
