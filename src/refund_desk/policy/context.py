"""The one documented list of facts a rule may see, and the contexts built from it.

A context is a nested dict (``{"request": {"amount": 2500, ...}, ...}``) in which every fact
of ``FACTS`` is present, ``None`` where unknown. Money facts are ``int`` *minor* units in the
currency named beside them (``request.currency`` for ``request.*``, ``order.currency`` for
``order.*``); the engine converts them to major units for rule expressions, so rules and
policy limits speak major units (``request.amount <= 50`` is $50.00).

Two bases:

* ``null_context()`` -- every fact ``None``. Production builds on it: what the case does not
  know stays unknown, and a rule comparing it becomes a review, never a silent false.
* ``neutral_context(currency)`` -- the base for a policy's embedded tests, so a test's
  ``given`` names only what it is about: counts 0, money 0, customer verified, no
  duplicate, reason ``other``, amount typed by the customer, advisor fully confident.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

from refund_desk import money
from refund_desk.policy.errors import ContextInvalid

FactType = Literal["money", "currency", "reason", "string", "bool", "int", "number"]

REASONS: tuple[str, ...] = (
    "damaged",
    "defective",
    "not_received",
    "wrong_item",
    "late",
    "changed_mind",
    "duplicate_charge",
    "subscription_cancel",
    "fraud_claim",
    "other",
)
"""Values of ``request.reason``."""

AMOUNT_SOURCES: tuple[str, ...] = (
    "customer_input",
    "system_of_record",
    "human_entry",
    "model_inference",
)
"""Known provenances of ``request.amount``; ``model_inference`` never executes by itself."""

PROVENANCES: tuple[str, ...] = (
    "customer_input",
    "system_of_record",
    "verified_document",
    "third_party",
    "model_inference",
    "human_entry",
)
"""Where a fact came from (``request.*_source``): a rule may trust a reason the customer gave
more than one the AI advisor inferred (``request.reason_source == "customer_input"``)."""

FACTS: dict[str, tuple[FactType, str]] = {
    "request.amount": ("money", "amount asked for, major units in rules (minor int in context)"),
    "request.currency": ("currency", "ISO 4217 code of the requested amount"),
    "request.reason": ("reason", "why the customer asks: one of REASONS, null if unclassified"),
    "request.source": ("string", "channel of the request: api, web_form, slack, email, ..."),
    "request.possible_duplicate": ("bool", "an open case or same refund within 24h exists"),
    "request.amount_source": ("string", "who produced the amount: one of AMOUNT_SOURCES"),
    "request.reason_source": ("string", "who produced the reason: one of PROVENANCES"),
    "order.amount": ("money", "amount captured on the payment"),
    "order.refunded": ("money", "already refunded plus refunds still executing"),
    "order.refundable": ("money", "what is left to refund: amount - refunded"),
    "order.currency": ("currency", "ISO 4217 code of the payment"),
    "order.age_days": ("int", "whole days since the payment was captured"),
    "customer.verified": ("bool", "the requester is proven to be the payer"),
    "customer.chargebacks_365d": ("int", "chargebacks by this customer in the last 365 days"),
    "customer.refunds_90d": ("int", "refunds to this customer in the last 90 days"),
    "customer.open_cases": ("int", "other open refund cases of this customer"),
    "advisor.confidence": ("number", "the AI advisor's confidence in its reading, 0..1"),
    "advisor.injection_suspected": ("bool", "the message looks like a prompt injection"),
    "evidence.count": ("int", "files attached (photos, receipts)"),
    "evidence.checked": ("int", "attachments a person or system has checked"),
}
"""fact name -> (type, meaning). The only place facts are defined."""

MONEY_FACTS: tuple[str, ...] = tuple(n for n, (t, _) in FACTS.items() if t == "money")
SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(n.split(".")[0] for n in FACTS))

_NEUTRAL: dict[str, Any] = {
    "request.amount": 0,
    "request.reason": "other",
    "request.source": "api",
    "request.possible_duplicate": False,
    "request.amount_source": "customer_input",
    "request.reason_source": "customer_input",
    "order.amount": 0,
    "order.refunded": 0,
    "order.refundable": 0,
    "order.age_days": 0,
    "customer.verified": True,
    "customer.chargebacks_365d": 0,
    "customer.refunds_90d": 0,
    "customer.open_cases": 0,
    "advisor.confidence": 1.0,
    "advisor.injection_suspected": False,
    "evidence.count": 0,
    "evidence.checked": 0,
}


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {s: {} for s in SECTIONS}
    for name, value in flat.items():
        section, field = name.split(".", 1)
        out[section][field] = value
    return out


def flatten(context: Mapping[str, Any]) -> dict[str, Any]:
    """Nested context -> ``{"request.amount": ..., ...}`` (only the leaves present)."""
    flat: dict[str, Any] = {}
    for section, fields in context.items():
        if isinstance(fields, Mapping):
            for field, value in fields.items():
                flat[f"{section}.{field}"] = value
        else:
            flat[str(section)] = fields
    return flat


def null_context() -> dict[str, Any]:
    """Every fact present and unknown (``None``): the production base."""
    return _nest(dict.fromkeys(FACTS))


def neutral_context(currency: str | None = None) -> dict[str, Any]:
    """The base for embedded policy tests (see module docstring); currencies = ``currency``."""
    flat: dict[str, Any] = dict.fromkeys(FACTS)
    flat.update(_NEUTRAL)
    if currency is not None:
        code = currency.upper()
        flat["request.currency"] = code
        flat["order.currency"] = code
    return _nest(flat)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_TYPES: dict[FactType, tuple[Callable[[Any], bool], str]] = {
    "money": (lambda v: _is_int(v) and v >= 0, "a non-negative int of minor units"),
    "int": (_is_int, "an integer"),
    "number": (lambda v: _is_int(v) or isinstance(v, float), "a number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "reason": (lambda v: v in REASONS, f"one of {', '.join(REASONS)}"),
    "currency": (
        lambda v: isinstance(v, str) and v.upper() in money.CURRENCIES,
        "an ISO 4217 code",
    ),
    "string": (lambda v: isinstance(v, str), "a string"),
}
"""fact type -> (is a value of it, what it must be)."""


def check_fact(name: str, value: Any) -> str | None:
    """Why ``value`` is not acceptable for fact ``name`` (``None`` if it is)."""
    if name not in FACTS:
        return f"unknown fact {name!r}"
    valid, what = _TYPES[FACTS[name][0]]
    return None if value is None or valid(value) else f"{name} must be {what}, got {value!r}"


def complete_context(
    partial: Mapping[str, Any], base: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Lay ``partial`` (nested) over ``base`` (default: ``null_context()``).

    Raises ``ContextInvalid`` listing every unknown fact or wrongly typed value, so a typo
    in a caller never silently becomes "unknown".
    """
    result = copy.deepcopy(dict(base)) if base is not None else null_context()
    problems: list[str] = []
    for section, fields in partial.items():
        if section not in SECTIONS:
            problems.append(f"unknown fact section {section!r}")
            continue
        if not isinstance(fields, Mapping):
            problems.append(f"{section} must be a mapping of facts, got {fields!r}")
            continue
        for field, value in fields.items():
            name = f"{section}.{field}"
            problem = check_fact(name, value)
            if problem:
                problems.append(problem)
            else:
                result[section][field] = value
    if problems:
        raise ContextInvalid(problems)
    return result


