"""Money in integer minor units, converted exactly with ISO 4217 exponents.

Storage and the engine keep amounts as ``int`` minor units (cents, yen, fils); people and
policies write major units ("25.00", 50). Every conversion goes through ``Decimal`` so no
amount is ever rounded by a float. This module is a leaf: it imports nothing from the project.
"""

from __future__ import annotations

import re
from decimal import Decimal


class UnknownCurrency(ValueError):
    """The code is not an active ISO 4217 currency with minor units."""


class InvalidAmount(ValueError):
    """The amount is not a non-negative, finite, exactly representable major-unit value."""


_ZERO = "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF"
_THREE = "BHD IQD JOD KWD LYD OMR TND"
_FOUR = "CLF UYW"
# Active ISO 4217 codes with two minor digits (funds codes included; metals, XDR and test
# codes have no minor unit and are left out on purpose: nobody refunds gold).
_TWO = """
AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BMD BND BOB BOV BRL BSD BTN BWP
BYN BZD CAD CDF CHE CHF CHW CNY COP COU CRC CUC CUP CVE CZK DKK DOP DZD EGP ERN ETB EUR
FJD FKP GBP GEL GHS GIP GMD GTQ GYD HKD HNL HTG HUF IDR ILS INR IRR JMD KES KGS KHR KPW
KYD KZT LAK LBP LKR LRD LSL MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN
NAD NGN NIO NOK NPR NZD PAB PEN PGK PHP PKR PLN QAR RON RSD RUB SAR SBD SCR SDG SEK SGD
SHP SLE SLL SOS SRD SSP STN SVC SYP SZL THB TJS TMT TOP TRY TTD TWD TZS UAH USD USN UYU
UZS VED VES WST XCD XCG YER ZAR ZMW ZWG ZWL
"""

CURRENCIES: dict[str, int] = {
    **dict.fromkeys(_TWO.split(), 2),
    **dict.fromkeys(_ZERO.split(), 0),
    **dict.fromkeys(_THREE.split(), 3),
    **dict.fromkeys(_FOUR.split(), 4),
}
"""ISO 4217 code -> number of minor-unit digits."""

MAX_MINOR = 10**15
"""Every stored amount is below this many minor units (ten trillion dollars, a trillion
dinars): far above any refund, inside a 64-bit database integer, and small enough that its
major-unit value has at most 15 significant digits, which the policy engine compares exactly
(``policy.context.minor_to_zen``). ``to_minor`` refuses anything larger at the edges."""

_PLAIN_DECIMAL = re.compile(r"\d+(?:\.\d+)?")


def exponent(currency: str) -> int:
    """Minor-unit digits of ``currency`` (case-insensitive); ``UnknownCurrency`` otherwise."""
    if not isinstance(currency, str):
        raise UnknownCurrency(f"currency must be a string, got {type(currency).__name__}")
    try:
        return CURRENCIES[currency.strip().upper()]
    except KeyError:
        raise UnknownCurrency(f"unknown currency {currency!r} (not an ISO 4217 code)") from None


def _parse(amount: str | Decimal | int) -> Decimal:
    """Read ``amount`` as an exact Decimal, refusing floats, signs, exponents and junk."""
    if isinstance(amount, bool | float):
        raise InvalidAmount(
            f"amount {amount!r} must be a decimal string, Decimal or int, "
            f"not {type(amount).__name__}"
        )
    if isinstance(amount, int):
        value = Decimal(amount)
    elif isinstance(amount, Decimal):
        value = amount
    elif isinstance(amount, str):
        text = amount.strip()
        if text.startswith("-"):
            raise InvalidAmount(f"amount {amount!r} is negative")
        if not _PLAIN_DECIMAL.fullmatch(text):
            raise InvalidAmount(f"amount {amount!r} is not a decimal number like 25 or 25.00")
        value = Decimal(text)  # the pattern admits only plain digits
    else:
        raise InvalidAmount(f"amount of type {type(amount).__name__} is not supported")
    if not value.is_finite():
        raise InvalidAmount(f"amount {amount!r} is not a finite number")
    if value < 0:
        raise InvalidAmount(f"amount {amount!r} is negative")
    return value


def to_minor(amount: str | Decimal | int, currency: str) -> int:
    """Convert a major-unit amount to integer minor units, exactly or not at all.

    ``"25.00"`` USD -> 2500, ``5000`` JPY -> 5000, ``"1.234"`` KWD -> 1234. More significant
    decimals than the currency has (``"0.001"`` USD, ``"1.5"`` JPY) raise ``InvalidAmount``;
    trailing zeros (``"5000.00"`` JPY) are accepted because the value is exact.
    """
    exp = exponent(currency)
    value = _parse(amount)
    scaled = value.scaleb(exp)
    if scaled != scaled.to_integral_value():
        raise InvalidAmount(
            f"amount {amount!r} has more decimals than {currency.upper()} allows ({exp})"
        )
    if scaled >= MAX_MINOR:
        limit = format_money(MAX_MINOR - 1, currency)
        raise InvalidAmount(f"amount {amount!r} is too large (at most {limit})")
    return int(scaled)


def to_major(minor: int, currency: str) -> Decimal:
    """Minor units -> major-unit Decimal with exactly the currency's decimals (2500 -> 25.00)."""
    if isinstance(minor, bool) or not isinstance(minor, int):
        raise InvalidAmount(f"minor amount must be an int, got {type(minor).__name__}")
    return Decimal(minor).scaleb(-exponent(currency))


def format_money(minor: int, currency: str) -> str:
    """Human and audit form: ``"25.00 USD"``, ``"5000 JPY"``, ``"1.250 KWD"``."""
    exp = exponent(currency)
    return f"{to_major(minor, currency):.{exp}f} {currency.strip().upper()}"


def format_share(part: int, whole: int | None, currency: str) -> str:
    """``"200.00 of 320.00 USD (partial)"`` when ``part`` is less than ``whole``, else the
    plain amount: a partial refund always reads as one."""
    if whole is None or part >= whole:
        return format_money(part, currency)
    return f"{to_major(part, currency)} of {format_money(whole, currency)} (partial)"
