"""The documented facts and the contexts built from them."""

from __future__ import annotations

import json

import pytest

from refund_desk.policy import (
    FACTS,
    ContextInvalid,
    build_context,
    complete_context,
    neutral_context,
    null_context,
)
from refund_desk.policy.context import (
    flatten,
    given_to_context,
    referenced_names,
    to_zen,
)

REQUIRED = {
    "request.amount",
    "request.currency",
    "request.reason",
    "request.source",
    "request.possible_duplicate",
    "request.amount_source",
    "request.reason_source",
    "order.amount",
    "order.refunded",
    "order.refundable",
    "order.currency",
    "order.age_days",
    "customer.verified",
    "customer.chargebacks_365d",
    "customer.refunds_90d",
    "customer.open_cases",
    "advisor.confidence",
    "advisor.injection_suspected",
    "evidence.count",
    "evidence.checked",
}


def test_every_documented_fact_is_there_with_a_meaning() -> None:
    assert set(FACTS) >= REQUIRED
    assert all(kind and meaning for kind, meaning in FACTS.values())
    assert set(flatten(null_context())) == set(FACTS)
    assert all(v is None for v in flatten(null_context()).values())


def test_neutral_context() -> None:
    flat = flatten(neutral_context("USD"))
    assert set(flat) == set(FACTS)
    assert flat["customer.verified"] is True
    assert flat["request.possible_duplicate"] is False
    assert flat["customer.chargebacks_365d"] == 0 and flat["evidence.count"] == 0
    assert flat["request.amount"] == 0 and flat["order.refundable"] == 0
    assert flat["request.reason"] == "other"
    assert flat["request.amount_source"] == "customer_input"
    assert flat["request.reason_source"] == "customer_input"
    assert flat["advisor.confidence"] == 1.0
    assert flat["request.currency"] == flat["order.currency"] == "USD"


def test_complete_and_build_lay_over_null() -> None:
    ctx = complete_context({"request": {"amount": 500}})
    assert ctx["request"]["amount"] == 500 and ctx["order"]["refundable"] is None
    assert build_context(order={"age_days": 4})["order"]["age_days"] == 4
    base = neutral_context("EUR")
    ctx = build_context(base, customer={"verified": False})
    assert ctx["customer"]["verified"] is False and ctx["request"]["currency"] == "EUR"
    assert base["customer"]["verified"] is True  # the base is not mutated


def test_bad_contexts_list_every_problem() -> None:
    with pytest.raises(ContextInvalid) as info:
        complete_context(
            {
                "request": {"amout": 1, "amount": -5, "reason": "meh", "currency": "XYZ"},
                "customer": {"verified": "yes", "refunds_90d": 1.5},
                "shop": {"x": 1},
                "order": 3,
            }
        )
    problems = info.value.problems
    assert len(problems) == 8
    assert "unknown fact 'request.amout'" in problems
    assert "unknown fact section 'shop'" in problems


def test_given_is_major_units_over_neutral() -> None:
    ctx = given_to_context({"request": {"amount": 20.5}, "order": {"refundable": "30"}}, "USD")
    assert ctx["request"]["amount"] == 2050 and ctx["order"]["refundable"] == 3000
    ctx = given_to_context({"request": {"amount": 5000}}, "JPY")
    assert ctx["request"]["amount"] == 5000
    ctx = given_to_context({"request": {"amount": 1.25, "currency": "KWD"}}, "USD")
    assert ctx["request"]["amount"] == 1250
    with pytest.raises(ContextInvalid, match="more decimals"):
        given_to_context({"request": {"amount": 0.005}}, "USD")


def test_to_zen_converts_money_only() -> None:
    ctx = complete_context(
        {"request": {"amount": 2505, "currency": "USD"}, "order": {"refundable": 7, "age_days": 3}}
    )
    text = to_zen(ctx, "KWD")
    assert '"amount": 25.05' in text  # the exact decimal as JSON text, which zen parses exactly
    z = json.loads(text)
    assert z["request"]["amount"] == 25.05
    assert z["order"]["refundable"] == 0.007  # no order currency: the policy's
    assert z["order"]["age_days"] == 3
    assert ctx["request"]["amount"] == 2505  # not mutated
    with pytest.raises(ContextInvalid, match="too large"):
        to_zen(complete_context({"request": {"amount": 10**16}}), "USD")


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("request.amount <= 50", ["request.amount"]),
        (
            "customer.chargebacks_365d > 0 or customer.refunds_90d >= 5",
            ["customer.chargebacks_365d", "customer.refunds_90d"],
        ),
        (
            'request.reason == "damaged.goods" and not customer.verified',
            ["request.reason", "customer.verified"],
        ),
        ("len(request.source) > 3 and request.amount > 1e3", ["request.source", "request.amount"]),
        ("request.reason in ['late', 'other'] and true", ["request.reason"]),
        ("some(['a'], # == request.source)", ["request.source"]),
    ],
)
def test_referenced_names(expression: str, names: list[str]) -> None:
    assert referenced_names(expression) == names
