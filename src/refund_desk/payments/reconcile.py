"""Reconciliation: every refund the processor holds in a window against our executions.

The processor is listed for the whole window, not only for payments we know, so refunds made
elsewhere (the Stripe dashboard) show up; PayPal lists no refunds across payments, so there
each payment we know that is young enough to refund is asked. Findings: a refund we did not
make, one of ours the processor does not have, amounts or statuses that disagree, two refunds
for one execution. Each finding is reported once (its key is stored): an audit record and a
`finance.finding` message in the same transaction. No transaction is open while the
processor is listed.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO

from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from refund_desk import money
from refund_desk.cases.facts import OPEN_EXECUTION
from refund_desk.cases.notify import notify
from refund_desk.cases.ports import ProcessorError, ProcessorRefund, RefundNotFound
from refund_desk.jobs.queue import ClaimedJob, RetryLater, enqueue
from refund_desk.money import format_money
from refund_desk.storage.audit import SYSTEM, Actor
from refund_desk.storage.models import Case, Execution, Payment, ProcessorFinding

if TYPE_CHECKING:
    from sqlmodel import Session

    from refund_desk.cases.desk import Desk

log = logging.getLogger(__name__)

JOB = "reconcile"
EVERY = timedelta(hours=1)  # the scheduled pass
WINDOW = timedelta(days=2)  # each scheduled pass looks this far back (findings are deduped)
RETRY_SECONDS = 600.0
REFUNDABLE_FOR = timedelta(days=180)
DONE = ("succeeded",)
UNDONE = ("failed", "canceled")


@dataclass(frozen=True)
class Finding:
    kind: str
    key: str
    detail: str
    case_id: str | None = None
    execution_id: str | None = None
    refund_id: str | None = None
    payment_id: str | None = None
    currency: str | None = None
    processor_amount: int | None = None
    our_amount: int | None = None
    processor_status: str | None = None
    our_status: str | None = None


@dataclass
class Report:
    since: datetime
    until: datetime
    refunds_seen: int = 0
    executions_seen: int = 0
    findings: list[Finding] = field(default_factory=list)
    new_keys: set[str] = field(default_factory=set)

    CSV_FIELDS = (
        "kind",
        "new",
        "case_id",
        "execution_id",
        "refund_id",
        "payment_id",
        "currency",
        "processor_amount",
        "our_amount",
        "processor_status",
        "our_status",
        "detail",
    )

    def write_csv(self, out: TextIO) -> None:
        """Amounts in major units as exact decimal strings, for a spreadsheet."""
        writer = csv.DictWriter(out, fieldnames=self.CSV_FIELDS)
        writer.writeheader()
        for f in self.findings:
            row: dict[str, Any] = {k: v for k, v in asdict(f).items() if k in self.CSV_FIELDS}
            row["new"] = "yes" if f.key in self.new_keys else "no"
            for name in ("processor_amount", "our_amount"):
                value = row[name]
                row[name] = "" if value is None else str(money.to_major(value, f.currency or ""))
            writer.writerow(row)


def reconcile(
    desk: Desk,
    *,
    since: datetime,
    until: datetime | None = None,
    actor: Actor = SYSTEM,
    progress: Callable[[int, int], None] | None = None,
) -> Report:
    """`progress(step, 5)` after each stage: list, compare, look up, record, resolve."""
    step = progress or (lambda done, total: None)
    until = until or desk.now()
    payments: list[str] = []
    if not desk.processor.lists_every_refund:
        with desk.db.read() as session:
            payments = _known_payments(session, since)
    refunds = desk.processor.list_refunds_since(since, until, payments)
    step(1, 5)
    with desk.db.read() as session:
        executions = _executions(session, since, until, refunds)
    report = Report(
        since=since, until=until, refunds_seen=len(refunds), executions_seen=len(executions)
    )
    findings = _compare(refunds, executions)
    step(2, 5)
    findings += _missing(desk, refunds, executions, since, until)
    step(3, 5)
    report.findings = findings
    report.new_keys = _record(desk, findings, actor)
    step(4, 5)
    _resolve_stale(desk, until)
    step(5, 5)
    return report


def _known_payments(session: Session, since: datetime) -> list[str]:
    """The payments a processor that lists no refunds across payments is asked about: those
    we know that are young enough to be refunded in the window (PayPal allows 180 days)."""
    return list(
        session.scalars(
            select(col(Payment.id)).where(col(Payment.created_at) >= since - REFUNDABLE_FOR)
        )
    )


def _resolve_stale(desk: Desk, until: datetime) -> None:
    """Reservations older than the lease have no live executor: settle each by lookup."""
    from refund_desk.cases.executor import resolve

    with desk.db.read() as session:
        stale = session.scalars(
            select(col(Execution.id)).where(
                col(Execution.status) == OPEN_EXECUTION,
                col(Execution.created_at) < until - desk.jobs.lease,
            )
        ).all()
    for execution_id in stale:
        try:
            resolve(desk, execution_id)
        except ProcessorError as exc:
            log.warning("could not resolve execution %s: %s", execution_id, exc)


# ---------------------------------------------------------------- comparing


def _executions(
    session: Session, since: datetime, until: datetime, refunds: list[ProcessorRefund]
) -> dict[str, Execution]:
    """Ours in the window, plus any execution a listed refund points at (made earlier)."""
    ids = {r.metadata["execution_id"] for r in refunds if r.metadata.get("execution_id")}
    refund_ids = {r.id for r in refunds}
    rows = session.scalars(
        select(Execution).where(
            or_(
                (col(Execution.created_at) >= since) & (col(Execution.created_at) < until),
                col(Execution.id).in_(ids or {""}),
                col(Execution.processor_refund_id).in_(refund_ids or {""}),
            )
        )
    ).all()
    for row in rows:
        session.expunge(row)
    return {row.id: row for row in rows}


def _owner(refund: ProcessorRefund, executions: dict[str, Execution]) -> Execution | None:
    row = executions.get(refund.metadata.get("execution_id", ""))
    if row is not None:
        return row
    return next((e for e in executions.values() if e.processor_refund_id == refund.id), None)


def _compare(refunds: list[ProcessorRefund], executions: dict[str, Execution]) -> list[Finding]:
    findings: list[Finding] = []
    seen: dict[str, list[ProcessorRefund]] = {}
    for refund in refunds:
        row = _owner(refund, executions)
        base: dict[str, Any] = {
            "refund_id": refund.id,
            "payment_id": refund.payment_id,
            "currency": refund.currency.upper(),
            "processor_amount": refund.amount,
            "processor_status": refund.status,
        }
        if row is None:
            findings.append(
                Finding(
                    kind="unknown_refund",
                    key=f"unknown_refund:{refund.id}",
                    detail=f"Refund {refund.id} of {format_money(refund.amount, refund.currency)} "
                    f"on {refund.payment_id} was not made by Refund Desk "
                    "(made at the processor directly, e.g. in its dashboard).",
                    case_id=refund.metadata.get("case_id"),
                    **base,
                )
            )
            continue
        seen.setdefault(row.id, []).append(refund)
        ours: dict[str, Any] = {
            "case_id": row.case_id,
            "execution_id": row.id,
            "our_amount": row.amount,
            "our_status": row.status,
        }
        if refund.amount != row.amount or refund.currency.upper() != row.currency.upper():
            findings.append(
                Finding(
                    kind="amount_mismatch",
                    key=f"amount_mismatch:{refund.id}:{refund.amount}:{row.amount}",
                    detail=f"Refund {refund.id} is "
                    f"{format_money(refund.amount, refund.currency)} at the processor; our "
                    f"execution {row.id} says {format_money(row.amount, row.currency)}.",
                    **base,
                    **ours,
                )
            )
        if _status_disagrees(row.status, refund.status):
            findings.append(
                Finding(
                    kind="status_mismatch",
                    key=f"status_mismatch:{refund.id}:{refund.status}:{row.status}",
                    detail=f"Refund {refund.id} is {refund.status} at the processor; our "
                    f"execution {row.id} is {row.status}.",
                    **base,
                    **ours,
                )
            )
    for execution_id, found in seen.items():
        if len(found) > 1:
            row = executions[execution_id]
            findings.append(
                Finding(
                    kind="duplicate_refund",
                    key=f"duplicate_refund:{execution_id}:{len(found)}",
                    detail=f"Execution {execution_id} has {len(found)} refunds at the "
                    f"processor: {', '.join(r.id for r in found)}.",
                    case_id=row.case_id,
                    execution_id=execution_id,
                    payment_id=row.payment_id,
                    currency=row.currency,
                    processor_amount=sum(r.amount for r in found),
                    our_amount=row.amount,
                    our_status=row.status,
                )
            )
    return findings


def _status_disagrees(ours: str, theirs: str) -> bool:
    if ours == OPEN_EXECUTION:
        return False  # in flight: the executor is still on it
    return (ours in DONE and theirs in UNDONE) or (ours not in DONE and theirs in DONE)


def _missing(
    desk: Desk,
    refunds: list[ProcessorRefund],
    executions: dict[str, Execution],
    since: datetime,
    until: datetime,
) -> list[Finding]:
    """Ours that succeeded in the window but were not listed: ask for each by id first."""
    listed = {r.metadata.get("execution_id") for r in refunds} | {
        e.id for e in executions.values() if e.processor_refund_id in {r.id for r in refunds}
    }
    findings: list[Finding] = []
    for row in executions.values():
        if row.id in listed or row.status != "succeeded":
            continue
        if row.processor_refund_id:
            try:
                desk.processor.retrieve_refund(row.processor_refund_id)
                continue  # it exists (created outside the window's edge): not missing
            except RefundNotFound:
                pass
        findings.append(
            Finding(
                kind="missing_at_processor",
                key=f"missing_at_processor:{row.id}",
                detail=f"Our execution {row.id} recorded refund "
                f"{row.processor_refund_id or '(no id)'} of "
                f"{format_money(row.amount, row.currency)}, but the processor does not have it.",
                case_id=row.case_id,
                execution_id=row.id,
                refund_id=row.processor_refund_id,
                payment_id=row.payment_id,
                currency=row.currency,
                our_amount=row.amount,
                our_status=row.status,
            )
        )
    return findings


# ---------------------------------------------------------------- reporting


def _record(desk: Desk, findings: list[Finding], actor: Actor) -> set[str]:
    """Report each finding once: stored key, audit record and finance message together."""
    new: set[str] = set()
    for finding in findings:
        try:
            with desk.db.write() as session:
                if session.get(ProcessorFinding, finding.key) is not None:
                    continue
                session.add(ProcessorFinding(**asdict(finding), found_at=desk.now()))
                session.flush()
                data = {k: v for k, v in asdict(finding).items() if v is not None}
                case = session.get(Case, finding.case_id) if finding.case_id else None
                desk.audit.append(
                    session,
                    action="reconcile.finding",
                    actor=actor,
                    case_id=case.id if case else None,
                    correlation_id=case.correlation_id if case else None,
                    policy_version=case.policy_version if case else None,
                    payload=data,
                )
                notify(
                    session,
                    event="finance.finding",
                    case_id=case.id if case else None,
                    **{k: v for k, v in data.items() if k != "case_id"},
                )
            new.add(finding.key)
        except IntegrityError:  # a concurrent pass reported it first
            continue
    return new


# ---------------------------------------------------------------- the scheduled pass


def run_scheduled(desk: Desk, job: ClaimedJob) -> None:
    """Reconcile the last WINDOW, then come back in EVERY (the job never finishes)."""
    try:
        report = reconcile(desk, since=desk.now() - WINDOW)
    except ProcessorError as exc:
        raise RetryLater(RETRY_SECONDS, f"{exc.code}: {exc.message}", failed=False) from None
    log.info(
        "reconciled %s refunds: %s findings, %s new",
        report.refunds_seen,
        len(report.findings),
        len(report.new_keys),
    )
    raise RetryLater(EVERY.total_seconds(), "next reconciliation", failed=False)


def ensure_scheduled(desk: Desk) -> None:
    """Put the recurring reconciliation job in the jobs table once (replicas race harmlessly)."""
    try:
        with desk.db.write() as session:
            enqueue(session, kind=JOB, payload={}, dedupe_key="reconcile:scheduled")
    except IntegrityError:
        pass
