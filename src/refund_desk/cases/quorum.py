"""How many approvals a case needs in its round, and how many it has."""

from __future__ import annotations

from sqlalchemy import bindparam, func, select
from sqlmodel import Session, col

from refund_desk.storage.models import Approval, Case


def approvals_needed(case: Case) -> int:
    if case.decision is None:  # never decided: unknown facts need the strictest tier's two
        return 2
    return 2 if int(case.decision.get("tier") or 3) >= 4 else 1


_APPROVALS = (  # built once: SQLAlchemy compiles it once
    select(func.count())
    .select_from(Approval)
    .where(
        col(Approval.case_id) == bindparam("case_id"),
        col(Approval.round) == bindparam("round"),
        col(Approval.decision) == "approve",
    )
)


def approval_count(session: Session, case: Case) -> int:
    """The approvals on record in the case's round, this transaction's own included (the
    session is flushed first)."""
    session.flush()
    round_ = {"case_id": case.id, "round": case.approval_round}
    return int(session.connection().execute(_APPROVALS, round_).scalar() or 0)
