"""money: exact major <-> minor conversion with ISO 4217 exponents."""

from decimal import Decimal

import pytest

from refund_desk.money import (
    CURRENCIES,
    MAX_MINOR,
    InvalidAmount,
    UnknownCurrency,
    exponent,
    format_money,
    to_major,
    to_minor,
)


@pytest.mark.parametrize(
    ("code", "exp"),
    [
        ("USD", 2),
        ("usd", 2),
        ("EUR", 2),
        ("JPY", 0),
        ("KRW", 0),
        ("XOF", 0),
        ("KWD", 3),
        ("BHD", 3),
        ("TND", 3),
        ("CLF", 4),
        ("UYW", 4),
        ("GBP", 2),
        ("CHF", 2),
    ],
)
def test_exponent(code: str, exp: int) -> None:
    assert exponent(code) == exp


def test_table_is_complete_enough() -> None:
    assert len(CURRENCIES) > 150
    assert all(len(c) == 3 and c.isupper() for c in CURRENCIES)


@pytest.mark.parametrize("code", ["XYZ", "", "US", "dollars", "XAU"])
def test_unknown_currency(code: str) -> None:
    with pytest.raises(UnknownCurrency):
        exponent(code)
    with pytest.raises(ValueError):
        to_minor("1", code)


@pytest.mark.parametrize(
    ("amount", "currency", "minor"),
    [
        ("25.00", "USD", 2500),
        ("25", "USD", 2500),
        ("0.01", "usd", 1),
        ("25.1", "EUR", 2510),
        (" 7.5 ", "USD", 750),
        (Decimal("19.99"), "USD", 1999),
        (20, "USD", 2000),
        ("5000", "JPY", 5000),
        ("5000.00", "JPY", 5000),
        ("1.234", "KWD", 1234),
        ("0.001", "KWD", 1),
        ("10000000.999", "BHD", 10_000_000_999),
        ("0", "USD", 0),
    ],
)
def test_to_minor(amount: str | Decimal | int, currency: str, minor: int) -> None:
    assert to_minor(amount, currency) == minor


@pytest.mark.parametrize(
    ("amount", "currency", "fragment"),
    [
        ("0.001", "USD", "more decimals"),
        ("1.5", "JPY", "more decimals"),
        ("1.2345", "KWD", "more decimals"),
        ("-1", "USD", "negative"),
        (Decimal("-0.01"), "USD", "negative"),
        (-5, "USD", "negative"),
        ("abc", "USD", "not a decimal"),
        ("1e3", "USD", "not a decimal"),
        ("1,000.00", "USD", "not a decimal"),
        ("", "USD", "not a decimal"),
        ("NaN", "USD", "not a decimal"),
        (Decimal("NaN"), "USD", "finite"),
        (Decimal("Infinity"), "USD", "finite"),
        (1.5, "USD", "not float"),
        (True, "USD", "not bool"),
        ("10000000000000.00", "USD", "too large"),
        ("9223372036854775807", "JPY", "too large"),
        (10**15, "JPY", "too large"),
    ],
)
def test_to_minor_rejects(amount: object, currency: str, fragment: str) -> None:
    with pytest.raises(InvalidAmount, match=fragment):
        to_minor(amount, currency)  # type: ignore[arg-type]


def test_to_major_and_format() -> None:
    assert to_major(2500, "USD") == Decimal("25.00")
    assert str(to_major(2505, "USD")) == "25.05"
    assert to_major(5000, "JPY") == Decimal(5000)
    assert format_money(2500, "USD") == "25.00 USD"
    assert format_money(5, "usd") == "0.05 USD"
    assert format_money(5000, "JPY") == "5000 JPY"
    assert format_money(1250, "KWD") == "1.250 KWD"
    with pytest.raises(InvalidAmount):
        to_major(1.5, "USD")  # type: ignore[arg-type]


@pytest.mark.parametrize("currency", ["USD", "JPY", "KWD", "CLF"])
def test_round_trip(currency: str) -> None:
    for minor in (0, 1, 99, 100, 12345, 10**12 + 7):
        assert to_minor(to_major(minor, currency), currency) == minor
        assert to_minor(format_money(minor, currency).split()[0], currency) == minor


def test_the_largest_amount_is_just_below_the_bound() -> None:
    assert to_minor("9999999999999.99", "USD") == MAX_MINOR - 1
    assert to_minor(MAX_MINOR - 1, "JPY") == MAX_MINOR - 1
