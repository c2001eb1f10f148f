"""Review after the fact: a share of automatic refunds is shown to a person once paid.

The sample is deterministic (a hash of the case id against the rate), so a replay or a retry
picks the same cases. A "this was wrong" answer is recorded against the rule that fired,
which is what a lead needs to see before changing that rule.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from sqlalchemy import case as sa_case
from sqlalchemy import func, select
from sqlmodel import Session, col

from refund_desk import clock
from refund_desk.cases.errors import InvalidRequest, NotFound
from refund_desk.governance.versions import by_whom, control, load_version
from refund_desk.jobs.queue import enqueue
from refund_desk.storage.audit import Actor, AuditLog
from refund_desk.storage.models import Case, ReviewSample
from refund_desk.text import text

if TYPE_CHECKING:
    from refund_desk.cases.desk import Desk

REVIEW_JOB = "policy.review_sample"
ANSWERS = ("right", "wrong")


def sample_rate(session: Session, case: Case) -> float:
    """The lead's override if set, else the case's pinned policy's ``review_sample_rate``."""
    switches = control(session)
    if switches.review_sample_rate is not None:
        return switches.review_sample_rate
    if case.policy_version is None:
        return 0.0
    return load_version(session, case.policy_version).doc.review_sample_rate


def picked(case_id: str, rate: float) -> bool:
    digest = hashlib.sha256(f"review:{case_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


def maybe_sample(desk: Desk, session: Session, case: Case) -> None:
    """After an automatic refund succeeded (in the same transaction): pick it for review?"""
    if control(session).mode != "supervised" or not picked(case.id, sample_rate(session, case)):
        return
    if session.get(ReviewSample, case.id) is not None:
        return
    decision = case.decision or {}
    session.add(
        ReviewSample(
            case_id=case.id,
            policy_version=case.policy_version,
            rule=str(decision.get("rule") or "unknown"),
            amount=case.amount,
            currency=case.currency,
            sampled_at=desk.now(),
        )
    )
    # Only a chat surface can ask a person; without one the sample stays on the record.
    if REVIEW_JOB in desk.jobs.handlers:
        enqueue(session, kind=REVIEW_JOB, payload={"case_id": case.id})


def answer(
    session: Session, audit: AuditLog, *, case_id: str, verdict: str, actor: Actor
) -> ReviewSample:
    """Record a person's verdict once; the audit record names the rule that fired."""
    if verdict not in ANSWERS:
        raise InvalidRequest("bad_answer", f"The answer is one of {', '.join(ANSWERS)}.")
    sample = session.get(ReviewSample, case_id)
    if sample is None:
        raise NotFound("review_missing", f"Case {case_id} was not picked for review.")
    if sample.answer is not None:
        by = by_whom(sample.answered_by or "someone")
        raise InvalidRequest(
            "already_reviewed", text(f"Case {case_id} was already reviewed by ", by, ".")
        )
    sample.answer, sample.answered_by, sample.answered_at = verdict, str(actor), clock.now()
    session.add(sample)
    audit.append(
        session,
        action="policy.review_answered",
        actor=actor,
        case_id=case_id,
        policy_version=sample.policy_version,
        payload={"answer": verdict, "rule": sample.rule},
    )
    return sample


def wrong_by_rule(session: Session) -> list[tuple[str, int, int]]:
    """(rule, wrong, answered) per rule, most wrong first: where the policy errs."""
    wrong = func.sum(sa_case((col(ReviewSample.answer) == "wrong", 1), else_=0))
    rows = session.execute(
        select(col(ReviewSample.rule), wrong, func.count())
        .where(col(ReviewSample.answer).is_not(None))
        .group_by(col(ReviewSample.rule))
    ).all()
    return sorted(((r, int(w or 0), int(n)) for r, w, n in rows), key=lambda t: (-t[1], t[0]))
