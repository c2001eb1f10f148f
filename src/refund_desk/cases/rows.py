"""Reading a case row for change: locked for the transaction, at the revision the caller saw."""

from __future__ import annotations

from sqlalchemy import select
from sqlmodel import Session, col

from refund_desk.cases.errors import Conflict, NotFound
from refund_desk.storage.db import memo
from refund_desk.storage.models import Case


def load_for_update(session: Session, case_id: str, *, revision: int | None = None) -> Case:
    """Lock the case row for this transaction and, if given, insist on the expected revision.

    A case this transaction has locked already is not read again: the lock holds until the
    commit, and a second read would give the same object with this transaction's changes.
    """
    locked: dict[str, Case] = memo(session, "locked cases")
    case = locked.get(case_id)
    if case is None:
        stmt = select(Case).where(col(Case.id) == case_id)
        if session.get_bind().dialect.name == "postgresql":
            stmt = stmt.with_for_update()
        # Read afresh with the lock, even if this transaction read the case before it.
        case = session.scalars(stmt.execution_options(populate_existing=True)).first()
        if case is None:
            raise NotFound("case_not_found", f"No case {case_id} exists.")
        locked[case_id] = case
    if revision is not None and case.revision != revision:
        raise Conflict(
            "stale_revision",
            f"Case {case_id} changed since you looked (revision {revision}, now {case.revision}).",
        )
    return case
