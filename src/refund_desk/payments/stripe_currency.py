"""Stripe's own minor units, which are not always ISO 4217's.

We store ISO 4217 minor units (`refund_desk.money`); Stripe's API counts some currencies
differently (MGA has no decimals there, ISK two; a three-decimal amount must end in 0; some
codes are not processed at all), so every amount is converted here at the edge, exactly or
not at all: an amount Stripe would refuse is refused here, with a sentence, before any
request is sent.
"""

from __future__ import annotations

from refund_desk import money
from refund_desk.cases.ports import AmountRefused

ZERO_DECIMAL = frozenset(
    {"BIF", "CLP", "DJF", "GNF", "JPY", "KMF", "KRW", "MGA"}
    | {"PYG", "RWF", "UGX", "VND", "VUV", "XAF", "XOF", "XPF"}
)
THREE_DECIMAL = frozenset({"BHD", "JOD", "KWD", "OMR", "TND"})
UNSUPPORTED = frozenset({"CLF", "UYW", "UYI", "IQD", "LYD"})


def stripe_exponent(currency: str) -> int:
    code = _code(currency)
    if code in ZERO_DECIMAL:
        return 0
    if code in THREE_DECIMAL:
        return 3
    return 2


def to_stripe(amount: int, currency: str) -> int:
    """ISO 4217 minor units -> the integer Stripe expects, or `AmountRefused`."""
    code = _code(currency)
    if amount <= 0:
        raise AmountRefused(f"A refund must be more than zero; got {amount} minor units.")
    shift = stripe_exponent(code) - money.exponent(code)
    if shift < 0 and amount % 10**-shift:
        raise AmountRefused(
            f"Stripe counts {code} in whole units; {money.format_money(amount, code)} "
            "has a fraction Stripe cannot send."
        )
    value = amount * 10**shift if shift >= 0 else amount // 10**-shift
    if code in THREE_DECIMAL and value % 10:
        raise AmountRefused(
            f"Stripe accepts {code} amounts only when the last of the three decimals is 0; "
            f"{money.format_money(amount, code)} is not accepted (round to "
            f"{money.format_money(amount - amount % 10, code)} or "
            f"{money.format_money(amount - amount % 10 + 10, code)})."
        )
    return value


def from_stripe(amount: int, currency: str) -> int:
    """Stripe's integer -> ISO 4217 minor units.

    Fractional ISK left over from before Stripe made it whole-unit is rounded down: that part
    can no longer be refunded through the API anyway.
    """
    code = _code(currency)
    shift = money.exponent(code) - stripe_exponent(code)
    return amount * 10**shift if shift >= 0 else amount // 10**-shift


def _code(currency: str) -> str:
    code = currency.strip().upper()
    try:
        money.exponent(code)
    except money.UnknownCurrency:
        raise AmountRefused(f"{code} is not a currency Stripe or ISO 4217 knows.") from None
    if code in UNSUPPORTED:
        raise AmountRefused(f"Stripe does not process payments in {code}.")
    return code
