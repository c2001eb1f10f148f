"""Evaluating policies with the real zen engine: order, default, errors, guardrails."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from refund_desk.policy import (
    CompiledPolicy,
    ContextInvalid,
    Decision,
    PolicyDocument,
    parse_policy,
)
from tests.policy.conftest import acme_raw, case, dump


def test_first_matching_rule_decides(compiled: CompiledPolicy) -> None:
    # chargebacks and > 500: risk-signal comes first
    d = compiled.evaluate(case(amount=60_000, refundable=100_000, customer={"chargebacks_365d": 1}))
    assert (d.outcome, d.rule, d.tier, d.approvers) == ("review", "risk-signal", 4, "finance")
    assert [(t.rule, t.result) for t in d.trace] == [
        ("exceeds-refundable", False),
        ("risk-signal", True),
    ]
    assert d.error is None and not d.automatic


def test_small_damaged_is_automatic(compiled: CompiledPolicy) -> None:
    d = compiled.evaluate(case(amount=2000))
    assert (d.outcome, d.rule, d.tier, d.policy_rule) == (
        "approve",
        "damaged-small",
        2,
        "damaged-small",
    )
    assert d.automatic and d.guardrails == () and d.counterfactual is None
    assert d.to_dict()["automatic"] is True


def test_boundary_is_exact(compiled: CompiledPolicy) -> None:
    assert compiled.evaluate(case(amount=5000)).rule == "damaged-small"
    assert compiled.evaluate(case(amount=5001)).rule == "default"


def test_policy_deny(compiled: CompiledPolicy) -> None:
    d = compiled.evaluate(case(amount=3000, refundable=2000))
    assert (d.outcome, d.rule, d.approvers) == ("deny", "exceeds-refundable", None)
    assert d.say == "The requested amount is more than what is left to refund on this order."


def test_default_when_nothing_matches(compiled: CompiledPolicy) -> None:
    d = compiled.evaluate(case(amount=10_000, request={"reason": "late"}))
    assert (d.outcome, d.rule, d.tier, d.approvers) == ("review", "default", 3, "support-leads")
    assert [t.result for t in d.trace] == [False] * 4


def test_large_review(compiled: CompiledPolicy) -> None:
    d = compiled.evaluate(case(amount=50_001, refundable=90_000))
    assert (d.outcome, d.rule, d.tier, d.approvers) == ("review", "large", 3, "finance")


def test_null_comparison_is_a_review_naming_the_fact(compiled: CompiledPolicy) -> None:
    d = compiled.evaluate(case(customer={"chargebacks_365d": None}))
    assert d.outcome == "review" and d.rule == "risk-signal"
    assert d.error == "rule risk-signal: cannot evaluate: customer.chargebacks_365d is unknown"
    assert d.tier == 4 and d.approvers == "finance"
    assert d.trace[-1].result is None and d.trace[-1].error == d.error
    assert not d.automatic


def test_several_unknown_facts_are_named(compiled: CompiledPolicy) -> None:
    d = compiled.evaluate(
        {"request": {"amount": 100, "currency": "USD"}, "order": {"currency": "USD"}}
    )
    assert d.outcome == "review" and d.rule == "exceeds-refundable"
    assert d.error == "rule exceeds-refundable: cannot evaluate: order.refundable is unknown"
    assert d.approvers == "support-leads" and d.tier == 3  # a deny rule falls back to default


def test_empty_context_is_a_review(compiled: CompiledPolicy) -> None:
    d = compiled.evaluate({})
    assert d.outcome == "review" and d.error is not None
    assert d.policy_rule == "exceeds-refundable"
    assert d.guardrails == ("guardrail:currency-mismatch",)
    assert "request.amount, order.refundable are unknown" in d.error


def test_equality_with_null_is_defined(compiled: CompiledPolicy) -> None:
    # `==` with null is false in zen, not an error: damaged-small just does not match
    d = compiled.evaluate(case(request={"reason": None}))
    assert d.rule == "default" and d.error is None


def test_non_boolean_result_is_a_review() -> None:
    raw = acme_raw()
    raw["rules"].insert(
        0, {"id": "odd", "when": "customer.open_cases > 0 ? 'x' : false", "outcome": "deny"}
    )
    compiled = CompiledPolicy.compile(parse_policy(dump(raw)))
    d = compiled.evaluate(case(customer={"open_cases": 2}))
    assert d.outcome == "review" and d.rule == "odd"
    assert d.error == "rule odd: gives 'x', not true or false"


def test_unknown_facts_in_context_are_refused(compiled: CompiledPolicy) -> None:
    with pytest.raises(ContextInvalid, match=r"unknown fact 'request\.amout'"):
        compiled.evaluate({"request": {"amout": 5}})
    with pytest.raises(ContextInvalid, match="minor units"):
        compiled.evaluate({"request": {"amount": 5.0}})
    with pytest.raises(ContextInvalid, match=r"request\.reason must be one of"):
        compiled.evaluate({"request": {"reason": "bored"}})


# --- guardrails ---------------------------------------------------------------------------


YES_MAN = """
policy: yes-man
currency: USD
rules: [{id: all, when: "true", outcome: approve, say: Refunded., approvers: team}]
default: {outcome: deny}
approvers: {team: {members: [U1AA], limit: 100}}
advisor: {min_confidence: 0.6}
"""


def permissive(**extra: Any) -> CompiledPolicy:
    """A policy that approves everything at tier 2, to show the guardrails alone."""
    raw = yaml.safe_load(YES_MAN)
    raw["rules"][0].update(extra)
    return CompiledPolicy.compile(parse_policy(dump(raw)))


@pytest.mark.parametrize(
    ("changes", "rule"),
    [
        ({"amount": 20_001}, "guardrail:exceeds-refundable"),
        (
            {"request": {"currency": "EUR"}, "order": {"currency": "EUR"}},
            "guardrail:currency-mismatch",
        ),
        ({"order": {"currency": "EUR"}}, "guardrail:currency-mismatch"),
        ({"request": {"currency": None}}, "guardrail:currency-mismatch"),
        ({"request": {"possible_duplicate": True}}, "guardrail:possible-duplicate"),
        ({"request": {"possible_duplicate": None}}, "guardrail:possible-duplicate"),
        ({"customer": {"verified": False}}, "guardrail:unverified-customer"),
        ({"customer": {"verified": None}}, "guardrail:unverified-customer"),
        ({"request": {"amount_source": "model_inference"}}, "guardrail:model-amount"),
        ({"advisor": {"injection_suspected": True}}, "guardrail:suspected-injection"),
        ({"advisor": {"confidence": 0.59}}, "guardrail:low-confidence"),
        ({"advisor": {"confidence": None}}, "guardrail:low-confidence"),
        ({"order": {"refundable": None}}, "guardrail:unknown-amount"),
    ],
)
def test_each_guardrail(changes: dict[str, Any], rule: str) -> None:
    compiled = permissive()
    assert compiled.evaluate(case(amount=2000, refundable=20_000)).automatic
    d = compiled.evaluate(case(**{"amount": 2000, "refundable": 20_000, **changes}))
    assert d.rule == rule and d.policy_rule == "all"
    assert d.guardrails[0] == rule
    assert not d.automatic
    if rule == "guardrail:exceeds-refundable":
        assert (d.outcome, d.approvers) == ("deny", None)
        assert d.say == "The requested amount is more than what is left to refund on this payment."
    else:
        assert d.outcome == "review" and d.tier == 3 and d.approvers == "team"
        assert d.say is None  # "Refunded." would be a lie now


def test_guardrails_in_order_and_all_recorded() -> None:
    d = permissive().evaluate(
        case(
            request={"possible_duplicate": True},
            customer={"verified": False},
            advisor={"injection_suspected": True},
        )
    )
    assert d.rule == "guardrail:possible-duplicate"
    assert d.guardrails == (
        "guardrail:possible-duplicate",
        "guardrail:unverified-customer",
        "guardrail:suspected-injection",
    )


def test_guardrail_tier_never_lowers() -> None:
    d = permissive(tier=4, approvers="team").evaluate(case(request={"possible_duplicate": True}))
    assert (d.outcome, d.tier) == ("review", 4)


@pytest.mark.parametrize("tier", [3, 4])
def test_approve_at_tier_three_or_four_needs_a_person(tier: int) -> None:
    d = permissive(tier=tier, approvers="team").evaluate(case())
    assert (d.outcome, d.rule, d.tier, d.approvers) == ("review", "all", tier, "team")
    assert d.guardrails == ()


def test_a_policy_deny_stays_deny(compiled: CompiledPolicy) -> None:
    d = compiled.evaluate(case(amount=3000, refundable=2000, order={"currency": "EUR"}))
    assert (d.outcome, d.rule, d.guardrails) == ("deny", "exceeds-refundable", ())


def test_a_possible_duplicate_waits_for_a_person_even_when_denied(
    compiled: CompiledPolicy,
) -> None:
    d = compiled.evaluate(case(amount=3000, refundable=2000, request={"possible_duplicate": True}))
    assert (d.outcome, d.rule, d.policy_rule) == (
        "review",
        "guardrail:possible-duplicate",
        "exceeds-refundable",
    )
    assert d.say is None and d.approvers == "support-leads"


def test_review_over_refundable_becomes_deny(compiled: CompiledPolicy) -> None:
    d = permissive(outcome="review", approvers="team").evaluate(case(amount=3000, refundable=2000))
    assert (d.outcome, d.rule, d.policy_rule) == ("deny", "guardrail:exceeds-refundable", "all")


def test_policy_review_keeps_its_say_under_guardrail() -> None:
    d = permissive(outcome="review", approvers="team").evaluate(case(order={"currency": "EUR"}))
    assert (d.outcome, d.rule, d.say) == ("review", "guardrail:currency-mismatch", "Refunded.")


def test_low_confidence_never_blocks_a_deny(compiled: CompiledPolicy) -> None:
    d = compiled.evaluate(case(amount=3000, refundable=1000, advisor={"confidence": 0.1}))
    assert d.outcome == "deny"


def test_a_flagged_injection_is_never_decided_without_a_person(compiled: CompiledPolicy) -> None:
    """Not paid, and not denied either: whatever the message tried, a person reads it."""
    flagged = {"injection_suspected": True}
    denied = compiled.evaluate(case(amount=3000, refundable=2000, advisor=flagged))
    assert (denied.outcome, denied.rule, denied.policy_rule) == (
        "review",
        "guardrail:suspected-injection",
        "exceeds-refundable",
    )
    assert denied.tier >= 3 and denied.approvers == "support-leads"
    paid = permissive().evaluate(case(advisor=flagged))
    assert (paid.outcome, paid.rule) == ("review", "guardrail:suspected-injection")


# --- currencies ---------------------------------------------------------------------------


def policy_in(currency: str, cap: str) -> CompiledPolicy:
    text = f"""
