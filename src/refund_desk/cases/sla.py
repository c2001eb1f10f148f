"""SLA clocks: a waiting case is reminded, then escalated to the managers, level by level.

The reminder and the escalation are jobs keyed by the case's approval round, so a replica
that dies loses nothing and none is sent twice. A timeout never approves or denies anything:
it only calls more people.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from sqlmodel import Session

from refund_desk import clock
from refund_desk.cases.notify import notify
from refund_desk.cases.rows import load_for_update, new_revision, on_record
from refund_desk.governance.versions import LoadedPolicy, control, load_version
from refund_desk.jobs.queue import ClaimedJob, enqueue
from refund_desk.policy.durations import add_time, sla_period
from refund_desk.storage.audit import SYSTEM
from refund_desk.storage.models import Case

if TYPE_CHECKING:
    from refund_desk.cases.desk import Desk

REMIND = "sla.remind"
ESCALATE = "sla.escalate"
WAITING = ("awaiting_approval", "parked")
DEFAULT_REMINDER_AT = 0.5


def _policy(session: Session, case: Case) -> LoadedPolicy | None:
    version = case.policy_version or control(session).active_version
    return load_version(session, version) if version else None


def _tier(case: Case) -> int:
    return int((case.decision or {}).get("tier") or 3)


def start_clock(session: Session, case: Case) -> None:
    """Set the deadline of a case that now waits for a person and queue its reminder and
    first escalation (inside the caller's transaction)."""
    policy = _policy(session, case)
    period = sla_period(policy.doc, _tier(case)) if policy else None
    if policy is None or period is None:
        case.sla_due_at = None
        return
    start = clock.now()
    case.sla_due_at = add_time(policy.doc, start, period)
    share = policy.doc.reminder_at if policy.doc.reminder_at is not None else DEFAULT_REMINDER_AT
    remind_at = add_time(policy.doc, start, period * share)
    key = f"{case.id}:{case.approval_round}"
    enqueue(
        session,
        kind=REMIND,
        payload={"case_id": case.id, "round": case.approval_round},
        due_at=remind_at,
        dedupe_key=f"{REMIND}:{key}",
    )
    _queue_escalation(session, case, due=case.sla_due_at, level=case.escalation_level + 1)


def _queue_escalation(session: Session, case: Case, *, due: datetime, level: int) -> None:
    enqueue(
        session,
        kind=ESCALATE,
        payload={
            "case_id": case.id,
            "round": case.approval_round,
            "level": level,
            "due": due.isoformat(),
        },
        due_at=due,
        dedupe_key=f"{ESCALATE}:{case.id}:{case.approval_round}:{level}",
    )


def _still_waiting(case: Case, job: ClaimedJob) -> bool:
    return case.status in WAITING and case.approval_round == job.payload["round"]


def remind(desk: Desk, job: ClaimedJob) -> None:
    with desk.db.write() as session:
        case = load_for_update(session, job.payload["case_id"])
        if not _still_waiting(case, job):
            return
        on_record(
            session,
            desk.audit,
            case,
            "sla.reminder",
            SYSTEM,
            {"due": case.sla_due_at.isoformat() if case.sla_due_at else None},
        )
        notify(session, event="case.reminder", case_id=case.id)


def escalate(desk: Desk, job: ClaimedJob) -> None:
    """Deadline passed: one level up, managers told, and the next level queued one period on."""
    with desk.db.write() as session:
        case = load_for_update(session, job.payload["case_id"])
        if not _still_waiting(case, job):
            return
        case.escalation_level += 1
        new_revision(session, case)  # the managers' buttons carry fresh tokens
        on_record(
            session,
            desk.audit,
            case,
            "case.escalated",
            SYSTEM,
            {"level": case.escalation_level, "basis": "sla", "due": job.payload["due"]},
        )
        notify(
            session,
            event="case.escalated",
            case_id=case.id,
            level=case.escalation_level,
            basis="sla",
        )
        policy = _policy(session, case)
        period = sla_period(policy.doc, _tier(case)) if policy else None
        if policy is not None and period is not None:
            due = add_time(policy.doc, datetime.fromisoformat(job.payload["due"]), period)
            _queue_escalation(session, case, due=due, level=case.escalation_level + 1)
