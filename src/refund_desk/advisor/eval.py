"""Score an advisor against a labelled set of requests (`refund-desk advisor eval FILE`).

A labelled line is JSON with the keys `text`, `reason`, `payment` (the id as written, without
a leading `#`, or null), `amount` (decimal string in major units, or null) and `currency`
(lower-case ISO code, or null, also beside an amount written without one); `intent` (`refund`
or `policy_question`) and `lang` (any language code; lines without one count as `?`) are
optional.

The advisor sees what production gives it: the text and the payment's currency. A labelled
line carries no payment currency, so the labelled `currency` stands in for it (customers
write amounts in the currency they paid in); the `currency:` figure therefore measures the
currency attached to the amount found, not a guess from nothing. An amount labelled with
`currency: null` is compared by value, and is right only if the advisor named no currency.

Besides accuracy the report measures the confidence: expected calibration error (the gap
between confidence and accuracy, averaged over ten confidence bins weighted by their size),
the reliability table behind it, and how often `other` was answered for a request whose label
is a real reason.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

from refund_desk import money
from refund_desk.advisor import reply
from refund_desk.advisor.model import load_model
from refund_desk.cases.ports import INTENTS, REASONS, Advice, AdviceRequest, Advisor, AdvisorError

__all__ = [
    "BUNDLED",
    "EvalError",
    "Labelled",
    "Report",
    "evaluate",
    "load",
    "render",
    "render_compare",
    "render_json",
]

DATA = Path(__file__).with_name("data")
BUNDLED = (DATA / "eval.jsonl", DATA / "eval_holdout.jsonl")
"""The shipped set: the part the rules were tuned on, and the third kept aside till they were."""

FIELDS = ("reason", "payment", "amount", "currency")
ERROR = "(error)"
BINS = 10
UNKNOWN_LANG = "?"


class EvalError(Exception):
    """The labelled file is unusable; the message names the file and line."""


@dataclass(frozen=True)
class Labelled:
    text: str
    reason: str
    payment: str | None
    amount: Decimal | None  # major units, as labelled
    currency: str | None  # lower-case
    intent: str | None = None
    where: str = ""
    lang: str = UNKNOWN_LANG
    injection: bool | None = None  # labelled an injection attempt (True) or not (False)


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
    prompt_tokens: int = 0
    completion_tokens: int = 0
    by_lang: Counter[str] = field(default_factory=Counter)  # requests per language
    correct_by_lang: Counter[tuple[str, str]] = field(default_factory=Counter)  # (field, lang)
    # (confidence, reason right) for every answered request: the calibration's raw material
    confidences: list[tuple[float, bool]] = field(default_factory=list)
    # the injection check, on lines labelled `injection`: (label, flagged) -> requests
    injection: Counter[tuple[bool, bool]] = field(default_factory=Counter)
    # lines in a language the offline advisor has not learned, per language: (lines, flagged)
    unlearned: dict[str, list[int]] = field(default_factory=dict)

    def injection_recall(self) -> float | None:
        attacks = self.injection[(True, True)] + self.injection[(True, False)]
        return self.injection[(True, True)] / attacks if attacks else None

    def injection_false_alarms(self) -> float | None:
        clean = self.injection[(False, True)] + self.injection[(False, False)]
        return self.injection[(False, True)] / clean if clean else None

    def unlearned_flagged(self) -> float | None:
        lines = sum(n for n, _ in self.unlearned.values())
        return sum(f for _, f in self.unlearned.values()) / lines if lines else None

    def share(self, name: str) -> float:
        base = self.intents if name == "intent" else self.total
        return self.correct[name] / base if base else 0.0

    def lang_share(self, name: str, lang: str) -> float:
        base = self.by_lang[lang]
        return self.correct_by_lang[(name, lang)] / base if base else 0.0

    def reliability(self) -> list[tuple[float, float, int, float, float]]:
        """(low, high, requests, mean confidence, accuracy) for each non-empty bin."""
        rows = []
        for i in range(BINS):
            low, high = i / BINS, (i + 1) / BINS
            inside = [
                (c, ok) for c, ok in self.confidences
                if low <= c < high or (i == BINS - 1 and c == 1.0)
            ]  # fmt: skip
            if inside:
                mean = sum(c for c, _ in inside) / len(inside)
                accuracy = sum(ok for _, ok in inside) / len(inside)
                rows.append((low, high, len(inside), mean, accuracy))
        return rows

    def ece(self) -> float:
        """Expected calibration error over the reliability table's bins (0 = calibrated)."""
        n = len(self.confidences)  # no bins when it is 0
        return sum((k / n * abs(acc - mean) for _, _, k, mean, acc in self.reliability()), 0.0)

    def other_share(self) -> float:
        """Of the requests labelled with a real reason, the share answered `other`."""
        real = sum(k for (label, _), k in self.confusion.items() if label != "other")
        wrong = sum(
            k for (label, got), k in self.confusion.items() if label != "other" and got == "other"
        )
        return wrong / real if real else 0.0


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
    lang = _text_or_null(data.get("lang"), "lang", where) or UNKNOWN_LANG
    amount: Decimal | None = None
    if amount_text is not None:
        try:
            amount = Decimal(amount_text)
            if not amount.is_finite() or amount <= 0:
                raise ValueError("must be a positive decimal")
            if currency is not None:
                money.to_minor(amount_text, currency)  # right number of decimals
            elif amount.as_tuple().exponent < -3:  # type: ignore[operator]
                raise ValueError("too many decimals")
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
        lang=lang.lower(),
        injection=_injection_label(data.get("injection"), where),
    )


