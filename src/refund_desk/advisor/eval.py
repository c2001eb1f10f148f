"""Score an advisor against a labelled set of requests (`refund-desk advisor eval FILE`).

A labelled line is JSON with the keys `text`, `reason`, `payment` (the id as written, without
a leading `#`, or null), `amount` (decimal string in major units, or null) and `currency`
(lower-case ISO code, or null); `intent` (`refund` or `policy_question`) is optional.

The advisor sees what production gives it: the text and the payment's currency. A labelled
line carries no payment currency, so the labelled `currency` stands in for it (customers
write amounts in the currency they paid in); the `currency:` figure therefore measures the
currency attached to the amount found, not a guess from nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

from refund_desk import money
from refund_desk.cases.ports import INTENTS, REASONS, Advice, AdviceRequest, Advisor, AdvisorError

__all__ = ["BUNDLED", "EvalError", "Labelled", "Report", "evaluate", "load", "render"]

DATA = Path(__file__).with_name("data")
BUNDLED = (DATA / "eval.jsonl", DATA / "eval_holdout.jsonl")
"""The shipped set: the part the rules were tuned on, and the third kept aside till they were."""

FIELDS = ("reason", "payment", "amount", "currency")
ERROR = "(error)"


class EvalError(Exception):
    """The labelled file is unusable; the message names the file and line."""


@dataclass(frozen=True)
class Labelled:
    text: str
    reason: str
    payment: str | None
    amount: int | None  # minor units of `currency`
    currency: str | None  # lower-case
    intent: str | None = None
    where: str = ""


@dataclass
class Report:
    total: int = 0
    correct: Counter[str] = field(default_factory=Counter)
    confusion: Counter[tuple[str, str]] = field(default_factory=Counter)
    intents: int = 0  # lines labelled with an intent
    answers: int = 0  # the model answered (parsed or not)
    parsed: int = 0
    failures: list[str] = field(default_factory=list)
    tokens: int = 0

    def share(self, name: str) -> float:
        base = self.intents if name == "intent" else self.total
        return self.correct[name] / base if base else 0.0


def _text_or_null(raw: object, key: str, where: str) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.strip():
        raise EvalError(f"{where}: {key} must be a string or null")
    return raw.strip()


def parse_line(line: str, where: str) -> Labelled:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EvalError(f"{where}: not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise EvalError(f"{where}: a line must be a JSON object")
    missing = [k for k in ("text", *FIELDS) if k not in data]
    if missing:
        raise EvalError(f"{where}: missing {', '.join(missing)}")
    text, reason = data["text"], data["reason"]
    if not isinstance(text, str):
        raise EvalError(f"{where}: text must be a string")
    if reason not in REASONS:
        raise EvalError(f"{where}: reason must be one of {', '.join(REASONS)}")
    intent = data.get("intent")
    if intent is not None and intent not in INTENTS:
        raise EvalError(f"{where}: intent must be one of {', '.join(INTENTS)}")
    payment = _text_or_null(data["payment"], "payment", where)
    currency = _text_or_null(data["currency"], "currency", where)
    amount_text = _text_or_null(data["amount"], "amount", where)
    amount: int | None = None
    if amount_text is not None:
        if currency is None:
            raise EvalError(f"{where}: an amount needs its currency")
        try:
            Decimal(amount_text)
            amount = money.to_minor(amount_text, currency)
        except (InvalidOperation, ValueError) as exc:
            raise EvalError(f"{where}: amount {amount_text!r}: {exc}") from None
    elif currency is not None:
        try:
            money.exponent(currency)
        except ValueError as exc:
            raise EvalError(f"{where}: {exc}") from None
    return Labelled(
        text=text,
        reason=reason,
        payment=payment.removeprefix("#") if payment else None,
        amount=amount,
        currency=currency.lower() if currency else None,
        intent=intent,
        where=where,
    )


def load(paths: Iterable[Path]) -> list[Labelled]:
    items: list[Labelled] = []
    for path in paths:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise EvalError(f"cannot read {path}: {exc.strerror}") from None
        for number, line in enumerate(lines, 1):
            if line.strip():
                items.append(parse_line(line, f"{path.name}:{number}"))
    if not items:
        raise EvalError("no labelled requests found")
    return items


def _found(advice: Advice) -> tuple[int | None, str | None]:
    """The amount the advisor read and its currency; no amount means no currency either."""
    if advice.amount_minor is None:
        return None, None
    return advice.amount_minor, (advice.currency or "").lower() or None


def evaluate(advisor: Advisor, items: Sequence[Labelled]) -> Report:
    report = Report()
    for item in items:
        report.total += 1
        request = AdviceRequest(
            message=item.text, currency=item.currency.upper() if item.currency else None
        )
        try:
            advice = advisor.advise(request)
        except AdvisorError as exc:
            if exc.format_error:
                report.answers += 1
            report.tokens += exc.tokens_used
            report.confusion[(item.reason, ERROR)] += 1
            report.failures.append(f"{item.where}: advisor error {exc.code}")
            continue
        report.answers += 1
        report.parsed += 1
        report.tokens += advice.tokens_used
        amount, currency = _found(advice)
        got = {
            "reason": advice.reason == item.reason,
            "payment": advice.order_ref == item.payment,
            "amount": amount == item.amount,
            "currency": currency == item.currency,
        }
        if item.intent is not None:
            report.intents += 1
            got["intent"] = advice.intent == item.intent
        for name, ok in got.items():
            report.correct[name] += ok
        report.confusion[(item.reason, advice.reason)] += 1
        wrong = [
            f"{n}={v!r}"
            for n, v in (
                ("reason", advice.reason),
                ("payment", advice.order_ref),
                ("amount", amount),
                ("currency", currency),
                ("intent", advice.intent),
            )
            if n in got and not got[n]
        ]
        if wrong:
            report.failures.append(f"{item.where}: {', '.join(wrong)}  <- {item.text[:70]!r}")
    return report


def _percent(share: float) -> str:
    return f"{100 * share:.1f}%"


def render(report: Report, *, model: bool) -> str:
    """One line per field (`reason: 93.3%`), then the reasons' confusion table."""
    lines = [f"{name}: {_percent(report.share(name))}" for name in FIELDS]
    if report.intents:
        lines.append(f"intent: {_percent(report.share('intent'))}")
    if model:
        share = report.parsed / report.answers if report.answers else 0.0
        lines.append(f"format: {_percent(share)} ({report.parsed} of {report.answers} parsed)")
        lines.append(f"tokens: {report.tokens} ({report.tokens / max(1, report.total):.0f} a case)")
    lines.append(f"requests: {report.total}")
    lines.append("")
    lines.append("confusion (rows: labelled reason, columns: advisor's reason)")
    columns = list(REASONS) + ([ERROR] if any(p == ERROR for _, p in report.confusion) else [])
    short = {c: c[:6] for c in columns}
    width = max(len(r) for r in REASONS)
    lines.append(" " * width + " " + " ".join(f"{short[c]:>6}" for c in columns))
    for row in REASONS:
        cells = [report.confusion[(row, c)] for c in columns]
        lines.append(f"{row:<{width}} " + " ".join(f"{n or '.':>6}" for n in cells))
    return "\n".join(lines)
