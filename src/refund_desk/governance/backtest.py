"""Backtests against the stored cases: stream them, decide each again, record the run.

Cases are read in keyset batches over the primary key, each batch in its own short read
transaction, so memory does not grow with the number of cases and no transaction stays open
for the whole run. The recorded run (`PolicyBacktest`) is what the publishing gate looks for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import IO, Any

import orjson
from sqlalchemy import Text as SqlText
from sqlalchemy import cast, select
from sqlmodel import Session, col

from refund_desk import clock
from refund_desk.cases.errors import InvalidRequest
from refund_desk.policy import (
    CompiledPolicy,
    PolicyDocument,
    PolicyInvalid,
    parse_policy,
    policy_hash,
)
from refund_desk.policy.backtest import CsvSink, StoredCase, replay, summary_text
from refund_desk.storage.audit import Actor, AuditLog
from refund_desk.storage.db import Database
from refund_desk.storage.models import Case, PolicyBacktest, PolicyDraft
from refund_desk.text import Code, Text, text

BATCH = 2000
PROGRESS_EVERY = 2000
BACKTEST_DAYS = 30  # the publishing gate wants a backtest over at least this many days

SessionFactory = Callable[[], AbstractContextManager[Session]]


def require_backtest(session: Session, content_hash: str) -> PolicyBacktest:
    """The latest backtest over at least the last 30 days on exactly ``content_hash``."""
    row = session.scalars(
        select(PolicyBacktest)
        .where(
            col(PolicyBacktest.content_hash) == content_hash,
            col(PolicyBacktest.days) >= BACKTEST_DAYS,
        )
        .order_by(col(PolicyBacktest.id).desc())
        .limit(1)
    ).first()
    if row is None:
        raise InvalidRequest(
            "policy_not_backtested",
            text(
                f"No backtest over the last {BACKTEST_DAYS} days has run on this exact policy "
                f"(hash {content_hash[:12]}); run one first (",
                Code("/refund-policy backtest DRAFT"),
                " or ",
                Code("refund-desk policy backtest FILE"),
                ").",
            ),
        )
    return row


@dataclass(frozen=True)
class BacktestRun:
    """A finished backtest, before it is recorded."""

    label: str
    content_hash: str
    days: int
    summary: dict[str, Any]
    doc: PolicyDocument | None = field(default=None, compare=False)
    """The policy replayed: its rules' descriptions name them in the summary."""

    @property
    def text(self) -> Text:
        return summary_text(self.summary, label=self.label, days=self.days, doc=self.doc)


def stream_cases(
    open_session: SessionFactory, *, since: datetime, batch: int = BATCH
) -> Iterator[StoredCase]:
    """Cases created since ``since``, in id order, a batch at a time.

    Only the decision's outcome, rule, tier and approver group are read (extracted in SQL), not
    its whole trace; the facts come as text, decoded with orjson.
    """
    decision = col(Case.decision)
    last: str | None = None
    while True:
        where = [col(Case.created_at) >= since]
        if last is not None:
            where.append(col(Case.id) > last)
        with open_session() as session:
            rows = session.execute(
                select(
                    col(Case.id),
                    col(Case.created_at),
                    col(Case.amount),
                    col(Case.currency),
                    cast(col(Case.facts), SqlText),
                    decision["outcome"].as_string(),
                    decision["rule"].as_string(),
                    decision["tier"].as_integer(),
                    decision["approvers"].as_string(),
                )
                .where(*where)
                .order_by(col(Case.id))
                .limit(batch)
            ).all()
        for case_id, created_at, amount, currency, facts, outcome, rule, tier, group in rows:
            frozen = orjson.loads(facts) if facts is not None else None
            yield StoredCase(
                case_id, created_at, amount, currency, frozen, outcome, rule, tier, group
            )
        if len(rows) < batch:
            return
        last = rows[-1][0]


def run_backtest(
    source: Database | Session,
    policy: CompiledPolicy,
    *,
    label: str,
    days: int = BACKTEST_DAYS,
    now: datetime | None = None,
    csv_out: IO[str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> BacktestRun:
    """Replay the last ``days`` of cases against ``policy``; nothing is written.

    ``source`` is the database (each batch in its own short read transaction) or an open
    session. The policy is compiled once by the caller; each case costs one decision.
    ``csv_out`` receives every changed case as CSV, ``progress`` the count so far.
    """
    if days < 1:
        raise ValueError("a backtest needs at least one day")
    now = now or clock.now()
    since = now - timedelta(days=days)
    started = time.perf_counter()
    if isinstance(source, Session):
        open_session: SessionFactory = lambda: nullcontext(source)  # noqa: E731
    else:
        open_session = source.read
    tally = replay(
        policy,
        stream_cases(open_session, since=since),
        sink=CsvSink(csv_out) if csv_out is not None else None,
        progress=progress,
        every=PROGRESS_EVERY,
    )
    summary = tally.summary()
    summary.update(
        label=label,
        days=days,
        since=since.isoformat(),
        content_hash=policy_hash(policy.doc),
        seconds=round(time.perf_counter() - started, 3),
    )
    return BacktestRun(label, summary["content_hash"], days, summary, policy.doc)


def record_backtest(
    session: Session,
    audit: AuditLog,
    run: BacktestRun,
    *,
    actor: Actor,
    draft_id: int | None = None,
    audited: bool = True,
) -> PolicyBacktest:
    """Store the run (the gate's evidence) with its audit record, in the caller's transaction.

    ``audited=False`` when the run is part of a publish: the publish record then names it.
    """
    now = clock.now()
    row = PolicyBacktest(
        content_hash=run.content_hash,
        label=run.label,
        days=run.days,
        cases=int(run.summary["cases"]),
        ran_by=str(actor),
        ran_at=now,
        summary=run.summary,
    )
    session.add(row)
    session.flush()
    if draft_id is not None:
        draft = session.get(PolicyDraft, draft_id)
        if draft is not None and draft.content_hash == run.content_hash:
            draft.last_backtest_hash = run.content_hash
            draft.last_backtest_at = now
            draft.last_backtest_summary = run.summary
            session.add(draft)
    if not audited:
        return row
    audit.append(
        session,
        action="policy.backtested",
        actor=actor,
        payload={
            "label": run.label,
            "content_hash": run.content_hash,
            "days": run.days,
            "cases": run.summary["cases"],
            "changed": run.summary["changed"],
            "backtest_id": row.id,
        },
    )
    return row


def ensure_backtest(
    session: Session, audit: AuditLog, *, source: str, actor: Actor
) -> PolicyBacktest | None:
    """Run and record the 30-day backtest inside ``session`` unless one is on record.

    For scripted publishes (``publish(backtest="run")``); None if ``source`` is invalid
    (the gate then says why).
    """
    try:
        doc = parse_policy(source)
    except PolicyInvalid:
        return None
    try:
        return require_backtest(session, policy_hash(doc))
    except InvalidRequest:
        pass
    run = run_backtest(
        session,
        CompiledPolicy.compile(doc),
        label=f"{doc.policy} (at publish)",
        days=BACKTEST_DAYS,
    )
    return record_backtest(session, audit, run, actor=actor, audited=False)