def build_context(base: Mapping[str, Any] | None = None, **sections: Any) -> dict[str, Any]:
    """``build_context(request={...}, order={...})``: keyword form of ``complete_context``."""
    return complete_context(sections, base)


def given_to_context(given: Mapping[str, Any], currency: str) -> dict[str, Any]:
    """A policy test's ``given`` (money in MAJOR units) laid over the neutral context.

    Money facts are converted exactly with ``money.to_minor`` in the currency beside them.
    """
    base = neutral_context(currency)
    converted: dict[str, Any] = {}
    problems: list[str] = []
    for section, fields in given.items():
        if not isinstance(fields, Mapping):
            converted[section] = fields
            continue
        out = dict(fields)
        for field, value in fields.items():
            name = f"{section}.{field}"
            if name in MONEY_FACTS and value is not None:
                cur = fields.get("currency") or base[section].get("currency") or currency
                try:
                    # a YAML float's repr is its shortest exact decimal form
                    major = repr(value) if isinstance(value, float) else value
                    out[field] = money.to_minor(major, str(cur))
                except ValueError as exc:
                    problems.append(f"{name}: {exc}")
                    out[field] = None
        converted[section] = out
    try:
        context = complete_context(converted, base)
    except ContextInvalid as exc:
        problems += exc.problems
    if problems:
        raise ContextInvalid(problems)
    return context


