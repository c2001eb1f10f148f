"""A case row in a write transaction: read locked for change, and what happened to it put on
the record in the same transaction."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, select
from sqlmodel import Session, col

from refund_desk import clock
from refund_desk.cases.errors import NotFound
from refund_desk.storage.audit import Actor, AuditLog
from refund_desk.storage.models import Case

# FOR UPDATE on PostgreSQL, where rows are locked one by one; SQLite renders none (its writer
# is taken at BEGIN IMMEDIATE). Read afresh with the lock, even if this transaction read the
# case before it.
_LOCK_CASE = (
    select(Case)
    .where(col(Case.id) == bindparam("case_id"))
    .with_for_update()
    .execution_options(populate_existing=True)
)


def load_for_update(session: Session, case_id: str) -> Case:
    """Lock the case row for this transaction."""
    case = session.scalars(_LOCK_CASE, {"case_id": case_id}).first()
    if case is None:
        raise NotFound("case_not_found", f"No case {case_id} exists.")
    return case


def new_revision(session: Session, case: Case) -> None:
    """The case changed: cards made before carry stale tokens, and a fresh one is drawn."""
    case.revision += 1
    case.updated_at = clock.now()
    session.add(case)


def on_record(
    session: Session, audit: AuditLog, case: Case, action: str, actor: Actor, payload: Any = None
) -> None:
    """An audit record about `case`, appended in the caller's transaction."""
    audit.append(
        session,
        action=action,
        actor=actor,
        case_id=case.id,
        correlation_id=case.correlation_id,
        policy_version=case.policy_version,
        payload=payload,
    )