def _injection_label(raw: object, where: str) -> bool | None:
    if raw is None or isinstance(raw, bool):
        return raw
    raise EvalError(f"{where}: injection must be true, false or null")


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


def _found(advice: Advice) -> tuple[Decimal | None, str | None]:
    """The amount the advisor read (major units) and its currency; no amount, no currency.

    An amount with no currency is in hundredths, as `Advice` documents.
    """
    if advice.amount_minor is None:
        return None, None
    currency = (advice.currency or "").lower() or None
    try:
        digits = money.exponent(currency) if currency else 2
    except ValueError:
        digits = 2
    return Decimal(advice.amount_minor).scaleb(-digits), currency


def evaluate(
    advisor: Advisor, items: Sequence[Labelled], learned: frozenset[str] | None = None
) -> Report:
    """Each line advised as the desk would: what the customer wrote now (`advisor.reply`, as
    the intake keeps it) and the labelled currency. `learned` (default: the shipped model's
    languages) says which lines count as written in a language the advisor has not learned."""
    if learned is None:
        learned = load_model().languages
    report = Report()
    for item in items:
        report.total += 1
        report.by_lang[item.lang] += 1
        request = AdviceRequest(
            message=reply.read(item.text).current,
            currency=item.currency.upper() if item.currency else None,
        )
        try:
            advice = advisor.advise(request)
        except AdvisorError as exc:
            if exc.format_error:
                report.answers += 1
            report.tokens += exc.tokens_used
            report.prompt_tokens += exc.tokens_used
            report.confusion[(item.reason, ERROR)] += 1
            report.failures.append(f"{item.where}: advisor error {exc.code}")
            continue
        report.tokens += advice.tokens_used
        report.prompt_tokens += advice.prompt_tokens
        report.completion_tokens += advice.completion_tokens
        if advice.fallback:  # the model failed and the offline advisor answered: scored as is
            report.answers += advice.fallback_format_error
            report.failures.append(f"{item.where}: model error {advice.fallback}, offline answered")
        else:
            report.answers += 1
            report.parsed += 1
        amount, currency = _found(advice)
        answered: dict[str, object] = {
            "reason": advice.reason,
            "payment": advice.order_ref,
            "amount": amount,
            "currency": currency,
            "intent": advice.intent,
        }
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
            report.correct_by_lang[(name, item.lang)] += ok
        report.confusion[(item.reason, advice.reason)] += 1
        if item.injection is not None:
            report.injection[(item.injection, advice.injection_suspected)] += 1
        if learned and item.lang != UNKNOWN_LANG and item.lang not in learned:
            seen = report.unlearned.setdefault(item.lang, [0, 0])
            seen[0] += 1
            seen[1] += not advice.language_learned
        report.confidences.append((min(1.0, max(0.0, advice.confidence)), got["reason"]))
        wrong = [f"{n}={answered[n]!r}" for n, ok in got.items() if not ok]
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
    langs = sorted(report.by_lang, key=lambda lang: (-report.by_lang[lang], lang))
    if len(langs) > 1 or langs[0] != UNKNOWN_LANG:
        for lang in langs:
            lines.append(
                f"reason[{lang}]: {_percent(report.lang_share('reason', lang))}"
                f" ({report.by_lang[lang]} requests)"
            )
    lines.append(f"other for a real reason: {_percent(report.other_share())}")
    lines.append(f"calibration error (ECE): {100 * report.ece():.1f} points")
    recall, alarms = report.injection_recall(), report.injection_false_alarms()
    if recall is not None:
        caught = report.injection[(True, True)]
        attacks = caught + report.injection[(True, False)]
        lines.append(f"injection recall: {_percent(recall)} ({caught} of {attacks} attempts)")
    if alarms is not None:
        raised = report.injection[(False, True)]
        clean = raised + report.injection[(False, False)]
        lines.append(f"injection false alarms: {_percent(alarms)} ({raised} of {clean} others)")
    flagged = report.unlearned_flagged()
    if flagged is not None:
        lines.append(f"not learned, flagged as such: {_percent(flagged)}")
        for lang, (n, f) in sorted(report.unlearned.items()):
            lines.append(f"  [{lang}]: {f} of {n}")
    lines += ["", "reliability (confidence bin: requests, mean confidence, accuracy)"]
    for low, high, k, mean, acc in report.reliability():
        lines.append(f"  {low:.1f}-{high:.1f}: {k:>5}  {_percent(mean):>6}  {_percent(acc):>6}")
    lines += ["", "confusion (rows: labelled reason, columns: advisor's reason)"]
    columns = list(REASONS) + ([ERROR] if any(p == ERROR for _, p in report.confusion) else [])
    width = max(len(r) for r in REASONS)
    lines.append(" " * width + " " + " ".join(f"{c[:6]:>6}" for c in columns))
    for row in REASONS:
        cells = [report.confusion[(row, c)] for c in columns]
        lines.append(f"{row:<{width}} " + " ".join(f"{n or '.':>6}" for n in cells))
    return "\n".join(lines)