policy: p
currency: {currency}
rules:
  - {{id: small, when: "request.amount <= {cap}", outcome: approve, approvers: team}}
default: {{outcome: review, approvers: team}}
approvers: {{team: {{members: [U1AA], limit: {cap}}}}}
"""
    return CompiledPolicy.compile(parse_policy(text))


@pytest.mark.parametrize(
    ("currency", "cap", "at", "over"),
    [
        ("USD", "50", 5000, 5001),
        ("USD", "49.99", 4999, 5000),
        ("JPY", "5000", 5000, 5001),
        ("KWD", "12.345", 12_345, 12_346),
        ("KWD", "0.001", 1, 2),
    ],
)
def test_amounts_in_their_currency(currency: str, cap: str, at: int, over: int) -> None:
    compiled = policy_in(currency, cap)
    ok = case(amount=at, refundable=10**9, currency=currency)
    assert compiled.evaluate(ok).rule == "small"
    d = compiled.evaluate(case(amount=over, refundable=10**9, currency=currency))
    assert d.rule == "default"
    assert d.counterfactual is not None and d.counterfactual.endswith(f"{currency} or less")


def test_counterfactual_for_operators(compiled: CompiledPolicy) -> None:
    d = compiled.evaluate(case(amount=7500))
    assert d.rule == "default"
    assert d.counterfactual == "would be approved at 50.00 USD or less"
    # no lower amount helps a customer with chargebacks
    d = compiled.evaluate(case(amount=7500, customer={"chargebacks_365d": 2}))
    assert d.counterfactual is None
    assert (
        policy_in("JPY", "5000")
        .evaluate(case(amount=9000, refundable=10**6, currency="JPY"))
        .counterfactual
        == "would be approved at 5000 JPY or less"
    )


def test_strict_less_than_counterfactual() -> None:
    raw = acme_raw()
    raw["rules"][2]["when"] = "request.reason == 'damaged' and request.amount < 50"
    d = CompiledPolicy.compile(parse_policy(dump(raw))).evaluate(case(amount=5000))
    assert d.counterfactual == "would be approved at 49.99 USD or less"


def test_decision_is_frozen(compiled: CompiledPolicy) -> None:
    d: Decision = compiled.evaluate(case())
    with pytest.raises(AttributeError):
        d.outcome = "deny"  # type: ignore[misc]


def test_facts_the_engine_cannot_read_send_the_case_to_a_person(
    acme: PolicyDocument, compiled: CompiledPolicy
) -> None:
    """An amount beyond exact comparison is an evaluation error of the case (a person looks),
    not an exception that would make its job retry until it gives up."""
    from refund_desk.governance.versions import LoadedPolicy, evaluate
    from refund_desk.money import MAX_MINOR

    decision = evaluate(
        LoadedPolicy(1, acme, compiled), case(amount=MAX_MINOR, refundable=MAX_MINOR)
    )
    assert decision.outcome == "review" and not decision.automatic
    assert (decision.tier, decision.approvers) == (4, "finance")  # the strictest, as unknown facts
    assert decision.error and "too large" in decision.error
