"""How many approvals a case needs in its round, and how many it has."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlmodel import Session, col

from refund_desk.storage.models import Approval, Case


def approvals_needed(case: Case) -> int:
    if case.decision is None:  # never decided: unknown facts need the strictest tier's two
        return 2
    return 2 if int(case.decision.get("tier") or 3) >= 4 else 1


def approval_count(session: Session, case: Case) -> int:
    return int(
        session.scalar(
            select(func.count())
            .select_from(Approval)
            .where(
                col(Approval.case_id) == case.id,
                col(Approval.round) == case.approval_round,
                col(Approval.decision) == "approve",
            )
        )
        or 0
    )
