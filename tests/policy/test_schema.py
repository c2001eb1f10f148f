"""Parsing and validating policy documents: every problem, located by rule."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from refund_desk.policy import (
    PolicyDocument,
    PolicyInvalid,
    Problem,
    approver_limit,
    parse_policy,
    policy_hash,
    run_policy_tests,
)
from tests.policy.conftest import acme_raw, acme_text, dump


def problems_of(raw: dict[str, Any] | str) -> list[Problem]:
    with pytest.raises(PolicyInvalid) as info:
        parse_policy(raw if isinstance(raw, str) else dump(raw))
    return info.value.problems


def messages(raw: dict[str, Any] | str) -> list[str]:
    return [str(p) for p in problems_of(raw)]


def test_acme_parses_and_its_tests_pass(acme: PolicyDocument) -> None:
    assert acme.policy == "acme-refunds"
    assert acme.currency == "USD"
    assert [r.id for r in acme.rules] == [
        "exceeds-refundable",
        "risk-signal",
        "damaged-small",
        "large",
    ]
    assert acme.rule("damaged-small").tier == 2
    assert acme.rule("exceeds-refundable").tier == 1  # deny defaults to informational
    assert acme.default.approvers == "support-leads"
    assert acme.approvers["finance"].limit == Decimal(5000)
    assert acme.approvers["finance"].channel == "C0FINANCE"
    assert acme.managers is not None and acme.managers.members == ["U0MGR1"]
    assert acme.leads == ["U0LEAD1"]
    assert acme.channels["approvals"] == "C0REFUNDS"
    assert acme.sla == {3: "4h", 4: "24h"}
    assert acme.reminder_at == 0.5
    assert acme.business_hours is not None and acme.business_hours.tz == "Europe/Berlin"
    assert acme.advisor.min_confidence == 0.6
    assert acme.breaker.max_amount_per_hour == Decimal(20000)
    assert acme.review_sample_rate == 0.05
    results = run_policy_tests(acme)
    assert [r.passed for r in results] == [True], results


def test_approver_limit_in_minor_units(acme: PolicyDocument) -> None:
    assert approver_limit(acme, "support-leads") == 50_000
    assert approver_limit(acme, "finance") == 500_000
    assert approver_limit(acme, "managers") == 1_000_000
    with pytest.raises(KeyError):
        approver_limit(acme, "nobody")


def test_minimal_policy_and_default_tiers() -> None:
    doc = parse_policy(
        """
policy: tiny
currency: jpy
rules:
  - {id: small, when: "request.amount <= 5000", outcome: approve, approvers: team}
  - {id: odd, when: "request.reason == 'other'", outcome: review, approvers: team}
  - {id: fraud, when: "request.reason == 'fraud_claim'", outcome: deny}
