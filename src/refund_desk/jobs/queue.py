"""Durable work: one jobs table, claimed with leases, fenced by attempt numbers.

A sweep claims due rows with one conditional UPDATE (plus `FOR UPDATE SKIP LOCKED` on
PostgreSQL, so replicas never wait on each other), runs them, and records the outcome only if
it still holds the lease for that attempt. A replica that dies simply lets its leases expire.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, bindparam, case, func, insert, or_, select, update
from sqlalchemy.orm import make_transient_to_detached
from sqlmodel import Session

from refund_desk import clock, logs, tracing
from refund_desk.jobs.leases import LeaseKeeper
from refund_desk.storage.db import Database, on_commit
from refund_desk.storage.models import Job

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimedJob:
    id: int
    kind: str
    payload: dict[str, Any]
    attempt: int  # claims so far, this one included: the fence for late writers
    failures: int  # failed runs before this one; waiting (RetryLater) is not failing
    max_attempts: int


class RetryLater(Exception):
    """Raised by a handler: run me again after `delay` seconds.

    `failed` says whether this run counts as a failure (a processor outage does, waiting for
    the kill switch to be lifted does not); only failures use up `max_attempts`.
    """

    def __init__(self, delay: float, reason: str = "", *, failed: bool = True) -> None:
        super().__init__(reason)
        self.delay = delay
        self.reason = reason
        self.failed = failed


Handler = Callable[[ClaimedJob], None]


def nothing_to_do(job: ClaimedJob) -> None:
    """The handler of a kind with nothing to do in this deployment (a notification with no
    chat surface to say it on: the case itself is the record). A sweep marks such jobs done
    in bulk in its claim's transaction, with no run and no transaction of their own."""


def queue(
    session: Session,
    *,
    kind: str,
    payload: dict[str, Any],
    due_at: datetime | None = None,
    dedupe_key: str | None = None,
    max_attempts: int = 20,
) -> int:
    """Add a job inside the caller's transaction, so it exists exactly when the change does;
    returns its id. One INSERT, not the ORM's unit of work (a repeated `dedupe_key` raises
    IntegrityError here, as a flush would)."""
    return _insert(session, _row(kind, payload, due_at, dedupe_key, max_attempts))


def enqueue(
    session: Session,
    *,
    kind: str,
    payload: dict[str, Any],
    due_at: datetime | None = None,
    dedupe_key: str | None = None,
    max_attempts: int = 20,
) -> Job:
    """`queue`, returning the job as written, in the session (for callers that look at it)."""
    row = _row(kind, payload, due_at, dedupe_key, max_attempts)
    job = Job(**row)
    job.id = _insert(session, row)
    make_transient_to_detached(job)  # the row as written, now the session's like one it read
    session.add(job)
    return job


def _row(
    kind: str,
    payload: dict[str, Any],
    due_at: datetime | None,
    dedupe_key: str | None,
    max_attempts: int,
) -> dict[str, Any]:
    now = clock.now()
    return {"kind": kind, "payload": payload, "dedupe_key": dedupe_key, "status": "pending",
            "due_at": due_at or now, "attempt": 0, "failures": 0, "max_attempts": max_attempts,
            "lease_owner": None, "lease_expires_at": None, "last_error": None,
            "created_at": now, "finished_at": None}  # fmt: skip


def _insert(session: Session, row: dict[str, Any]) -> int:
    return int(session.connection().execute(_QUEUE, row).scalar_one())


# ---------------------------------------------------------------- statements
#
# Built once, executed with parameters: SQLAlchemy reuses their compiled form and cache key
# instead of building and hashing a statement per call. They name the table, not the `Job`
# class, so the session runs them as they are, without an autoflush or an update of the `Job`
# objects it holds (`enqueue`'s callers only take the new job's id from theirs).
# `FOR UPDATE SKIP LOCKED` keeps PostgreSQL replicas from waiting on each other; SQLite has
# one writer and renders no `FOR UPDATE` at all.

