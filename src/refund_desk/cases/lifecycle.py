"""The case state machine. Every transition bumps the revision and appends an audit record in
the caller's transaction, so the change and its record commit together or not at all."""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Any

from sqlmodel import Session

from refund_desk.cases.errors import Conflict
from refund_desk.cases.notify import NOTIFY_ON, notify
from refund_desk.cases.rows import new_revision, on_record
from refund_desk.cases.sla import start_clock
from refund_desk.customers.outcomes import TELL_ON, tell
from refund_desk.storage.audit import Actor, AuditLog
from refund_desk.storage.models import Case

log = logging.getLogger(__name__)


class Status(StrEnum):
    received = "received"
    advised = "advised"
    decided = "decided"
    awaiting_approval = "awaiting_approval"
    approved = "approved"
    executing = "executing"
    refunded = "refunded"
    denied = "denied"
    parked = "parked"
    failed = "failed"


FINAL = frozenset({Status.refunded, Status.denied})

# Every open case but a parked one may be parked.
_ALLOWED: dict[Status, set[Status]] = {
    Status.received: {Status.advised, Status.parked},
    Status.advised: {Status.decided, Status.parked},
    Status.decided: {Status.approved, Status.awaiting_approval, Status.denied, Status.parked},
    Status.awaiting_approval: {Status.approved, Status.denied, Status.parked},
    Status.approved: {Status.executing, Status.awaiting_approval, Status.parked},
    Status.executing: {Status.refunded, Status.failed, Status.parked},
    Status.failed: {Status.parked},
    # executing: a refund reserved before the case was parked gets its answer afterwards.
    Status.parked: {Status.approved, Status.denied, Status.awaiting_approval, Status.executing},
    # A refunded case reopens when the processor later fails the refund (compensation).
    Status.refunded: {Status.parked},
    Status.denied: set(),
}


def move(
    session: Session,
    audit: AuditLog,
    case: Case,
    to: Status,
    *,
    actor: Actor,
    action: str | None = None,
    payload: dict[str, Any] | None = None,
) -> None:
    if to not in _ALLOWED[Status(case.status)]:
        raise Conflict("invalid_transition", f"A {case.status} case cannot become {to}.")
    previous = case.status
    case.status = to
    if to in (Status.awaiting_approval, Status.parked):
        case.approval_round += 1  # a new round: earlier approvals do not count towards it
    new_revision(session, case)
    on_record(
        session,
        audit,
        case,
        action or f"case.{to}",
        actor,
        {"from": previous, "to": str(to), "revision": case.revision, **(payload or {})},
    )
    log.info(
        "case %s: %s -> %s",
        case.id,
        previous,
        to,
        extra={"case_id": case.id, "correlation_id": case.correlation_id, "actor": str(actor)},
    )
    if to in (Status.awaiting_approval, Status.parked):
        start_clock(session, case)
    if to in NOTIFY_ON:
        notify(session, event=f"case.{to}", case_id=case.id)
    if to in TELL_ON:  # the customer hears every outcome, queued with the change itself
        tell(session, case, audit)


def mark_possible_duplicate(
    session: Session, audit: AuditLog, case: Case, duplicate_of: str, *, actor: Actor
) -> None:
    """The case may repeat a recent refund of the same amount on the same payment: flagged,
    and `request.possible_duplicate` on the record in the same transaction."""
    case.possible_duplicate, case.duplicate_of = True, duplicate_of
    record_possible_duplicate(
        session,
        audit,
        case_id=case.id,
        correlation_id=case.correlation_id,
        policy_version=case.policy_version,
        duplicate_of=duplicate_of,
        actor=actor,
    )


def record_possible_duplicate(
    session: Session,
    audit: AuditLog,
    *,
    case_id: str,
    correlation_id: str,
    policy_version: int | None,
    duplicate_of: str,
    actor: Actor,
) -> None:
    """`request.possible_duplicate` on the record, for a case whose row already says so (the
    capture writes the flag with the row)."""
    audit.append(
        session,
        action="request.possible_duplicate",
        actor=actor,
        case_id=case_id,
        correlation_id=correlation_id,
        policy_version=policy_version,
        payload={"duplicate_of": duplicate_of},
    )


def set_amount(
    session: Session, audit: AuditLog, case: Case, amount: int, source: str, *, actor: Actor
) -> None:
    """The case's amount and who produced it (`Provenance`), on the record in the same
    transaction: `case.amount_changed` when the amount moves, `case.amount_confirmed` when
    only its provenance does (a person approving the model's reading, an appeal carrying it)."""
    if amount != case.amount:
        action, payload = "case.amount_changed", {"from": case.amount, "to": amount}
    else:
        action, payload = "case.amount_confirmed", {"amount": amount}
    on_record(session, audit, case, action, actor, {**payload, "source": str(source)})
    case.amount, case.amount_source = amount, str(source)
    case.provenance = {**(case.provenance or {}), "amount": str(source)}