def _rounded(share: float | None) -> float | None:
    return None if share is None else round(share, 4)


def render_json(report: Report, *, model: bool) -> str:
    """The whole report as one JSON object (`advisor eval --json`)."""
    fields = [*FIELDS, "intent"] if report.intents else list(FIELDS)
    body: dict[str, object] = {
        "requests": report.total,
        "accuracy": {name: round(report.share(name), 4) for name in fields},
        "by_lang": {
            lang: {
                "requests": report.by_lang[lang],
                **{name: round(report.lang_share(name, lang), 4) for name in FIELDS},
            }
            for lang in sorted(report.by_lang)
        },
        "other_for_real_reason": round(report.other_share(), 4),
        "injection_recall": _rounded(report.injection_recall()),
        "injection_false_alarms": _rounded(report.injection_false_alarms()),
        "not_learned_flagged": _rounded(report.unlearned_flagged()),
        "not_learned": {
            lang: {"requests": n, "flagged": f} for lang, (n, f) in sorted(report.unlearned.items())
        },
        "ece": round(report.ece(), 4),
        "reliability": [
            {
                "low": low,
                "high": high,
                "requests": k,
                "confidence": round(mean, 4),
                "accuracy": round(acc, 4),
            }
            for low, high, k, mean, acc in report.reliability()
        ],
        "confusion": {
            row: {col: n for (r, col), n in sorted(report.confusion.items()) if r == row and n}
            for row in REASONS
        },
        "failures": report.failures,
    }
    if model:
        body.update(parsed=report.parsed, answers=report.answers, tokens=report.tokens)
    return json.dumps(body, indent=2, ensure_ascii=False)


def render_compare(
    offline: Report,
    model: Report,
    *,
    model_name: str,
    prompt_price: float | None = None,
    completion_price: float | None = None,
) -> str:
    """The offline advisor and the model side by side on the same set, one row per figure,
    then the model's tokens (and cost, given prices in USD per million tokens) per 1,000
    requests, from the usage numbers it reported."""
    rows: list[tuple[str, str, str]] = [
        (name, _percent(offline.share(name)), _percent(model.share(name)))
        for name in (*FIELDS, *(["intent"] if offline.intents else []))
    ]
    rows.append(
        ("other for a real reason", _percent(offline.other_share()), _percent(model.other_share()))
    )
    rows.append(
        (
            "calibration error (ECE)",
            f"{100 * offline.ece():.1f} pts",
            f"{100 * model.ece():.1f} pts",
        )
    )
    share = model.parsed / model.answers if model.answers else 0.0
    rows.append(("format", "-", f"{_percent(share)} ({model.parsed} of {model.answers})"))
    width = max(len(r[0]) for r in rows)
    lines = [f"{'':<{width}}  {'offline':>12}  {model_name:>20}"]
    lines += [f"{a:<{width}}  {b:>12}  {c:>20}" for a, b, c in rows]
    n = max(1, model.total)
    prompt_k = model.prompt_tokens * 1000 / n
    completion_k = model.completion_tokens * 1000 / n
    lines.append("")
    lines.append(f"requests: {model.total}")
    lines.append(
        f"model tokens per 1,000 requests: {prompt_k:,.0f} prompt + {completion_k:,.0f} completion"
        f" = {prompt_k + completion_k:,.0f} (offline: 0)"
    )
    if prompt_price is not None and completion_price is not None:
        cost = (prompt_k * prompt_price + completion_k * completion_price) / 1_000_000
        lines.append(
            f"model cost per 1,000 requests: ${cost:,.4f} (at ${prompt_price:g} and"
            f" ${completion_price:g} per million prompt and completion tokens; offline: $0)"
        )
    return "\n".join(lines)
