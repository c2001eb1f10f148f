"""Cases in pages: the API's listing and finance's export. Keyset pages over (created_at, id):
a page costs the same at any depth, and a case created meanwhile never shifts one. Neither
carries personal data.
"""

from __future__ import annotations

import base64
import csv
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any

from sqlalchemy import Select, and_, func, literal, or_, select
from sqlmodel import Session, col

from refund_desk.cases.errors import InvalidRequest
from refund_desk.cases.lifecycle import Status
from refund_desk.cases.views import major
from refund_desk.storage.models import Approval, AuditRecord, Case, Execution, Payment

PAGE = 100
DECIDING = ("case.approved", "case.denied", "case.answered")
EXPORT_FIELDS = (
    "case_id",
    "correlation_id",
    "source",
    "external_id",
    "payment",
    "currency",
    "requested_amount",
    "amount",
    "refunded_amount",
    "status",
    "rule",
    "tier",
    "outcome",
    "policy_version",
    "approvers",
    "execution_id",
    "processor_refund_id",
    "created_at",
    "decided_at",
    "seconds_to_decision",
    "updated_at",
    "erased",
    "processor",
)


@dataclass(frozen=True)
class Filters:
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    email_hash: str | None = None
    payment: str | None = None
    # The desk's: a case, payment or order id in one box; the decision's tier and rule; who
    # decided; the payment's processor; amounts (minor units) of cases in `currency`.
    reference: str | None = None
    tier: int | None = None
    rule: str | None = None
    source: str | None = None
    decider: str | None = None
    processor: str | None = None
    currency: str | None = None
    amount_min: int | None = None
    amount_max: int | None = None

    @classmethod
    def read(
        cls,
        email_hash: Callable[[str], str],
        *,
        status: str | None = None,
        since: str | None = None,
        until: str | None = None,
        email: str | None = None,
        payment: str | None = None,
    ) -> Filters:
        """The filters of `GET /api/v1/cases` (and the MCP `find_cases`) as typed, or
        `InvalidRequest` naming each field that is not one."""
        problems: dict[str, str] = {}
        if status is not None and status not in set(Status):
            problems["status"] = f"one of {', '.join(Status)}"
        start, end = _when(since, "since", problems), _when(until, "until", problems)
        if problems:
            raise InvalidRequest("invalid_request", "The request has invalid fields.", problems)
        hashed = email_hash(email) if email else None
        return cls(status=status, since=start, until=end, email_hash=hashed, payment=payment)


def _when(value: str | None, name: str, problems: dict[str, str]) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        problems[name] = "an ISO date or time, e.g. 2026-11-01 or 2026-11-01T12:00:00Z"
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed


# The orders a page can come in: the column, and whether the largest comes first. Each page is
# a keyset over (that column, id).
ORDERS: dict[str, tuple[str, bool]] = {
    "oldest": ("created_at", False),
    "newest": ("created_at", True),
    "largest": ("amount", True),
    "smallest": ("amount", False),
    "updated": ("updated_at", True),
}


