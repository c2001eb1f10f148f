"""Insights: the desk's figures as pictures, each with its table.

Every figure is aggregated in the database over a date window (cases created in it, refunds
finished in it): counts and sums grouped by UTC day (`storage/sqltime.day_of`), the wait for a
person ranked by a window function so only two rows per tier come back (median and p90 by
nearest rank), never every case read into Python. The pictures are `charts.py`'s SVG.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from sqlalchemy import ColumnElement, and_, case, func, or_, select
from sqlmodel import Session, col

from refund_desk import clock, money
from refund_desk.bot.outbox import active_doc
from refund_desk.policy.schema import PolicyDocument
from refund_desk.policy.words import rule_name
from refund_desk.runtime import Runtime
from refund_desk.storage.models import Approval, Case, Execution, ProcessorFinding
from refund_desk.storage.sqltime import day_of, seconds
from refund_desk.web.desk.access import reader
from refund_desk.web.desk.charts import Chart, Series, bars, columns
from refund_desk.web.desk.render import page, words
from refund_desk.web.desk.session import Viewer
from refund_desk.web.metrics import DRIFT_ALERT, WAITING, reason_drift

router = APIRouter(include_in_schema=False)

PERIODS = (7, 30, 90)
OUTCOMES: dict[str, tuple[str, ...]] = {
    "Refunded": ("refunded",),
    "Denied or answered": ("denied",),
    "With a person": WAITING,
    "In progress": ("received", "advised", "decided", "approved", "executing"),
    "Failed": ("failed",),
}
FINDING_WORDS = {
    "unknown_refund": "A refund at the processor we did not make",
    "missing_at_processor": "Our refund missing at the processor",
    "amount_mismatch": "Amounts differ",
    "status_mismatch": "Statuses differ",
    "currency_mismatch": "Currencies differ",
}
RULES_SHOWN = 12
LATEST_FINDINGS = 10


@dataclass(frozen=True)
class Window:
    """Cases created (refunds finished) from `start` (a UTC midnight) to `end` (now)."""

    days: int
    start: datetime
    end: datetime

    @classmethod
    def last(cls, days: int, now: datetime) -> Window:
        midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return cls(days, midnight - timedelta(days=days - 1), now + timedelta(microseconds=1))

    def labels(self) -> list[str]:
        return [(self.start + timedelta(days=i)).strftime("%Y-%m-%d") for i in range(self.days)]

    def created(self, column: Any) -> ColumnElement[bool]:
        return and_(column >= self.start, column < self.end)


@dataclass(frozen=True)
class Wait:
    tier: int
    cases: int
    median: float  # seconds
    p90: float


def _count(n: float) -> str:
    return f"{n:,.0f}"


def duration(seconds_: float) -> str:
    """A wait as people say it: "45 s", "12 min", "3.5 h", "2.1 days"."""
    if seconds_ < 90:
        return f"{seconds_:.0f} s"
    if seconds_ < 90 * 60:
        return f"{seconds_ / 60:.0f} min"
    if seconds_ < 48 * 3600:
        return f"{seconds_ / 3600:.1f} h"
    return f"{seconds_ / 86400:.1f} days"


def _money(currency: str) -> Callable[[float], str]:
    exp = money.exponent(currency)
    return lambda major: money.format_money(round(major * 10**exp), currency)


def _share(n: float) -> str:
    return f"{n:.0%}"


# ------------------------------------------------------------------ figures (SQL)


def outcomes_by_day(session: Session, window: Window) -> dict[str, dict[str, int]]:
    """day -> outcome (OUTCOMES' keys) -> cases created that day."""
    day = day_of(col(Case.created_at))
    rows = session.execute(
        select(day, col(Case.status), func.count())
        .where(window.created(col(Case.created_at)))
        .group_by(day, col(Case.status))
    ).all()
    named = {status: name for name, statuses in OUTCOMES.items() for status in statuses}
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for d, status, n in rows:
        out[str(d)][named.get(status, "In progress")] += int(n)
    return out


def refunded_by_day(session: Session, window: Window) -> dict[str, dict[str, int]]:
    """currency -> day -> minor units refunded (executions that succeeded, by when)."""
    day = day_of(col(Execution.finished_at))
    rows = session.execute(
        select(col(Execution.currency), day, func.sum(col(Execution.amount)))
        .where(col(Execution.status) == "succeeded", window.created(col(Execution.finished_at)))
        .group_by(col(Execution.currency), day)
    ).all()
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for currency, d, total in rows:
        out[str(currency)][str(d)] = int(total or 0)
    return out


def rules_fired(session: Session, window: Window) -> list[tuple[str, int]]:
    """(rule, cases it decided), most first: the cases created in the window."""
    rule = col(Case.decision)["rule"].as_string()
    rows = session.execute(
        select(rule, func.count())
        .where(col(Case.decision).is_not(None), window.created(col(Case.created_at)))
        .group_by(rule)
        .order_by(func.count().desc(), rule)
    ).all()
    return [(str(r), int(n)) for r, n in rows]


def waits_by_tier(session: Session, window: Window) -> list[Wait]:
    """The wait from a case's creation to the first person's decision on it, by tier: median
    and p90 by nearest rank (the ceil(q·n)-th shortest), for cases created in the window that
    a person decided."""
    first = (
        select(col(Approval.case_id), func.min(col(Approval.created_at)).label("first"))
        .where(col(Approval.created_at) >= window.start)
        .group_by(col(Approval.case_id))
        .subquery()
    )
    tier = col(Case.decision)["tier"].as_integer()
    wait = seconds(col(Case.created_at), first.c.first)
    ranked = (
        select(
            tier.label("tier"),
            wait.label("wait"),
            func.row_number().over(partition_by=tier, order_by=wait).label("n"),
            func.count().over(partition_by=tier).label("of"),
        )
        .join(first, first.c.case_id == col(Case.id))
        .where(window.created(col(Case.created_at)), col(Case.decision).is_not(None))
        .subquery()
    )
    median, p90 = (ranked.c.of + 1) // 2, (ranked.c.of * 9 + 9) // 10  # ceil(q·n)
    rows = session.execute(
        select(ranked.c.tier, ranked.c.of, ranked.c.n, ranked.c.wait)
        .where(or_(ranked.c.n == median, ranked.c.n == p90))
        .order_by(ranked.c.tier, ranked.c.n)
    ).all()
    found: dict[int, dict[str, float]] = defaultdict(dict)
    for t, of, n, w in rows:
        at = found[int(t)]
        at["of"] = int(of)
        if n == (of + 1) // 2:
            at["median"] = round(float(w), 2)  # SQLite's julianday is good to ~10 µs
        if n == (of * 9 + 9) // 10:
            at["p90"] = round(float(w), 2)
    return [Wait(t, int(v["of"]), v["median"], v["p90"]) for t, v in sorted(found.items()) if t]


def sla_by_day(session: Session, window: Window, now: datetime) -> dict[str, tuple[int, int]]:
    """day -> (SLA breaches, escalations) among the cases created that day. A breach: the first
    person's decision came after the deadline, or none has and the case still waits past it."""
    first = (
        select(col(Approval.case_id), func.min(col(Approval.created_at)).label("first"))
        .where(col(Approval.created_at) >= window.start)
        .group_by(col(Approval.case_id))
        .subquery()
    )
    due = col(Case.sla_due_at)
    breached = and_(
        due.is_not(None),
        or_(
            first.c.first > due,
            and_(first.c.first.is_(None), col(Case.status).in_(WAITING), due < now),
        ),
    )
    day = day_of(col(Case.created_at))
    rows = session.execute(
        select(
            day,
            func.sum(case((breached, 1), else_=0)),
            func.sum(case((col(Case.escalation_level) > 0, 1), else_=0)),
        )
        .outerjoin(first, first.c.case_id == col(Case.id))
        .where(window.created(col(Case.created_at)), due.is_not(None))
        .group_by(day)
    ).all()
    return {str(d): (int(b or 0), int(e or 0)) for d, b, e in rows}


def waiting_past_deadline(session: Session, now: datetime) -> int:
    return int(
        session.scalar(
            select(func.count())
            .select_from(Case)
            .where(col(Case.status).in_(WAITING), col(Case.sla_due_at) < now)
        )
        or 0
    )


def automatic_share(session: Session, window: Window) -> dict[bool, tuple[int, dict[str, int]]]:
    """automatic? -> (refunds, minor units by currency): refunds that succeeded in the window."""
    rows = session.execute(
        select(
            col(Execution.automatic),
            col(Execution.currency),
            func.count(),
            func.sum(col(Execution.amount)),
        )
        .where(col(Execution.status) == "succeeded", window.created(col(Execution.finished_at)))
        .group_by(col(Execution.automatic), col(Execution.currency))
    ).all()
    out: dict[bool, tuple[int, dict[str, int]]] = {True: (0, {}), False: (0, {})}
    for automatic, currency, n, total in rows:
        count, amounts = out[bool(automatic)]
        amounts[str(currency)] = int(total or 0)
        out[bool(automatic)] = (count + int(n), amounts)
    return out


def findings_by_kind(session: Session, window: Window) -> list[tuple[str, int]]:
    rows = session.execute(
        select(col(ProcessorFinding.kind), func.count())
        .where(window.created(col(ProcessorFinding.found_at)))
        .group_by(col(ProcessorFinding.kind))
        .order_by(func.count().desc())
    ).all()
    return [(str(k), int(n)) for k, n in rows]


def latest_findings(session: Session, window: Window) -> list[ProcessorFinding]:
    return list(
        session.scalars(
            select(ProcessorFinding)
            .where(window.created(col(ProcessorFinding.found_at)))
            .order_by(col(ProcessorFinding.found_at).desc())
            .limit(LATEST_FINDINGS)
        ).all()
    )


# ------------------------------------------------------------------ pictures


def charts(session: Session, window: Window, now: datetime) -> list[Chart]:
    doc: PolicyDocument | None = active_doc(session)
    days = window.labels()
    period = f"the last {window.days} days"
    out: list[Chart] = []

    by_day = outcomes_by_day(session, window)
    series = [Series(name, [by_day.get(d, {}).get(name, 0) for d in days]) for name in OUTCOMES]
    total = sum(sum(s.values) for s in series)
    refunded = sum(series[0].values)
    out.append(
        columns(
            "outcomes",
            "Requests a day by outcome",
            f"{_count(total)} requests in {period}, {_count(refunded)} refunded; each day's "
            "column is split by where its requests stand now.",
            days,
            series,
            _count,
        )
    )

    money_by_day = refunded_by_day(session, window)
    currencies = sorted(money_by_day, key=lambda c: (c != (doc.currency if doc else ""), c))
    for currency in currencies or [doc.currency if doc else "USD"]:
        per_day = money_by_day.get(currency, {})
        minor = [per_day.get(d, 0) for d in days]
        exp = money.exponent(currency)
        out.append(
            columns(
                f"money-{currency.lower()}",
                f"Money refunded a day ({currency})",
                f"{money.format_money(sum(minor), currency)} refunded in {period}.",
                days,
                [Series(f"Refunded ({currency})", [m / 10**exp for m in minor])],
                _money(currency),
            )
        )

    fired = rules_fired(session, window)
    shown = fired[:RULES_SHOWN]
    more = (
        f" The {len(fired) - RULES_SHOWN} others are left out." if len(fired) > RULES_SHOWN else ""
    )
    out.append(
        bars(
            "rules",
            "The rules that decide",
            f"How many requests of {period} each rule decided, most first.{more}",
            [words(rule_name(doc, r)) for r, _ in shown],
            [Series("Requests", [n for _, n in shown])],
            _count,
            label_head="Rule",
        )
    )

    waits = waits_by_tier(session, window)
    out.append(
        bars(
            "waits",
            "Wait for a person, by tier",
            f"From the request to a person's first decision, for requests of {period}: the "
            "median and the 90th percentile (nine in ten were decided sooner).",
            [f"Tier {w.tier} ({_count(w.cases)} cases)" for w in waits],
            [Series("Median", [w.median for w in waits]), Series("p90", [w.p90 for w in waits])],
            duration,
            label_head="Tier",
        )
    )

    sla = sla_by_day(session, window, now)
    late = waiting_past_deadline(session, now)
    breaches = [sla.get(d, (0, 0))[0] for d in days]
    escalations = [sla.get(d, (0, 0))[1] for d in days]
    out.append(
        columns(
            "sla",
            "SLA breaches and escalations",
            f"{_count(sum(breaches))} requests of {period} missed their deadline and "
            f"{_count(sum(escalations))} were escalated; {_count(late)} wait past their "
            "deadline now.",
            days,
            [Series("SLA breached", breaches), Series("Escalated", escalations)],
            _count,
        )
    )

    shares = automatic_share(session, window)
    auto, person = shares[True][0], shares[False][0]
    paid = auto + person

    def amounts(found: dict[str, int]) -> str:
        return ", ".join(money.format_money(v, c) for c, v in sorted(found.items())) or "nothing"

    out.append(
        bars(
            "automatic",
            "Paid automatically or by a person",
            f"Of {_count(paid)} refunds paid in {period}, "
            + (f"{_share(auto / paid)} were paid automatically." if paid else "none yet."),
            [
                f"Automatically ({_share(auto / paid) if paid else '0%'}; "
                f"{amounts(shares[True][1])})",
                f"Approved by a person ({_share(person / paid) if paid else '0%'}; "
                f"{amounts(shares[False][1])})",
            ],
            [Series("Refunds", [auto, person])],
            _count,
            label_head="Who decided",
        )
    )

    drift = sorted(reason_drift(session, now).items(), key=lambda kv: -max(kv[1]))
    moved = [r for r, (a, b) in drift if abs(a - b) >= DRIFT_ALERT]
    out.append(
        bars(
            "drift",
            "Reasons this week against the four weeks before",
            "Each reason's share of new requests in the last 7 days and in the 28 days before; "
            + (
                f"{len(moved)} moved by {DRIFT_ALERT:.0%} or more (marked “moved”)."
                if moved
                else f"none moved by {DRIFT_ALERT:.0%} or more."
            ),
            [
                f"{(r or 'no reason').replace('_', ' ')}"
                + (f" — moved {abs(a - b):.0%}" if abs(a - b) >= DRIFT_ALERT else "")
                for r, (a, b) in drift
            ],
            [
                Series("This week", [a for _, (a, _b) in drift]),
                Series("Four weeks before", [b for _, (_a, b) in drift]),
            ],
            _share,
            label_head="Reason",
        )
    )

    kinds = findings_by_kind(session, window)
    out.append(
        bars(
            "findings",
            "Reconciliation findings",
            f"{_count(sum(n for _, n in kinds))} differences between our record and the "
            f"processor's found in {period}, by kind.",
            [FINDING_WORDS.get(k, k.replace("_", " ")) for k, _ in kinds],
            [Series("Findings", [n for _, n in kinds])],
            _count,
            label_head="Kind",
        )
    )
    return out


@router.get("/desk/insights")
def insights(request: Request, days: int = 30, viewer: Viewer = Depends(reader)) -> Response:
    runtime: Runtime = request.app.state.runtime
    days = days if days in PERIODS else 30
    now = clock.now()
    window = Window.last(days, now)
    with runtime.db.read() as session:
        drawn = charts(session, window, now)
        findings = latest_findings(session, window)
    return page(
        request,
        viewer,
        "insights.html",
        title="Insights",
        section="insights",
        charts=drawn,
        findings=findings,
        finding_words=FINDING_WORDS,
        periods=PERIODS,
        days=days,
        window=window,
    )
