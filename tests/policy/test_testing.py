"""Embedded policy tests: the gate before publishing."""

from __future__ import annotations

from refund_desk.policy import CompiledPolicy, PolicyDocument, parse_policy, run_policy_tests
from tests.policy.conftest import acme_raw, dump


def with_tests(*tests: dict[str, object]) -> PolicyDocument:
    raw = acme_raw()
    raw["tests"] = list(tests)
    return parse_policy(dump(raw))


def test_acme_tests_pass(acme: PolicyDocument) -> None:
    (result,) = run_policy_tests(acme)
    assert result.passed and result.name == "small damaged order refunds itself"
    assert result.decision is not None and result.decision.automatic
    assert run_policy_tests(CompiledPolicy.compile(acme))[0].passed


def test_failures_say_what_happened() -> None:
    doc = with_tests(
        {
            "name": "too big",
            "given": {"request": {"amount": 60, "reason": "damaged"}, "order": {"refundable": 100}},
            "expect": {"outcome": "approve"},
        },
        {
            "name": "wrong tier",
            "given": {"request": {"amount": 600}, "order": {"refundable": 600}},
            "expect": {"outcome": "review", "rule": "large", "tier": 4},
        },
    )
    first, second = run_policy_tests(doc)
    assert not first.passed
    assert first.message == "expected approve, got review by default at tier 3"
    assert not second.passed
    assert second.message == "expected review by large at tier 4, got review by large at tier 3"


def test_guardrails_apply_in_tests() -> None:
    doc = with_tests(
        {
            "name": "neutral money is 0: over refundable",
            "given": {"request": {"amount": 20, "reason": "damaged"}},
            "expect": {"outcome": "deny", "rule": "exceeds-refundable"},
        },
        {
            "name": "duplicates wait for a person",
            "given": {
                "request": {"amount": 20, "reason": "damaged", "possible_duplicate": True},
                "order": {"refundable": 20},
            },
            "expect": {"outcome": "review", "rule": "guardrail:possible-duplicate", "tier": 3},
        },
        {
            "name": "unknown facts are reviews",
            "given": {"customer": {"chargebacks_365d": None}},
            "expect": {"outcome": "review", "rule": "risk-signal"},
        },
        {
            "name": "yen-free policy: default",
            "given": {"request": {"amount": 10.5}, "order": {"refundable": 10.5}},
            "expect": {"outcome": "review", "rule": "default", "tier": 3},
        },
    )
    results = run_policy_tests(doc)
    assert all(r.passed for r in results), [r.message for r in results]
    assert "customer.chargebacks_365d is unknown" in results[2].message