default: {outcome: deny, say: No.}
approvers: {team: {members: [U1AA], limit: 100000}}
"""
    )
    assert doc.currency == "JPY"
    assert [r.tier for r in doc.rules] == [2, 3, 1]
    assert doc.default.tier == 1
    assert doc.approvers_for(doc.rule("fraud")) == "team"  # falls back to the first group
    assert doc.sla == {} and doc.tests == [] and doc.managers is None


def test_required_keys() -> None:
    msgs = messages("policy: x\n")
    for key in ("currency", "rules", "default", "approvers"):
        assert f"{key}: required" in msgs


@pytest.mark.parametrize("where", ["top", "rule", "default", "group", "test"])
def test_unknown_keys_are_errors(where: str) -> None:
    raw = acme_raw()
    target = {
        "top": raw,
        "rule": raw["rules"][2],
        "default": raw["default"],
        "group": raw["approvers"]["finance"],
        "test": raw["tests"][0]["expect"],
    }[where]
    target["colour"] = "red"
    problems = problems_of(raw)
    assert len(problems) == 1
    assert problems[0].message == "unknown key 'colour'"
    if where == "rule":
        assert problems[0].rule == "damaged-small"
    if where == "default":
        assert problems[0].rule == "default"


def test_unknown_fact_named_with_rule_id() -> None:
    raw = acme_raw()
    raw["rules"][2]["when"] = "request.amout <= 50"
    assert messages(raw) == ["rule damaged-small: when: unknown fact 'request.amout'"]


def test_expression_that_does_not_compile() -> None:
    raw = acme_raw()
    raw["rules"][3]["when"] = "request.amount >"
    (problem,) = problems_of(raw)
    assert problem.rule == "large" and problem.path == "when"
    assert problem.message.startswith("does not compile")


def test_expression_that_is_not_a_condition() -> None:
    raw = acme_raw()
    raw["rules"][3]["when"] = "request.amount + 1"
    (problem,) = problems_of(raw)
    assert problem.rule == "large"
    assert "not a condition" in problem.message


def test_expression_with_type_error_on_neutral_context() -> None:
    raw = acme_raw()
    raw["rules"][3]["when"] = "customer.verified > 1"
    (problem,) = problems_of(raw)
    assert "cannot evaluate" in problem.message


def test_functions_and_strings_are_not_facts() -> None:
    raw = acme_raw()
    raw["rules"][3]["when"] = (
        "request.amount > 500 and contains(request.source, 'web.form') "
        "and request.reason in ['damaged', 'late']"
    )
    parse_policy(dump(raw))


def test_duplicate_rule_ids() -> None:
    raw = acme_raw()
    raw["rules"][3]["id"] = "risk-signal"
    (problem,) = problems_of(raw)
    assert problem.rule == "risk-signal" and problem.path == "id"
    assert "duplicate rule id" in problem.message


def test_unknown_approver_group() -> None:
    raw = acme_raw()
    raw["rules"][3]["approvers"] = "finanse"
    raw["default"]["approvers"] = "leads"
    msgs = messages(raw)
    assert (
        "rule large: approvers: unknown approver group 'finanse' (groups: finance, support-leads)"
        in msgs
    )
    assert any(
        m.startswith("rule default: approvers: unknown approver group 'leads'") for m in msgs
    )


def test_review_without_approvers_needs_default_group() -> None:
    raw = acme_raw()
    del raw["rules"][3]["approvers"]
    doc = parse_policy(dump(raw))  # falls back to the default's group
    assert doc.approvers_for(doc.rule("large")) == "support-leads"
    del raw["default"]["approvers"]
    msgs = messages(raw)
    assert any(m.startswith("rule large: approvers: a review needs approvers") for m in msgs)
    assert any(m.startswith("rule default: approvers:") for m in msgs)
    assert any(m.startswith("rule damaged-small: approvers: no approvers") for m in msgs)


def test_tier_four_must_name_approvers() -> None:
    raw = acme_raw()
    del raw["rules"][1]["approvers"]
    assert messages(raw) == ["rule risk-signal: approvers: a tier-4 rule must name its approvers"]


def test_bad_values() -> None:
    raw = acme_raw()
    raw["currency"] = "XYZ"
    raw["rules"][2]["tier"] = 7
    raw["rules"][2]["outcome"] = "maybe"
    raw["sla"] = {3: "4 hours", 5: "1h"}
    raw["reminder_at"] = 1.5
    raw["business_hours"] = {
        "tz": "Mars/Olympus",
        "days": ["mon", "fri", "funday"],
        "start": "09:00",
        "end": 1020,
    }
    raw["advisor"] = {"min_confidence": 2}
    raw["review_sample_rate"] = -0.1
    raw["approvers"]["finance"]["members"] = ["bob@example.com"]
    raw["leads"] = ["U0LEAD1", "nobody"]
    problems = problems_of(raw)
    paths = {(p.rule, p.path) for p in problems}
    assert {
        (None, "currency"),
        ("damaged-small", "tier"),
        ("damaged-small", "outcome"),
        (None, "sla.3"),
        (None, "sla.5.[key]"),
        (None, "reminder_at"),
        (None, "business_hours.tz"),
        (None, "business_hours.days[2]"),
        (None, "business_hours.end"),
        (None, "advisor.min_confidence"),
        (None, "review_sample_rate"),
        (None, "approvers.finance.members[0]"),
        (None, "leads[1]"),
    } <= paths
    assert any("quotes" in p.message for p in problems if p.path == "business_hours.end")


def test_business_hours_order() -> None:
    raw = acme_raw()
    raw["business_hours"]["start"] = "18:00"
    (problem,) = problems_of(raw)
    assert problem.path == "business_hours" and "before end" in problem.message


def test_amounts_must_fit_the_currency() -> None:
    raw = acme_raw()
    raw["approvers"]["finance"]["limit"] = 10.005
    raw["breaker"]["max_amount_per_hour"] = -3
    msgs = messages(raw)
    assert "approvers.finance.limit: amount '10.005' has more decimals than USD allows (2)" in msgs
    assert any(m.startswith("breaker.max_amount_per_hour:") for m in msgs)


def test_tests_section_is_checked() -> None:
    raw = acme_raw()
    raw["tests"].append(
        {
            "name": raw["tests"][0]["name"],
            "given": {"request": {"amout": 5}, "shop": {}},
            "expect": {"outcome": "approve", "rule": "nope"},
        }
    )
    msgs = messages(raw)
    assert any(m.startswith("tests[1].name: duplicate test") for m in msgs)
    assert "tests[1].given: unknown fact 'request.amout'" in msgs
    assert "tests[1].given: unknown fact section 'shop'" in msgs
    assert "tests[1].expect.rule: no rule 'nope'" in msgs


def test_many_problems_at_once_each_with_its_rule() -> None:
    raw = acme_raw()
    raw["rules"][0]["when"] = "request.amount > order.refundabel"
    raw["rules"][1]["colour"] = "red"
    raw["rules"][2]["when"] = "request.amout <= 50 and customer.vip"
    raw["rules"][3]["approvers"] = "finanse"
    raw["rules"].append({"when": "request.amount > 1", "outcome": "deny"})
    raw["sla"][3] = "soon"
    text = dump(raw)
    with pytest.raises(PolicyInvalid) as info:
        parse_policy(text)
    lines = str(info.value).splitlines()
    assert len(info.value.problems) == len(lines) == 7
    assert "rule exceeds-refundable: when: unknown fact 'order.refundabel'" in lines
    assert "rule risk-signal: unknown key 'colour'" in lines
    assert "rule damaged-small: when: unknown fact 'request.amout'" in lines
    assert "rule damaged-small: when: unknown fact 'customer.vip'" in lines
    assert any(line.startswith("rule large: approvers: unknown approver group") for line in lines)
    assert "rules[4].id: required" in lines
    assert any(line.startswith("sla.3: duration 'soon'") for line in lines)


def test_yaml_problems() -> None:
    assert messages("policy: [unclosed")[0].startswith("not valid YAML")
    assert messages("- just\n- a list\n") == ["a policy must be a YAML mapping"]
    text = acme_text().replace("currency: USD\n", "currency: USD\ncurrency: EUR\n")
    assert any("duplicate line 3: key 'currency'" in m for m in messages(text))


def test_policy_hash_is_stable_and_canonical(acme: PolicyDocument) -> None:
    text = acme_text()
    h = policy_hash(text)
    assert h == policy_hash(acme) == policy_hash(parse_policy(text))
    assert len(h) == 64 and int(h, 16) >= 0
    # formatting, comments, key order and number spelling do not count
    raw = acme_raw()
    raw["approvers"]["finance"]["limit"] = "5000.00"
    reordered = dict(reversed(list(raw.items())))
    assert policy_hash(dump(reordered) + "\n# comment\n") == h
    raw["rules"][2]["when"] = raw["rules"][2]["when"].replace("50", "60")
    assert policy_hash(dump(raw)) != h


# A text published before rules had descriptions: its hash is on record (backtests, versions).
BEFORE_DESCRIPTIONS = """
policy: tiny
currency: USD
rules:
  - {id: small, when: "request.amount <= 50", outcome: approve, approvers: team}
