"""A job held across a slow call keeps its lease (`JobQueue.held`), from one thread for all."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from refund_desk.jobs.leases import LeaseKeeper
from refund_desk.jobs.queue import JobQueue
from refund_desk.storage.db import Database
from tests.jobs.test_queue import add_job, load

LEASE = 0.6  # seconds: renewed every 0.2 s while held


def test_a_job_held_across_a_slow_call_is_not_taken_over(db: Database) -> None:
    mine = JobQueue(db, owner="replica-a", lease_seconds=LEASE)
    other = JobQueue(db, owner="replica-b", lease_seconds=LEASE)
    job_id = add_job(db)
    [job] = mine.claim()
    with mine.held(job):
        for _ in range(6):  # 1.8 s: three leases' worth
            time.sleep(0.3)
            assert other.claim() == [], "the job was taken over while held"
        assert load(db, job_id).lease_owner == "replica-a"
    time.sleep(LEASE + 0.3)  # let go and not finished: the lease runs out, another takes it
    assert [j.id for j in other.claim()] == [job_id]


def test_several_jobs_are_held_by_one_thread(db: Database) -> None:
    mine = JobQueue(db, owner="replica-a", lease_seconds=LEASE)
    other = JobQueue(db, owner="replica-b", lease_seconds=LEASE)
    for _ in range(3):
        add_job(db)
    jobs = mine.claim()
    assert len(jobs) == 3
    before = {t.ident for t in threading.enumerate()}
    with mine.held(jobs[0]), mine.held(jobs[1]), mine.held(jobs[2]):
        started = [t for t in threading.enumerate() if t.ident not in before]
        assert [t.name for t in started] == ["leases"]  # one thread for the three
        time.sleep(1.2)
        assert other.claim() == []


def test_the_thread_is_kept_between_holds_and_ends_when_idle() -> None:
    keeper: LeaseKeeper[str] = LeaseKeeper(lambda job: True, idle=0.5)
    keeper.hold((1, 1), "a", every=0.05)
    keeper.release((1, 1))
    first = keeper.thread
    assert first is not None
    keeper.hold((2, 1), "b", every=0.05)  # soon after: the same thread keeps it
    assert keeper.thread is first
    keeper.release((2, 1))
    first.join(3)
    assert not first.is_alive(), "the thread runs on with nothing held"


def test_a_lost_lease_is_renewed_no_more_and_none_after_release() -> None:
    calls: list[str] = []
    kept = {"a": True, "b": False}  # b's lease is lost at its first renewal

    def renew(job: str) -> bool:
        calls.append(job)
        return kept[job]

    keeper: LeaseKeeper[str] = LeaseKeeper(renew)
    keeper.hold((1, 1), "a", every=0.05)
    keeper.hold((2, 1), "b", every=0.05)
    time.sleep(0.4)
    assert calls.count("b") == 1
    assert calls.count("a") >= 3
    keeper.release((1, 1))
    after = len(calls)
    time.sleep(0.3)
    assert len(calls) == after


def test_a_failing_renewal_is_tried_again_next_period() -> None:
    calls: list[float] = []

    def renew(job: str) -> bool:
        calls.append(time.monotonic())
        raise ConnectionError("database away")

    keeper: LeaseKeeper[str] = LeaseKeeper(renew)
    keeper.hold((1, 1), "a", every=0.05)
    time.sleep(0.35)
    keeper.release((1, 1))
    assert len(calls) >= 3


def test_the_lease_period_follows_the_queues_lease(db: Database) -> None:
    """A queue whose lease is changed after it was made renews at the new period."""
    mine = JobQueue(db, owner="replica-a", lease_seconds=3600)
    mine.lease = timedelta(seconds=LEASE)
    other = JobQueue(db, owner="replica-b", lease_seconds=LEASE)
    add_job(db)
    [job] = mine.claim()  # leased for 0.6 s, renewed every 0.2 s
    with mine.held(job):
        time.sleep(1.2)
        assert other.claim() == []
