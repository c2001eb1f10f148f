"""Backtest: replay the frozen facts of stored cases against a policy and count what changes.

Pure: it takes an iterable of ``StoredCase`` (consumed once) and a ``CompiledPolicy``, and
keeps only counts, sums and a few example ids per bucket, never the cases themselves, so
memory stays flat however many cases there are. Every changed case can go to a ``sink``
(the CSV writer) as it is seen. A case is compared on the policy's own outcome then and now;
what people later did with it is not the policy's doing.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

from refund_desk import money
from refund_desk.policy.context import null_context
from refund_desk.policy.engine import CompiledPolicy
from refund_desk.policy.errors import ContextInvalid
from refund_desk.policy.schema import PolicyDocument
from refund_desk.policy.words import OUTCOME_DONE, group_name, rule_name
from refund_desk.text import Code, Mark, Text, join, lines, text

EXAMPLES = 3
COMPARED = ("approve", "review", "deny")  # tier-1 answers ("inform") are questions, not refunds
CSV_COLUMNS = (
    "case_id",
    "created_at",
    "amount",
    "currency",
    "was_outcome",
    "was_rule",
    "now_outcome",
    "now_rule",
    "error",
    "was_tier",
    "now_tier",
    "was_approvers",
    "now_approvers",
)


@dataclass(frozen=True)
class StoredCase:
    """What a backtest needs of a case: its frozen facts and what the policy decided then."""

    id: str
    created_at: datetime
    amount: int
    currency: str
    facts: Mapping[str, Any] | None
    outcome: str | None
    rule: str | None
    tier: int | None = None  # None: not stored then, so not compared
    approvers: str | None = None


def _needed(tier: int | None) -> int | None:
    return None if tier is None else (2 if tier >= 4 else 1)


@dataclass(frozen=True)
class Replayed:
    """One case decided again: now (by the policy under test) against then."""

    case: StoredCase
    outcome: str
    rule: str
    error: str | None = None
    tier: int | None = None
    approvers: str | None = None

    def changes(self) -> tuple[str, ...]:
        """Every kind of difference: outcome, tier, approvers (the group), approvals needed."""
        case = self.case
        kinds = []
        if self.error is not None or self.outcome != case.outcome:
            kinds.append("outcome")
        if case.tier is not None and self.tier is not None and self.tier != case.tier:
            kinds.append("tier")
        people = self.outcome == "review" and case.outcome == "review"
        if people and case.approvers != self.approvers and (case.approvers or self.approvers):
            kinds.append("approvers")
        if case.tier is not None and _needed(self.tier) != _needed(case.tier):
            kinds.append("approvals")
        return tuple(kinds)

    @property
    def changed(self) -> bool:
        return bool(self.changes())


@dataclass
class Bucket:
    """Cases and money (per currency, minor units) in one kind of change, with examples."""

    cases: int = 0
    amounts: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    def add(self, case: StoredCase) -> None:
        self.cases += 1
        self.amounts[case.currency] = self.amounts.get(case.currency, 0) + case.amount
        if len(self.examples) < EXAMPLES:
            self.examples.append(case.id)

    def to_dict(self) -> dict[str, Any]:
        return {"cases": self.cases, "amounts": dict(self.amounts), "examples": self.examples}


@dataclass
class Tally:
    """Running totals of a backtest: per outcome change, per deciding rule, errors."""

    cases: int = 0
    unchanged: int = 0
    skipped: int = 0  # no frozen facts, or not a refund decision (a tier-1 answer)
    errors: Bucket = field(default_factory=Bucket)
    flips: dict[tuple[str, str], Bucket] = field(default_factory=dict)
    rules: dict[str, dict[str, Any]] = field(default_factory=dict)  # rule -> decided, changed
    # Same outcome, other people: (kind, then, now) -> cases; kind is tier | approvers | approvals
    routes: dict[tuple[str, str, str], Bucket] = field(default_factory=dict)

    def add(self, replayed: Replayed) -> None:
        case = replayed.case
        self.cases += 1
        rule = self.rules.setdefault(replayed.rule, {"decided": 0, "flips": {}})
        rule["decided"] += 1
        if replayed.error is not None:
            self.errors.add(case)
        changes = replayed.changes()
        if not changes:
            self.unchanged += 1
            return
        for kind, then, now in (
            ("tier", case.tier, replayed.tier),
            ("approvers", case.approvers, replayed.approvers),
            ("approvals", _needed(case.tier), _needed(replayed.tier)),
        ):
            if kind in changes:
                self.routes.setdefault((kind, str(then), str(now)), Bucket()).add(case)
        if "outcome" not in changes:
            return
        key = (str(case.outcome), replayed.outcome)
        self.flips.setdefault(key, Bucket()).add(case)
        rule["flips"].setdefault(f"{key[0]}->{key[1]}", Bucket()).add(case)

    def summary(self) -> dict[str, Any]:
        """JSON-ready: what the gate stores and the Slack message shows."""
        flips = sorted(self.flips.items(), key=lambda kv: -kv[1].cases)
        return {
            "cases": self.cases,
            "unchanged": self.unchanged,
            "changed": self.cases - self.unchanged,
            "skipped": self.skipped,
            "errors": self.errors.to_dict(),
            "flips": [{"from": a, "to": b, **bucket.to_dict()} for (a, b), bucket in flips],
            "routes": [
                {"kind": kind, "from": a, "to": b, **bucket.to_dict()}
                for (kind, a, b), bucket in sorted(self.routes.items(), key=lambda kv: -kv[1].cases)
            ],
            "rules": {
                rule: {
                    "decided": data["decided"],
                    "flips": {k: b.to_dict() for k, b in data["flips"].items()},
                }
                for rule, data in sorted(self.rules.items())
            },
        }


_SHAPE = {section: frozenset(facts) for section, facts in null_context().items()}


def _complete(facts: Mapping[str, Any]) -> bool:
    """Frozen facts with every fact of today's list: checked when they were frozen."""
    return facts.keys() == _SHAPE.keys() and all(
        isinstance(facts[s], Mapping) and facts[s].keys() == f for s, f in _SHAPE.items()
    )


