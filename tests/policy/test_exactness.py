"""Money reaches zen exactly: comparisons agree with Decimal for every allowed amount.

zen-engine rejects ``Decimal`` input and converts some Python floats inexactly, so the engine
hands it JSON text whose numbers are the exact decimals of integer minor units. These tests
prove that comparisons against policy literals are exact for currencies with 0, 2 and 3
decimals, from 0 up to 10 000 000 major units.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from decimal import Decimal

import pytest
import zen
from hypothesis import example, given, settings
from hypothesis import strategies as st

from refund_desk.money import to_major
from refund_desk.policy import CompiledPolicy, parse_policy
from refund_desk.policy.context import to_zen
from tests.policy.conftest import case

CURRENCIES = {"JPY": 0, "USD": 2, "KWD": 3}
MAX_MAJOR = 10_000_000
OPS: dict[str, Callable[[Decimal, Decimal], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
    ">": operator.gt,
    ">=": operator.ge,
    "!=": operator.ne,
}


def literal(minor: int, exp: int, decimals: int) -> str:
    """A policy literal for ``minor``, written with ``decimals`` digits (>= what it needs)."""
    return f"{Decimal(minor).scaleb(-exp):.{decimals}f}"


@st.composite
def amounts(draw: st.DrawFn) -> tuple[str, int, int, str]:
    currency = draw(st.sampled_from(sorted(CURRENCIES)))
    exp = CURRENCIES[currency]
    top = MAX_MAJOR * 10**exp
    minor = draw(st.integers(0, top) | st.sampled_from([0, 1, top - 1, top]))
    # literals far away and right next to the amount (the interesting case)
    near = draw(st.integers(-2, 2))
    lit_minor = draw(st.integers(0, top) | st.just(min(top, max(0, minor + near))))
    # fewest decimals the literal needs, up to the currency's exponent
    need = 0 if lit_minor % 10**exp == 0 else exp
    for d in range(exp):
        if lit_minor % 10 ** (exp - d) == 0:
            need = d
            break
    decimals = draw(st.integers(need, exp))
    return currency, minor, lit_minor, literal(lit_minor, exp, decimals)


def zen_compare(currency: str, minor: int, op: str, lit: str) -> bool:
    ctx = to_zen({"request": {"amount": minor, "currency": currency}}, currency)
    result = zen.compile_expression(f"request.amount {op} {lit}").evaluate(ctx)
    assert isinstance(result, bool)
    return result


@settings(max_examples=1500, deadline=None)
@given(amounts(), st.sampled_from(sorted(OPS)))
@example(("USD", 5000, 5000, "50"), "<=")
@example(("USD", 5001, 5000, "50.00"), "<=")
@example(("USD", 1, 1, "0.01"), "==")
@example(("USD", 30, 30, "0.3"), "==")
@example(("KWD", 1, 1, "0.001"), "==")
@example(("KWD", 10_000_000_000, 9_999_999_999, "9999999.999"), ">")
@example(("JPY", 10_000_000, 10_000_000, "10000000"), "==")
@example(("KWD", 4_305_529, 4_305_529, "4305.529"), "==")  # zen read the float 4305.529 as ...002
@example(("USD", 436_582_273, 436_582_273, "4365822.73"), "<=")
def test_comparisons_agree_with_decimal(case_: tuple[str, int, int, str], op: str) -> None:
    currency, minor, lit_minor, lit = case_
    exp = CURRENCIES[currency]
    amount = to_major(minor, currency)
    assert Decimal(lit) == Decimal(lit_minor).scaleb(-exp)
    assert zen_compare(currency, minor, op, lit) is OPS[op](amount, Decimal(lit))


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from(sorted(CURRENCIES)),
    st.integers(0, MAX_MAJOR * 1000),
    st.integers(-1, 1),
)
def test_fact_to_fact_comparisons_are_exact(currency: str, minor: int, delta: int) -> None:
    exp = CURRENCIES[currency]
    minor = min(minor, MAX_MAJOR * 10**exp)
    other = max(0, minor + delta)
    ctx = to_zen(
        {
            "request": {"amount": minor, "currency": currency},
            "order": {"refundable": other, "currency": currency},
        },
        currency,
    )
    got = zen.compile_expression("request.amount > order.refundable").evaluate(ctx)
    assert got is (minor > other)


@pytest.mark.parametrize(("currency", "exp"), sorted(CURRENCIES.items()))
def test_dense_sweep_at_the_top_of_the_range(currency: str, exp: int) -> None:
    """Every minor unit in the last thousand below the maximum equals its own literal."""
    top = MAX_MAJOR * 10**exp
    for minor in range(top - 1000, top + 1):
        assert zen_compare(currency, minor, "==", literal(minor, exp, exp))
        assert not zen_compare(currency, minor + 1, "<=", literal(minor, exp, exp))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, MAX_MAJOR * 100))
def test_end_to_end_through_the_engine(minor: int) -> None:
    """The same through ``CompiledPolicy.evaluate`` with a cap at 123.45 USD."""
    text = """
policy: p
currency: USD
rules:
  - {id: cap, when: "request.amount <= 123.45", outcome: approve, approvers: team}
default: {outcome: review, approvers: team}
approvers: {team: {members: [U1AA], limit: 1}}
"""
    compiled = CompiledPolicy.compile(parse_policy(text))
    ctx = case(amount=minor, refundable=MAX_MAJOR * 100)
    rule = compiled.evaluate(ctx, counterfactual=False).rule
    assert rule == ("cap" if minor <= 12345 else "default")
