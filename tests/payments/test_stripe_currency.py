"""Stripe's minor units against ISO 4217's: exact both ways, or refused with a sentence."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refund_desk.cases.ports import AmountRefused
from refund_desk.payments.stripe_currency import from_stripe, to_stripe


@pytest.mark.parametrize(
    ("currency", "iso", "stripe"),
    [
        ("usd", 2599, 2599),
        ("JPY", 5000, 5000),  # zero-decimal in both
        ("kwd", 5120, 5120),  # three-decimal in both
        ("isk", 5, 500),  # zero in ISO, two at Stripe
        ("mga", 1000, 10),  # two in ISO, zero at Stripe
    ],
)
def test_conversion_both_ways(currency: str, iso: int, stripe: int) -> None:
    assert to_stripe(iso, currency) == stripe
    assert from_stripe(stripe, currency) == iso


@pytest.mark.parametrize(
    ("currency", "iso", "words"),
    [
        ("kwd", 5125, "5.125 KWD"),
        ("bhd", 1, "last of the three decimals"),
        ("mga", 1050, "whole units"),
        ("clf", 10000, "does not process"),
        ("xyz", 100, "not a currency"),
        ("usd", 0, "more than zero"),
    ],
)
def test_amounts_stripe_would_refuse(currency: str, iso: int, words: str) -> None:
    with pytest.raises(AmountRefused) as refused:
        to_stripe(iso, currency)
    assert words in refused.value.message
    assert refused.value.code == "amount_not_accepted" and not refused.value.transient


def test_fractional_isk_from_before_the_change_rounds_down() -> None:
    assert from_stripe(4010, "isk") == 40


@given(
    currency=st.sampled_from(["usd", "eur", "jpy", "krw", "isk", "kwd", "bhd", "tnd", "mga"]),
    units=st.integers(min_value=1, max_value=10**9),
)
def test_every_accepted_amount_round_trips(currency: str, units: int) -> None:
    iso = units * {"kwd": 10, "bhd": 10, "tnd": 10, "mga": 100}.get(currency, 1)
    assert from_stripe(to_stripe(iso, currency), currency) == iso