_STRING = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|`(?:[^`\\]|\\.)*`")
_NAME = re.compile(r"(?<![\w.$#])[A-Za-z_$][\w$]*(?:\.[A-Za-z_]\w*)*")
_KEYWORDS = frozenset({"and", "or", "not", "in", "true", "false", "null"})


def referenced_names(expression: str) -> list[str]:
    """Dotted names a zen expression reads (function names and keywords excluded), in order.

    A lexical scan, good enough for the unary-free boolean expressions policies use; it is
    used to reject unknown facts at validation and to name null facts in evaluation errors.
    """
    code = _STRING.sub('""', expression)
    names: list[str] = []
    for match in _NAME.finditer(code):
        name = match.group(0)
        rest = code[match.end() :].lstrip()
        if rest.startswith("(") or name in _KEYWORDS or name.startswith("$"):
            continue
        if name not in names:
            names.append(name)
    return names


MAX_EXACT_MINOR = money.MAX_MINOR
"""Below this every ``minor / 10**exp`` float has a shortest repr equal to the exact decimal
(at most 15 significant digits, IEEE 754 ``DBL_DIG``). Ten million major units with three
decimals is 10**10: far inside; intake refuses anything larger (``money.to_minor``)."""


def minor_to_zen(minor: int, currency: str) -> float:
    """Minor units -> major units as the float whose shortest repr is the exact decimal.

    ``int / int`` is correctly rounded in CPython, so ``2505 / 100`` is the float written
    ``25.05``. ``to_zen`` hands zen that text, never the float itself (see there).
    """
    if minor >= MAX_EXACT_MINOR:
        raise ContextInvalid(f"amount {minor} minor units is too large to compare exactly")
    return minor / 10 ** money.exponent(currency)


def to_zen(context: Mapping[str, Any], policy_currency: str) -> str:
    """The context as zen reads it: JSON text, money facts in major units of their currency.

    A money fact whose section names no currency is read in the policy's currency.

    zen rejects ``Decimal`` and converts a Python float to its decimal type inexactly for
    some values (``4305.529`` arrives as ``4305.529000000002``, so ``== 4305.529`` is false),
    but it parses a JSON number's text exactly. ``json.dumps`` writes each float as its
    shortest repr, which ``minor_to_zen`` makes the exact decimal. The property test in
    ``tests/policy/test_exactness.py`` proves the comparisons.
    """
    out: dict[str, Any] = {
        section: dict(fields) if isinstance(fields, Mapping) else fields
        for section, fields in context.items()
    }
    for name in MONEY_FACTS:
        section, field = name.split(".", 1)
        minor = out.get(section, {}).get(field)
        if minor is None:
            continue
        currency = out[section].get("currency") or policy_currency
        try:
            out[section][field] = minor_to_zen(minor, currency)
        except money.UnknownCurrency as exc:
            raise ContextInvalid(f"{name}: {exc}") from None
    return json.dumps(out, allow_nan=False)


def zen_error(exc: BaseException) -> str:
    """The readable part of a zen error (its first line is JSON with a ``source``)."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
    try:
        data = json.loads(first)
    except ValueError:
        return first
    if isinstance(data, dict) and "source" in data:
        return str(data["source"])
    return first