default: {outcome: review, approvers: team}
approvers: {team: {members: [U1AA], limit: 100}}
"""
BEFORE_DESCRIPTIONS_HASH = "07d5dfd5142dcd1c69edce00f56d8f62255822fb58aeff590d92706f2066195f"


def test_a_rule_may_say_what_it_is_for_and_the_hash_counts_it(acme: PolicyDocument) -> None:
    rule = acme.rule("damaged-small")
    said = "Damaged items up to 50.00 USD, bought in the last 30 days, refund themselves"
    assert rule.description == said
    assert acme.default.description == "Anything else goes to the support leads"
    raw = acme_raw()
    raw["rules"][2]["description"] = "Small damaged orders refund themselves"
    assert policy_hash(dump(raw)) != policy_hash(acme)  # a description is part of the text
    del raw["rules"][2]["description"]
    assert parse_policy(dump(raw)).rule("damaged-small").description is None


def test_a_text_without_descriptions_keeps_the_hash_it_had() -> None:
    assert policy_hash(BEFORE_DESCRIPTIONS) == BEFORE_DESCRIPTIONS_HASH


def test_a_description_is_words_not_an_essay() -> None:
    raw = acme_raw()
    raw["rules"][0]["description"] = "x" * 201
    raw["default"]["description"] = ""
    assert messages(raw) == [
        "rule exceeds-refundable: description: String should have at most 200 characters",
        "rule default: description: String should have at least 1 character",
    ]