_JOBS = Job.__table__  # type: ignore[attr-defined]
_C = _JOBS.c
_NOW = bindparam("now", type_=_C.due_at.type)
_FREE = or_(_C.lease_expires_at.is_(None), _C.lease_expires_at < _NOW)  # no live lease
_CLAIMABLE = and_(_C.status == "pending", _C.due_at <= _NOW, _FREE)
# The attempt this process holds: a late writer whose lease expired changes nothing.
_FENCE = and_(
    _C.id == bindparam("job_id"),
    _C.attempt == bindparam("fence_attempt"),
    _C.lease_owner == bindparam("owner"),
    _C.status == "pending",
)

_QUEUE = insert(_JOBS).returning(_C.id)


def _leasing(which: Any) -> Any:
    """Lease the jobs `which` selects to `owner` until `lease_until`, one attempt more."""
    return (
        update(_JOBS)
        .where(which)
        .values(
            lease_owner=bindparam("owner"),
            lease_expires_at=bindparam("lease_until"),
            attempt=_C.attempt + 1,
        )
        .returning(_C.id, _C.kind, _C.payload, _C.attempt, _C.failures, _C.max_attempts)
    )


_CLAIM_DUE = _leasing(
    _C.id.in_(
        select(_C.id)
        .where(_CLAIMABLE, _C.id.not_in(bindparam("skip", expanding=True)))
        .order_by(_C.due_at)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
)
# A named job is taken even before it is due (a retry's backoff, a reminder's time).
_CLAIM_ONE = _leasing(and_(_C.id == bindparam("job_id"), _C.status == "pending", _FREE))
_SETTLE_IDLE = (
    update(_JOBS)
    .where(
        _C.id.in_(
            select(_C.id)
            .where(_CLAIMABLE, _C.kind.in_(bindparam("idle", expanding=True)))
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
    )
    .values(status="done", finished_at=_NOW, lease_expires_at=None)
)
_RENEW = update(_JOBS).where(_FENCE).values(lease_expires_at=bindparam("lease_until"))
_DONE_STATEMENT = (
    update(_JOBS)
    .where(_FENCE)
    .values(status="done", finished_at=bindparam("finished"), lease_expires_at=None)
)
_DONE = _DONE_STATEMENT
_DONE_FORGETTING = _DONE_STATEMENT.values(payload={})  # `forget_when_done` kinds
_RETRY = (
    update(_JOBS)
    .where(_FENCE)
    .values(
        status=bindparam("next_status"),
        failures=bindparam("next_failures"),
        due_at=bindparam("next_due"),
        lease_owner=None,
        lease_expires_at=None,
        last_error=bindparam("error"),
        finished_at=bindparam("finished"),
    )
)
_NEXT_DUE = select(
    func.min(case((_C.lease_expires_at > _C.due_at, _C.lease_expires_at), else_=_C.due_at))
).where(_C.status == "pending")


def backoff(attempt: int, *, base: float = 2.0, cap: float = 300.0) -> float:
    """Exponential backoff with full jitter's gentler cousin: half fixed, half random."""
    delay = min(cap, base * (2 ** max(0, attempt - 1)))
    return delay / 2 + random.uniform(0, delay / 2)


class JobQueue:
    def __init__(self, db: Database, *, owner: str, lease_seconds: float) -> None:
        self.db = db
        self.owner = owner
        self.lease = timedelta(seconds=lease_seconds)
        self.handlers: dict[str, Handler] = {}
        self.stopping = threading.Event()  # set on shutdown: sweeps stop between jobs
        # Called after each run here (done or to be retried): a waiting request looks again.
        self.listeners: list[Callable[[ClaimedJob], None]] = []
        self._finished: set[tuple[int, int]] = set()  # (id, attempt) done in a handler's commit
        # Kinds whose payload carries what people wrote (a rendered Slack message, a typed
        # modal): emptied when the job is done, so nothing of it outlives the delivery.
        self.forget_when_done: set[str] = set()
        # Called in an erasure's transaction with the erased cases' ids: the owner of such
        # kinds rewrites its waiting jobs, so no rendered words outlive the erasure.
        self.on_erasure: list[Callable[[Session, Sequence[str]], None]] = []
        self._finished_lock = threading.Lock()
        self._leases: LeaseKeeper[ClaimedJob] = LeaseKeeper(self.renew)

    def install(self, table: dict[str, Handler]) -> None:
        """Take the whole table of job kinds at once (`runtime.job_table` builds it)."""
        self.handlers = dict(table)

    def register(self, kind: str, handler: Handler) -> None:
        """Add one kind (tests); a kind already handled is refused, never silently replaced."""
        if kind in self.handlers:
            raise ValueError(f"job kind {kind!r} already has a handler")
        self.handlers[kind] = handler

    # ------------------------------------------------------------ claiming

    def claim(
        self, *, now: datetime | None = None, limit: int = 20, skip: frozenset[int] = frozenset()
    ) -> list[ClaimedJob]:
        now = now or clock.now()
        with self.db.write() as session:
            self._settle_idle(session, now)
            return self._lease(session, _CLAIM_DUE, now, skip=list(skip), limit=limit)

    def _settle_idle(self, session: Session, now: datetime) -> None:
        """Mark due jobs of kinds with `nothing_to_do` done, all at once."""
        idle = [kind for kind, handler in self.handlers.items() if handler is nothing_to_do]
        if idle:
            session.connection().execute(_SETTLE_IDLE, {"now": now, "idle": idle})

    def claim_one(self, job_id: int, *, now: datetime | None = None) -> ClaimedJob | None:
        """Claim a specific job now, even before it is due: the request that created it runs
        it inline, and its due time is only the grace after which a sweep takes over."""
        with self.db.write() as session:
            claimed = self._lease(session, _CLAIM_ONE, now or clock.now(), job_id=job_id)
        return claimed[0] if claimed else None

    def claim_in(self, session: Session, job_id: int) -> ClaimedJob | None:
        """Claim a job inside the caller's transaction (which has just queued it): the claim
        commits with the work that created the job, and costs no transaction of its own."""
        claimed = self._lease(session, _CLAIM_ONE, clock.now(), job_id=job_id)
        return claimed[0] if claimed else None

    def _lease(self, session: Session, claim: Any, now: datetime, **which: Any) -> list[ClaimedJob]:
        """Run one of the `_leasing` statements: one UPDATE leases and returns the jobs."""
        lease = {"now": now, "owner": self.owner, "lease_until": now + self.lease, **which}
        rows = session.connection().execute(claim, lease)
        return [ClaimedJob(*r) for r in sorted(rows, key=lambda r: r[0])]

    # ------------------------------------------------------------ outcomes

    def _fenced(self, job: ClaimedJob) -> dict[str, Any]:
        """The parameters of `_FENCE`: this job, at this attempt, still leased here."""
        return {"job_id": job.id, "fence_attempt": job.attempt, "owner": self.owner}

    def renew(self, job: ClaimedJob) -> bool:
        """Extend the lease of a job still running here; False once it is lost. It goes
        before every writer that can wait (`urgent`): a renewal that queued behind intakes and
        other jobs for a whole lease would let another replica take a job whose processor call
        is still in flight."""
        with self.db.write(urgent=True) as session:
            renewed = session.connection().execute(
                _RENEW, {**self._fenced(job), "lease_until": clock.now() + self.lease}
            )
        return bool(renewed.rowcount)

    @contextmanager
    def held(self, job: ClaimedJob) -> Iterator[None]:
        """Keep the job's lease while a slow call (the processor) is in flight: renewed every
        third of the lease, so no other replica takes the job over meanwhile (one thread for
        all the jobs held here, `jobs/leases.py`). A process that dies stops renewing, and
        its lease runs out as before."""
        key = (job.id, job.attempt)
        self._leases.hold(key, job, every=self.lease.total_seconds() / 3)
        try:
            yield
        finally:
            self._leases.release(key)

    def finish_in(self, session: Session, job: ClaimedJob) -> bool:
        """Mark the job done inside the handler's last transaction, so the outcome and the
        job's completion commit together (one transaction fewer); `run` then leaves it.
        False if the lease was lost: the handler's work still commits, as it would have."""
        if not self._mark_done(session, job):
            return False
        key = (job.id, job.attempt)

        def committed() -> None:
            with self._finished_lock:
                self._finished.add(key)

        on_commit(session, committed)
        return True

    def _finished_here(self, job: ClaimedJob) -> bool:
        with self._finished_lock:
            if (job.id, job.attempt) in self._finished:
                self._finished.discard((job.id, job.attempt))
                return True
        return False

    def _mark_done(self, session: Session, job: ClaimedJob) -> bool:
        """One fenced UPDATE: done, and the payload emptied for `forget_when_done` kinds."""
        done = _DONE_FORGETTING if job.kind in self.forget_when_done else _DONE
        result = session.connection().execute(done, {**self._fenced(job), "finished": clock.now()})
        return bool(result.rowcount)

    def complete(self, job: ClaimedJob) -> bool:
        with self.db.write() as session:
            done = self._mark_done(session, job)
        if not done:
            log.warning("job %s attempt %s finished after its lease was lost", job.id, job.attempt)
        return done

    def retry(self, job: ClaimedJob, *, delay: float, error: str, failed: bool = True) -> bool:
        now = clock.now()
        failures = job.failures + (1 if failed else 0)
        dead = failures >= job.max_attempts
        with self.db.write() as session:
            result = session.connection().execute(
                _RETRY,
                {
                    **self._fenced(job),
                    "next_status": "dead" if dead else "pending",
                    "next_failures": failures,
                    "next_due": now + timedelta(seconds=delay),
                    "error": error[:2000],
                    "finished": now if dead else None,
                },
            )
        if dead:
            log.error(
                "job %s (%s) gave up after %s attempts: %s", job.id, job.kind, job.attempt, error
            )
        return bool(result.rowcount)

    # ------------------------------------------------------------ running

    def run(self, job: ClaimedJob, handler: Handler | None = None) -> None:
        """Run a claimed job by its kind's handler (or `handler`), then record the outcome."""
        case_id = job.payload.get("case_id")
        try:
            with (
                logs.about(case_id),  # its lines (and its span) name the case it is about
                tracing.span(
                    f"job {job.kind}", case_id=case_id, job_id=job.id, attempt=job.attempt
                ),
            ):
                self._run(job, handler or self.handlers.get(job.kind))
        finally:
            for listener in self.listeners:
                try:
                    listener(job)
                except Exception:  # a listener never fails the job
                    log.exception("job listener failed for job %s", job.id)

    def _run(self, job: ClaimedJob, handler: Handler | None) -> None:
        if handler is None:
            self.retry(job, delay=3600, error=f"no handler for job kind {job.kind!r}")
            return
        try:
            handler(job)
        except RetryLater as later:
            if not self._finished_here(job):
                self.retry(
                    job,
                    delay=later.delay,
                    error=later.reason or "retry requested",
                    failed=later.failed,
                )
        except Exception as exc:
            log.exception("job %s (%s) attempt %s failed", job.id, job.kind, job.attempt)
            if not self._finished_here(job):
                self.retry(
                    job, delay=backoff(job.failures + 1), error=f"{type(exc).__name__}: {exc}"
                )
        else:
            if not self._finished_here(job):
                self.complete(job)

    def run_now(self, job_id: int) -> bool:
        """Claim and run one job at once; False if someone else holds or finished it."""
        job = self.claim_one(job_id)
        if job is None:
            return False
        self.run(job)
        return True

    def next_due(self) -> datetime | None:
        """When the earliest pending job becomes claimable (due, and any lease expired)."""
        with self.db.read() as session:
            value = session.scalar(_NEXT_DUE)
        if value is None:
            return None
        # Aggregates skip the column type on some drivers: normalize to aware UTC here.
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    def sweep(self, *, now: datetime | None = None, limit: int = 20, max_batches: int = 50) -> int:
        """Run due jobs, each at most once, until none are left; returns how many ran."""
        seen: set[int] = set()
        for _ in range(max_batches):
            if self.stopping.is_set():
                break
            jobs = self.claim(now=now, limit=limit, skip=frozenset(seen))
            if not jobs:
                break
            for job in jobs:
                seen.add(job.id)
                if self.stopping.is_set():
                    # Shutting down: hand the rest back at once rather than run it late.
                    self.retry(job, delay=0, error="replica stopping", failed=False)
                    continue
                self.run(job)
        return len(seen)