def decide_again(policy: CompiledPolicy, case: StoredCase) -> Replayed:
    """Decide a stored case's frozen facts with ``policy`` (no counterfactual: speed).

    Facts were validated when the case was decided: a complete set goes straight to the
    engine's decision (the one ``evaluate`` makes after completing a context), anything else
    takes the checked path.
    """
    assert case.facts is not None
    try:
        if _complete(case.facts):
            decision = policy._decide(dict(case.facts))
        else:
            decision = policy.evaluate(case.facts, counterfactual=False)
    except ContextInvalid as exc:  # facts frozen under an older list of facts
        return Replayed(case, "review", "error", f"facts no longer valid: {exc}")
    return Replayed(
        case, decision.outcome, decision.rule, decision.error, decision.tier, decision.approvers
    )


def replay(
    policy: CompiledPolicy,
    cases: Iterable[StoredCase],
    *,
    sink: Callable[[Replayed], None] | None = None,
    progress: Callable[[int], None] | None = None,
    every: int = 5000,
) -> Tally:
    """Decide every case again; ``sink`` sees each changed case, ``progress`` the count."""
    tally = Tally()
    for case in cases:
        if case.facts is None or case.outcome not in COMPARED:
            tally.skipped += 1
            continue
        replayed = decide_again(policy, case)
        tally.add(replayed)
        if sink is not None and replayed.changed:
            sink(replayed)
        if progress is not None and tally.cases % every == 0:
            progress(tally.cases)
    return tally


class CsvSink:
    """Writes each changed case as a CSV row to a file as it comes: nothing is kept."""

    def __init__(self, out: IO[str]) -> None:
        self._writer = csv.writer(out)
        self._writer.writerow(CSV_COLUMNS)

    def __call__(self, replayed: Replayed) -> None:
        case = replayed.case
        self._writer.writerow(
            (
                case.id,
                case.created_at.isoformat(),
                str(money.to_major(case.amount, case.currency)),
                case.currency,
                case.outcome,
                case.rule,
                replayed.outcome,
                replayed.rule,
                replayed.error or "",
                "" if case.tier is None else case.tier,
                replayed.tier,
                case.approvers or "",
                replayed.approvers or "",
            )
        )


def _n(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _amounts(amounts: Mapping[str, int]) -> str:
    return " + ".join(money.format_money(v, cur) for cur, v in sorted(amounts.items())) or "0"


def _bucket(change: Text | str, bucket: Mapping[str, Any]) -> Text:
    """One kind of change: how many cases, how much money, a few examples."""
    examples = join(", ", [Code(str(e)) for e in bucket["examples"]])
    cases, amounts = _n(bucket["cases"], "case"), _amounts(bucket["amounts"])
    return text("• ", change, f": {cases}, {amounts} (e.g. ", examples, ")")


def _done(outcome: str) -> str:
    return OUTCOME_DONE.get(outcome, outcome)


def _route(route: Mapping[str, Any]) -> str:
    """ "tier 3 → 2", "approvers support leads → finance", "approvals needed 1 → 2"."""
    then, now = str(route["from"]), str(route["to"])
    if route["kind"] == "approvers":
        return f"approvers {group_name(then)} → {group_name(now)}"
    if route["kind"] == "approvals":
        return f"approvals needed {then} → {now}"
    return f"{route['kind']} {then} → {now}"


def summary_text(
    summary: Mapping[str, Any], *, label: str, days: int, doc: PolicyDocument | None = None
) -> Text:
    """A few lines for people: totals, the biggest changes with examples, errors; with the
    replayed ``doc``, rules by their descriptions."""
    cases = int(summary.get("cases", 0))
    head = f"Backtest of {label} over the last {days} days: "
    if cases == 0:
        return text(
            head + "no stored cases to replay (0 cases). That is a valid run: there is nothing "
            "this change would have decided differently yet."
        )
    out: list[Text | str] = [
        head + f"{_n(cases, 'case')}, {summary['unchanged']:,} unchanged, "
        f"{summary['changed']:,} would be decided differently."
    ]
    flips = summary.get("flips", [])[:6]
    out += [_bucket(f"{_done(f['from'])} → {_done(f['to'])}", f) for f in flips]
    out += [_bucket(_route(r), r) for r in summary.get("routes", [])[:6]]
    rules = summary.get("rules", {})
    moved = sorted(
        ((r, sum(b["cases"] for b in d["flips"].values())) for r, d in rules.items()),
        key=lambda kv: -kv[1],
    )
    by_rule = join(", ", [text(rule_name(doc, r), f": {_n(n, 'case')}") for r, n in moved if n])
    if by_rule:
        out.append(text("Changes by the rule that now decides: ", by_rule, "."))
    errors = summary.get("errors", {})
    if errors.get("cases"):
        out.append(text(Mark("warning"), f" {_n(errors['cases'], 'case')} could not be evaluated."))
    if summary.get("skipped"):
        out.append(f"({summary['skipped']:,} stored cases had no refund decision to compare.)")
    return lines(*out)
