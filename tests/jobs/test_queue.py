"""The jobs table on real databases: leases, fencing, retries, sweeps, SKIP LOCKED."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, select

from refund_desk import clock
from refund_desk.jobs.queue import ClaimedJob, JobQueue, RetryLater, enqueue, nothing_to_do
from refund_desk.storage.db import Database
from refund_desk.storage.models import Job

LEASE = 60.0


@pytest.fixture()
def queue_a(db: Database) -> JobQueue:
    return JobQueue(db, owner="replica-a", lease_seconds=LEASE)


@pytest.fixture()
def queue_b(db: Database) -> JobQueue:
    return JobQueue(db, owner="replica-b", lease_seconds=LEASE)


def add_job(db: Database, *, due_at: datetime | None = None, max_attempts: int = 20) -> int:
    with db.write() as session:
        job = enqueue(
            session,
            kind="test",
            payload={"x": 1},
            due_at=due_at or clock.now() - timedelta(seconds=1),
            max_attempts=max_attempts,
        )
        assert job.id is not None
        return job.id


def load(db: Database, job_id: int) -> Job:
    with db.read() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job


def later(seconds: float) -> datetime:
    return clock.now() + timedelta(seconds=seconds)


# ---------------------------------------------------------------- leases


def test_claim_leases_the_job_to_its_owner(db: Database, queue_a: JobQueue) -> None:
    job_id = add_job(db)
    before = clock.now()

    [claimed] = queue_a.claim()

    assert (claimed.id, claimed.kind, claimed.payload, claimed.attempt) == (
        job_id,
        "test",
        {"x": 1},
        1,
    )
    row = load(db, job_id)
    assert row.lease_owner == "replica-a"
    assert row.attempt == 1
    assert row.status == "pending"
    assert row.lease_expires_at is not None
    assert before + timedelta(seconds=LEASE - 1) < row.lease_expires_at <= later(LEASE)


def test_live_lease_blocks_another_owner(
    db: Database, queue_a: JobQueue, queue_b: JobQueue
) -> None:
    job_id = add_job(db)
    queue_a.claim()

    assert queue_b.claim() == []
    assert queue_b.claim(now=later(LEASE / 2)) == []
    assert queue_b.claim_one(job_id) is None
    assert load(db, job_id).lease_owner == "replica-a"


def test_expired_lease_lets_another_owner_claim(
    db: Database, queue_a: JobQueue, queue_b: JobQueue
) -> None:
    job_id = add_job(db)
    queue_a.claim()

    [claimed] = queue_b.claim(now=later(LEASE + 5))

    assert claimed.id == job_id
    assert claimed.attempt == 2
    row = load(db, job_id)
    assert (row.lease_owner, row.attempt) == ("replica-b", 2)


def test_job_not_yet_due_is_not_claimed(db: Database, queue_a: JobQueue) -> None:
    job_id = add_job(db, due_at=later(600))
    assert queue_a.claim() == []
    assert [j.id for j in queue_a.claim(now=later(601))] == [job_id]


# ---------------------------------------------------------------- fencing


def test_late_complete_after_lost_lease_is_refused(
    db: Database, queue_a: JobQueue, queue_b: JobQueue
) -> None:
    job_id = add_job(db)
    [first] = queue_a.claim()
    [second] = queue_b.claim(now=later(LEASE + 5))

    assert queue_a.complete(first) is False
    row = load(db, job_id)
    assert (row.status, row.lease_owner, row.finished_at) == ("pending", "replica-b", None)

    assert queue_b.complete(second) is True
    row = load(db, job_id)
    assert row.status == "done"
    assert row.finished_at is not None
    assert row.lease_expires_at is None


def test_late_retry_after_lost_lease_is_refused(
    db: Database, queue_a: JobQueue, queue_b: JobQueue
) -> None:
    job_id = add_job(db)
    [first] = queue_a.claim()
    queue_b.claim(now=later(LEASE + 5))

    assert queue_a.retry(first, delay=0, error="late") is False
    row = load(db, job_id)
    assert (row.failures, row.last_error, row.lease_owner) == (0, None, "replica-b")


def test_completed_job_cannot_be_completed_twice(db: Database, queue_a: JobQueue) -> None:
    add_job(db)
    [job] = queue_a.claim()
    assert queue_a.complete(job) is True
    assert queue_a.complete(job) is False
    assert queue_a.claim(now=later(LEASE * 10)) == []


# ---------------------------------------------------------------- retries


def test_waiting_does_not_use_up_attempts(db: Database, queue_a: JobQueue) -> None:
    job_id = add_job(db, max_attempts=2)

    def wait(_: ClaimedJob) -> None:
        raise RetryLater(0, "paused", failed=False)

    queue_a.register("test", wait)
    for _ in range(5):
        assert queue_a.sweep() == 1

    row = load(db, job_id)
    assert (row.status, row.failures, row.attempt) == ("pending", 0, 5)
    assert row.last_error == "paused"


def test_failures_make_the_job_dead_after_max_attempts(db: Database, queue_a: JobQueue) -> None:
    job_id = add_job(db, max_attempts=3)

    def outage(_: ClaimedJob) -> None:
        raise RetryLater(0, "processor down")

    queue_a.register("test", outage)
    assert queue_a.sweep() == 1
    assert queue_a.sweep() == 1
    assert load(db, job_id).status == "pending"
    assert queue_a.sweep() == 1

    row = load(db, job_id)
    assert (row.status, row.failures, row.last_error) == ("dead", 3, "processor down")
    assert row.finished_at is not None
    assert queue_a.sweep(now=later(3600)) == 0


def test_waits_then_failures_count_only_failures(db: Database, queue_a: JobQueue) -> None:
    job_id = add_job(db, max_attempts=2)
    outcomes = iter([False, False, False, True, True])

    def handler(_: ClaimedJob) -> None:
        raise RetryLater(0, "x", failed=next(outcomes))

    queue_a.register("test", handler)
    for _ in range(4):
        queue_a.sweep()
    assert (load(db, job_id).status, load(db, job_id).failures) == ("pending", 1)
    queue_a.sweep()
    assert (load(db, job_id).status, load(db, job_id).failures) == ("dead", 2)


def test_handler_exception_is_retried_with_backoff(db: Database, queue_a: JobQueue) -> None:
    job_id = add_job(db)

    def boom(_: ClaimedJob) -> None:
        raise ValueError("boom")

    queue_a.register("test", boom)
    before = clock.now()
    assert queue_a.sweep() == 1

    row = load(db, job_id)
    assert row.status == "pending"
    assert row.failures == 1
    assert row.last_error == "ValueError: boom"
    assert row.lease_owner is None and row.lease_expires_at is None
    assert row.due_at > before
    assert queue_a.claim() == []  # not due again yet
    assert [j.id for j in queue_a.claim(now=later(3600))] == [job_id]


def test_job_without_handler_is_deferred(db: Database, queue_a: JobQueue) -> None:
    job_id = add_job(db)
    assert queue_a.sweep() == 1
    row = load(db, job_id)
    assert row.status == "pending"
    assert row.last_error is not None and "no handler" in row.last_error
    assert row.due_at > later(3000)


def test_successful_handler_completes_the_job(db: Database, queue_a: JobQueue) -> None:
    job_id = add_job(db)
    seen: list[ClaimedJob] = []
    queue_a.register("test", seen.append)

    assert queue_a.run_now(job_id) is True

    assert [j.id for j in seen] == [job_id]
    assert load(db, job_id).status == "done"
    assert queue_a.run_now(job_id) is False


# ---------------------------------------------------------------- sweeps


def test_sweep_runs_each_due_job_at_most_once(db: Database, queue_a: JobQueue) -> None:
    due = [add_job(db) for _ in range(3)]
    not_due = add_job(db, due_at=later(3600))
    runs: Counter[int] = Counter()

    def again_at_once(job: ClaimedJob) -> None:
        runs[job.id] += 1
        raise RetryLater(0, "again", failed=False)

    queue_a.register("test", again_at_once)

    assert queue_a.sweep(limit=1) == 3

    assert runs == Counter({job_id: 1 for job_id in due})
    row = load(db, not_due)
    assert (row.status, row.attempt, row.lease_owner) == ("pending", 0, None)


def test_sweep_with_nothing_due_runs_nothing(db: Database, queue_a: JobQueue) -> None:
    add_job(db, due_at=later(3600))
    queue_a.register("test", lambda _: None)
    assert queue_a.sweep() == 0


def test_sweep_counts_completed_jobs(db: Database, queue_a: JobQueue) -> None:
    ids = [add_job(db) for _ in range(25)]
    queue_a.register("test", lambda _: None)

    assert queue_a.sweep(limit=10) == 25

    assert {load(db, i).status for i in ids} == {"done"}


# ---------------------------------------------------------------- next_due


def test_next_due_is_none_without_pending_jobs(db: Database, queue_a: JobQueue) -> None:
    assert queue_a.next_due() is None
    add_job(db)
    queue_a.register("test", lambda _: None)
    queue_a.sweep()
    assert queue_a.next_due() is None


def test_next_due_reports_the_earliest_due_time(db: Database, queue_a: JobQueue) -> None:
    soon, sooner = later(600), later(300)
    add_job(db, due_at=soon)
    add_job(db, due_at=sooner)
    assert queue_a.next_due() == sooner


def test_next_due_waits_for_a_live_lease(db: Database, queue_a: JobQueue) -> None:
    job_id = add_job(db)
    queue_a.claim()
    lease_end = load(db, job_id).lease_expires_at
    assert queue_a.next_due() == lease_end

    other = later(LEASE / 2)
    add_job(db, due_at=other)
    assert queue_a.next_due() == other


def test_next_due_sees_past_many_leased_jobs(db: Database) -> None:
    queue = JobQueue(db, owner="replica-a", lease_seconds=3600)
    for _ in range(200):
        add_job(db)
    assert len(queue.claim(limit=200)) == 200
    free = later(60)
    add_job(db, due_at=free)

    assert queue.next_due() == free


# ---------------------------------------------------------------- PostgreSQL: SKIP LOCKED


def test_concurrent_claims_never_share_a_job(pg_db: Database) -> None:
    total = 100
    ids = {add_job(pg_db) for _ in range(total)}
    queues = [JobQueue(pg_db, owner=f"replica-{n}", lease_seconds=LEASE) for n in range(2)]
    claimed: dict[str, list[int]] = {q.owner: [] for q in queues}
    barrier = threading.Barrier(len(queues))
    errors: list[BaseException] = []

    def drain(queue: JobQueue) -> None:
        try:
            barrier.wait()
            while batch := queue.claim(limit=5):
                claimed[queue.owner].extend(job.id for job in batch)
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=drain, args=(q,)) for q in queues]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)

    assert not errors, errors
    every: list[int] = [i for owner_ids in claimed.values() for i in owner_ids]
    assert len(every) == len(set(every)) == total
    assert set(every) == ids
    with pg_db.read() as session:
        rows: list[Any] = list(session.execute(select(Job.id, Job.attempt, Job.lease_owner)))  # type: ignore[call-overload]
    assert {attempt for _, attempt, _ in rows} == {1}
    assert {owner for _, _, owner in rows} <= set(claimed)
    for owner, owner_ids in claimed.items():
        assert {i for i, _, o in rows if o == owner} == set(owner_ids)


# ---------------------------------------------------------------- kinds with nothing to do


def test_jobs_with_nothing_to_do_are_marked_done_in_the_claims_transaction(
    db: Database, queue_a: JobQueue
) -> None:
    ran: list[int] = []
    queue_a.install({"quiet": nothing_to_do, "test": lambda job: ran.append(job.id)})
    with db.write() as session:
        quiet = [enqueue(session, kind="quiet", payload={}).id for _ in range(3)]
        later_one = enqueue(session, kind="quiet", payload={}, due_at=later(600)).id
    work = add_job(db)
    transactions = 0

    @event.listens_for(db.engine, "begin")
    def _begin(conn: Any) -> None:
        nonlocal transactions
        transactions += 1

    try:
        assert queue_a.sweep() == 1  # only the job with work to do ran
    finally:
        event.remove(db.engine, "begin", _begin)
    assert ran == [work]
    for job_id in quiet:
        job = load(db, job_id)
        assert (job.status, job.attempt, job.lease_owner) == ("done", 0, None)
        assert job.finished_at is not None
    assert load(db, later_one).status == "pending"  # not due yet: left alone
    # two claims (the work, then none left) and the work's completion; nothing per quiet job
    assert transactions == 3
