"""Reading a case row for change: locked for the transaction, at the revision the caller saw."""

from __future__ import annotations

from sqlalchemy import bindparam, select
from sqlmodel import Session, col

from refund_desk.cases.errors import Conflict, NotFound
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


def load_for_update(session: Session, case_id: str, *, revision: int | None = None) -> Case:
    """Lock the case row for this transaction and, if given, insist on the expected revision."""
    case = session.scalars(_LOCK_CASE, {"case_id": case_id}).first()
    if case is None:
        raise NotFound("case_not_found", f"No case {case_id} exists.")
    if revision is not None and case.revision != revision:
        raise Conflict(
            "stale_revision",
            f"Case {case_id} changed since you looked (revision {revision}, now {case.revision}).",
        )
    return case