def encode_cursor(case: Case, order: str = "oldest") -> str:
    value = getattr(case, ORDERS[order][0])
    raw = json.dumps([value.isoformat() if isinstance(value, datetime) else value, case.id])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, order: str = "oldest") -> tuple[datetime | int, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value, case_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
        if ORDERS[order][0] == "amount":
            if not isinstance(value, int):
                raise TypeError(value)
            return value, str(case_id)
        return datetime.fromisoformat(value), str(case_id)
    except (ValueError, TypeError):
        raise InvalidRequest(
            "invalid_cursor", "The cursor is not one this API gave.", {"cursor": "unknown"}
        ) from None


def page(
    session: Session,
    filters: Filters,
    *,
    cursor: str | None = None,
    limit: int = PAGE,
    order: str = "oldest",
) -> tuple[list[Case], str | None]:
    """Up to `limit` cases in `order` (oldest first unless told) after `cursor`; the cursor of
    the next page or None."""
    name, descending = ORDERS[order]
    key, tie = getattr(Case, name), col(Case.id)
    stmt = _filtered(select(Case), filters)
    if cursor:
        value, case_id = decode_cursor(cursor, order)
        if descending:
            stmt = stmt.where(or_(key < value, and_(key == value, tie < case_id)))
        else:
            stmt = stmt.where(or_(key > value, and_(key == value, tie > case_id)))
    ordered = (key.desc(), tie.desc()) if descending else (key, tie)
    rows = list(session.scalars(stmt.order_by(*ordered).limit(limit + 1)).all())
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (encode_cursor(rows[-1], order) if more and rows else None)


def _fixed(value: Any) -> Any:
    """A filter value written into the statement's text rather than bound: PostgreSQL plans a
    prepared statement for its values only for its first five runs, then may keep a generic
    plan that knows none of them (a filtered list ordered by amount went from 1 ms to 180 ms:
    a sort of every row of the status instead of the amount index). Only values checked to be
    a status, a slug, a currency code or an integer are passed here."""
    return literal(value, literal_execute=True)


def _filtered(stmt: Select[Any], filters: Filters) -> Select[Any]:
    if filters.status:
        stmt = stmt.where(col(Case.status) == _fixed(filters.status))
    if filters.since:
        stmt = stmt.where(col(Case.created_at) >= filters.since)
    if filters.until:
        stmt = stmt.where(col(Case.created_at) < filters.until)
    if filters.email_hash:
        stmt = stmt.where(col(Case.email_hash) == filters.email_hash)
    if filters.payment:
        stmt = stmt.where(col(Case.payment_id) == filters.payment)
    if filters.reference:
        ref = filters.reference
        stmt = stmt.where(
            or_(col(Case.id) == ref, col(Case.payment_id) == ref, col(Case.external_id) == ref)
        )
    decision: Any = Case.decision
    if filters.tier is not None:
        stmt = stmt.where(decision["tier"].as_integer() == _fixed(filters.tier))
    if filters.rule:
        stmt = stmt.where(decision["rule"].as_string() == _fixed(filters.rule))
    if filters.source:
        stmt = stmt.where(col(Case.source) == _fixed(filters.source))
    if filters.decider:
        decided = select(col(Approval.case_id)).where(col(Approval.approver) == filters.decider)
        stmt = stmt.where(col(Case.id).in_(decided))
    if filters.processor:
        paid = select(col(Payment.id)).where(col(Payment.processor) == _fixed(filters.processor))
        stmt = stmt.where(col(Case.payment_id).in_(paid))
    if filters.currency:
        stmt = stmt.where(col(Case.currency) == _fixed(filters.currency))
    if filters.amount_min is not None:
        stmt = stmt.where(col(Case.amount) >= _fixed(filters.amount_min))
    if filters.amount_max is not None:
        stmt = stmt.where(col(Case.amount) <= _fixed(filters.amount_max))
    return stmt


def count(session: Session, filters: Filters) -> int:
    return int(session.scalar(_filtered(select(func.count()).select_from(Case), filters)) or 0)


def export_rows(session: Session, cases: list[Case]) -> list[dict[str, Any]]:
    """One row per case for finance: amounts in major units with the currency beside them."""
    ids = [c.id for c in cases]
    if not ids:
        return []
    executions: dict[str, list[Execution]] = {}
    for e in session.scalars(
        select(Execution).where(col(Execution.case_id).in_(ids)).order_by(col(Execution.created_at))
    ).all():
        executions.setdefault(e.case_id, []).append(e)
    approvers: dict[str, list[str]] = {}
    for a in session.scalars(
        select(Approval)
        .where(col(Approval.case_id).in_(ids), col(Approval.decision) == "approve")
        .order_by(col(Approval.id))
    ).all():
        approvers.setdefault(a.case_id, []).append(a.approver)
    processors = {
        payment_id: name
        for payment_id, name in session.execute(
            select(col(Payment.id), col(Payment.processor)).where(
                col(Payment.id).in_({c.payment_id for c in cases})
            )
        ).all()
    }
    decided: dict[str, datetime] = {}
    for case_id, at in session.execute(
        select(col(AuditRecord.case_id), func.max(col(AuditRecord.at)))
        .where(col(AuditRecord.case_id).in_(ids), col(AuditRecord.action).in_(DECIDING))
        .group_by(col(AuditRecord.case_id))
    ).all():
        if case_id is not None and at is not None:
            decided[case_id] = at if isinstance(at, datetime) else datetime.fromisoformat(at)
    out = []
    for case in cases:
        decision = case.decision or {}
        runs = executions.get(case.id, [])
        paid = [e for e in runs if e.status == "succeeded"]
        last = runs[-1] if runs else None
        at = decided.get(case.id)
        if at is not None and at.tzinfo is None:
            at = at.replace(tzinfo=case.created_at.tzinfo)
        out.append(
            {
                "case_id": case.id,
                "correlation_id": case.correlation_id,
                "source": case.source,
                "external_id": case.external_id,
                "payment": case.payment_id,
                "currency": case.currency,
                "requested_amount": major(case.requested_amount, case.currency),
                "amount": major(case.amount, case.currency),
                "refunded_amount": major(sum(e.amount for e in paid), case.currency),
                "status": case.status,
                "rule": decision.get("rule"),
                "tier": decision.get("tier"),
                "outcome": decision.get("outcome"),
                "policy_version": case.policy_version,
                "approvers": approvers.get(case.id, []),
                "execution_id": last.id if last else None,
                "processor_refund_id": last.processor_refund_id if last else None,
                "created_at": stamp(case.created_at),
                "decided_at": stamp(at) if at else None,
                "seconds_to_decision": (
                    round((at - case.created_at).total_seconds(), 3) if at else None
                ),
                "updated_at": stamp(case.updated_at),
                "erased": case.erased_at is not None,
                "processor": processors.get(case.payment_id),
            }
        )
    return out


def stamp(at: datetime) -> str:
    """A time in an export: ISO 8601 with the zone (UTC when the database gave none)."""
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).isoformat()


def iter_export(
    session: Session, filters: Filters, *, batch: int = 500, order: str = "oldest"
) -> Iterator[dict[str, Any]]:
    cursor: str | None = None
    while True:
        cases, cursor = page(session, filters, cursor=cursor, limit=batch, order=order)
        yield from export_rows(session, cases)
        if cursor is None:
            return


class ExportWriter:
    """CSV (approvers joined by spaces) or JSON Lines, one line per case."""

    def __init__(self, out: IO[str], fmt: str) -> None:
        if fmt not in ("csv", "jsonl"):
            raise ValueError(f"--format must be csv or jsonl, not {fmt!r}")
        self.fmt = fmt
        self.out = out
        self.csv = csv.DictWriter(out, fieldnames=EXPORT_FIELDS) if fmt == "csv" else None
        if self.csv is not None:
            self.csv.writeheader()

    def write(self, row: dict[str, Any]) -> None:
        if self.csv is not None:
            self.csv.writerow({**row, "approvers": " ".join(row["approvers"])})
        else:
            self.out.write(json.dumps(row, ensure_ascii=False) + "\n")
