"""Shared helpers of the advance tests (not a test module)."""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import func, select
from sqlmodel import col

from refund_desk.advisor.offline import OfflineAdvisor
from refund_desk.cases.ports import Advice, AdviceRequest
from refund_desk.jobs.queue import ClaimedJob
from refund_desk.storage.models import AdvisorCall, Case, Execution, Job
from tests.helpers import Harness


class NetworkLike:
    """Answers as the offline advisor does, but does not claim to be local (no `local`)."""

    name = "network-like"

    def __init__(self) -> None:
        self._inner = OfflineAdvisor()
        self.calls = 0

    def advise(self, request: AdviceRequest) -> Advice:
        self.calls += 1
        return self._inner.advise(request)


class CountingLocal(NetworkLike):
    name = "counting-local"
    local = True


def case_row(desk: Harness, case_id: str) -> Case:
    with desk.runtime.db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None
        return case


def advisor_calls(desk: Harness, case_id: str) -> int:
    with desk.runtime.db.read() as session:
        return int(
            session.scalar(
                select(func.count())
                .select_from(AdvisorCall)
                .where(col(AdvisorCall.case_id) == case_id)
            )
            or 0
        )


def executions(desk: Harness, case_id: str) -> list[Execution]:
    with desk.runtime.db.read() as session:
        return list(
            session.scalars(select(Execution).where(col(Execution.case_id) == case_id)).all()
        )


def advance_job(desk: Harness, case_id: str) -> Job:
    with desk.runtime.db.read() as session:
        jobs = [
            j
            for j in session.scalars(select(Job).where(col(Job.kind) == "advance")).all()
            if j.payload.get("case_id") == case_id
        ]
    assert len(jobs) == 1, jobs
    return jobs[0]


def as_claimed(job: Job, payload: dict[str, Any] | None = None) -> ClaimedJob:
    """The job as a run of it whose lease has run out would hold it (a stale run)."""
    assert job.id is not None
    return ClaimedJob(
        job.id, job.kind, dict(payload or job.payload), job.attempt, job.failures,
        job.max_attempts,
    )  # fmt: skip


def meet_after_the_processor(replicas: list[Harness]) -> None:
    """The replicas leave the processor's payment look-up together, then race for the
    decision's transaction."""
    barrier = threading.Barrier(len(replicas))
    for h in replicas:
        processor = h.runtime.desk.processor
        asked = processor.payment

        def payment(payment_id: str, _asked: Any = asked, **kw: Any) -> Any:
            facts = _asked(payment_id, **kw)
            barrier.wait(20)
            return facts

        processor.payment = payment  # type: ignore[method-assign]


def together(work: list[Any], timeout: float = 60) -> list[BaseException]:
    """Run each of `work` in a thread of its own, all at once; the errors they raised. A
    thread still running after `timeout` fails the test (a deadlock)."""
    errors: list[BaseException] = []

    def run(fn: Any) -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(fn,), daemon=True) for fn in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread is stuck (deadlock?)"
    return errors
