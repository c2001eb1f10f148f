"""Readiness and status: each dependency as ok, degraded or down, with its last error.

`/readyz` answers 200 only when the database answers, its schema is at the newest migration
and this replica's scheduler swept within three sweep intervals; Slack, the processor and the
model are listed (degraded does not take a replica out of rotation: the jobs table keeps the
work until they are back). `refund-desk status` shows the same from the database's side
(every replica's last sweep) with the job backlog and the oldest waiting case.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Integer, func, select, text
from sqlmodel import Session, col

from refund_desk import clock
from refund_desk.storage.migrate import alembic_config
from refund_desk.storage.models import AdvisorCall, Case, Control, Job, ReplicaHeartbeat

if TYPE_CHECKING:
    from refund_desk.runtime import Runtime

OK, DEGRADED, DOWN = "ok", "degraded", "down"
RECENT = timedelta(minutes=15)  # a failure older than this no longer degrades a dependency
WAITING = ("awaiting_approval", "parked")
# Which job kinds speak to which dependency: a retrying job of that kind degrades it.
SLACK_JOBS = ("slack.call", "slack.home", "slack.file_case", "notify", "policy.backtest")
PROCESSOR_JOBS = ("execute", "processor.event", "reconcile")


@dataclass
class Check:
    status: str
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class SweepState:
    """This replica's scheduler, as its sweeper reports it (monotonic seconds)."""

    period: float
    started: float = field(default_factory=time.monotonic)
    last_swept: float | None = None
    last_error: str | None = None
    running: bool = True

    def check(self) -> Check:
        if not self.running:
            return Check(DOWN, self.last_error or "the scheduler is stopped")
        if self.last_swept is None:  # not ready until it has swept once
            waited = time.monotonic() - self.started
            return Check(DOWN, self.last_error or f"no sweep yet ({waited:.0f} s since start)")
        ago = time.monotonic() - self.last_swept
        detail = {"last_sweep_seconds_ago": round(ago, 1), "sweep_seconds": self.period}
        if ago > 3 * self.period:
            return Check(DOWN, self.last_error or f"last sweep {ago:.0f} s ago", detail)
        return Check(OK, self.last_error, detail)


@lru_cache(maxsize=1)
def newest_migration() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def database_checks(runtime: Runtime) -> tuple[Check, Check]:
    """The database answers; its schema is at the newest migration."""
    try:
        with runtime.db.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
            current = MigrationContext.configure(connection).get_current_revision()
    except Exception as exc:  # the whole point is to say what is wrong, whatever it is
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        return Check(DOWN, error), Check(DOWN, "the database does not answer")
    head = newest_migration()
    migrations = Check(OK, None, {"current": current, "newest": head})
    if current != head:
        migrations.status = DOWN
        migrations.error = f"schema at {current}, newest is {head}: run `refund-desk db upgrade`"
    return Check(OK), migrations


def _retrying(session: Session, kinds: tuple[str, ...]) -> tuple[int, str | None]:
    """Jobs of these kinds that failed and wait to run again, and the latest error."""
    rows = session.execute(
        select(col(Job.last_error))
        .where(col(Job.kind).in_(kinds), col(Job.status) == "pending", col(Job.failures) > 0)
        .order_by(col(Job.due_at).desc())
    ).all()
    return len(rows), (rows[0][0] if rows else None)


def _dead_recently(session: Session, kinds: tuple[str, ...], now: datetime) -> int:
    return int(
        session.scalar(
            select(func.count()).where(
                col(Job.kind).in_(kinds),
                col(Job.status) == "dead",
                col(Job.finished_at) >= now - RECENT,
            )
        )
        or 0
    )


def slack_check(runtime: Runtime, session: Session, socket_status: str | None) -> Check:
    settings = runtime.settings
    if settings.slack_bot_token is None:
        return Check(OK, None, {"configured": False})
    retrying, error = _retrying(session, SLACK_JOBS)
    dead = _dead_recently(session, SLACK_JOBS, clock.now())
    detail: dict[str, Any] = {"retrying_jobs": retrying, "dead_jobs_15m": dead}
    if socket_status is not None:
        detail["connection"] = socket_status
    if socket_status in ("connecting", "retrying"):
        return Check(DEGRADED, error or f"Socket Mode {socket_status}", detail)
    return Check(DEGRADED if retrying or dead else OK, error, detail)


def processor_check(runtime: Runtime, session: Session) -> Check:
    retrying, error = _retrying(session, PROCESSOR_JOBS)
    switches = session.get(Control, 1)
    detail: dict[str, Any] = {"name": runtime.desk.processor.name, "retrying_jobs": retrying}
    last = getattr(runtime.desk.processor, "last_failure", None)
    if last is not None and clock.now() - last[0] < RECENT:
        error = error or last[1]
        detail["last_failure_at"] = last[0].isoformat()
    if switches is not None and switches.breaker_tripped_at is not None:
        detail["breaker"] = switches.breaker_reason
        return Check(DEGRADED, error or switches.breaker_reason, detail)
    degraded = retrying or "last_failure_at" in detail
    return Check(DEGRADED if degraded else OK, error, detail)


def model_check(runtime: Runtime, session: Session) -> Check:
    advisor = runtime.desk.advisor
    detail: dict[str, Any] = {"provider": advisor.name}
    last = session.scalars(
        select(AdvisorCall).where(col(AdvisorCall.provider) == advisor.name)
        .order_by(col(AdvisorCall.id).desc()).limit(1)
    ).first()  # fmt: skip
    if last is None or last.outcome == "parsed":
        return Check(OK, None, detail)
    detail["last_call_at"] = last.at.isoformat()
    error = f"last call {last.outcome}" + (f" ({last.error_code})" if last.error_code else "")
    recent = clock.now() - last.at < RECENT
    return Check(DEGRADED if recent else OK, error, detail)


def readiness(
    runtime: Runtime, sweep: SweepState | None, socket_status: str | None
) -> tuple[bool, dict[str, Any]]:
    """What `/readyz` answers: ready, and every dependency with its state."""
    database, migrations = database_checks(runtime)
    if sweep is not None:
        scheduler = sweep.check()
    elif runtime.desk.jobs_elsewhere and database.status == OK:
        with runtime.db.read() as session:  # the job processes' sweeps
            scheduler = scheduler_from_heartbeats(session, clock.now())
    else:
        scheduler = Check(DOWN, "no scheduler in this app")
    checks = {"database": database, "migrations": migrations, "scheduler": scheduler}
    if database.status == OK:
        with runtime.db.read() as session:
            checks["slack"] = slack_check(runtime, session, socket_status)
            checks["processor"] = processor_check(runtime, session)
            checks["model"] = model_check(runtime, session)
    else:
        for name in ("slack", "processor", "model"):
            checks[name] = Check(DOWN, "unknown: the database does not answer")
    ready = all(checks[n].status != DOWN for n in ("database", "migrations", "scheduler"))
    return ready, {
        "status": "ready" if ready else "not ready",
        "checks": {name: asdict(check) for name, check in checks.items()},
    }


# ---------------------------------------------------------------- `refund-desk status`


def heartbeat(session: Session, replica: str, *, started_at: datetime, swept_at: datetime,
              sweep_seconds: float, error: str | None) -> None:  # fmt: skip
    row = session.get(ReplicaHeartbeat, replica)
    if row is None:
        row = ReplicaHeartbeat(replica=replica, started_at=started_at, swept_at=swept_at)
    row.swept_at, row.sweep_seconds, row.last_error = swept_at, sweep_seconds, error
    session.add(row)


def scheduler_from_heartbeats(session: Session, now: datetime) -> Check:
    rows = session.scalars(
        select(ReplicaHeartbeat).order_by(col(ReplicaHeartbeat.swept_at).desc())
    ).all()
    replicas = [
        {
            "replica": r.replica,
            "last_sweep_seconds_ago": round((now - r.swept_at).total_seconds(), 1),
            "sweeping": now - r.swept_at <= timedelta(seconds=3 * r.sweep_seconds),
            "last_error": r.last_error,
        }
        for r in rows
    ]
    live = [r for r in replicas if r["sweeping"]]
    if not live:
        error = "no replica swept within three sweep intervals" if rows else "no replica has run"
        return Check(DOWN, error, {"replicas": replicas})
    return Check(OK, None, {"replicas": replicas})


def status(runtime: Runtime) -> dict[str, Any]:
    """The operator's view: dependencies, replicas, job backlog by kind, oldest waiting case."""
    now = clock.now()
    database, migrations = database_checks(runtime)
    checks: dict[str, Check] = {"database": database, "migrations": migrations}
    out: dict[str, Any] = {"at": now.isoformat()}
    if database.status != OK or migrations.status != OK:  # the tables may not be there
        out["checks"] = {name: asdict(check) for name, check in checks.items()}
        out["status"] = DOWN
        return out
    with runtime.db.read() as session:
        checks["scheduler"] = scheduler_from_heartbeats(session, now)
        checks["slack"] = slack_check(runtime, session, None)
        checks["processor"] = processor_check(runtime, session)
        checks["model"] = model_check(runtime, session)
        backlog = session.execute(
            select(
                col(Job.kind),
                func.count(),
                func.sum(func.cast(col(Job.due_at) <= now, Integer())),
                func.sum(func.cast(col(Job.failures) > 0, Integer())),
                func.min(col(Job.due_at)),
            )
            .where(col(Job.status) == "pending")
            .group_by(col(Job.kind))
            .order_by(col(Job.kind))
        ).all()
        dead: dict[str, int] = dict(
            session.execute(
                select(col(Job.kind), func.count())
                .where(col(Job.status) == "dead")
                .group_by(col(Job.kind))
            ).all()
        )
        oldest = session.execute(
            select(col(Case.id), col(Case.status), col(Case.created_at), col(Case.sla_due_at))
            .where(col(Case.status).in_(WAITING))
            .order_by(col(Case.created_at))
            .limit(1)
        ).first()
        waiting = session.scalar(select(func.count()).where(col(Case.status).in_(WAITING)))
    out["checks"] = {name: asdict(check) for name, check in checks.items()}
    statuses = {c.status for c in checks.values()}
    out["status"] = DOWN if DOWN in statuses else DEGRADED if DEGRADED in statuses else OK
    kinds = sorted({row[0] for row in backlog} | set(dead))
    by_kind = {row[0]: row for row in backlog}
    out["jobs"] = [
        {
            "kind": kind,
            "pending": int(by_kind[kind][1]) if kind in by_kind else 0,
            "due": int(by_kind[kind][2] or 0) if kind in by_kind else 0,
            "retrying": int(by_kind[kind][3] or 0) if kind in by_kind else 0,
            "dead": int(dead.get(kind, 0)),
            "oldest_due_at": _iso(by_kind[kind][4]) if kind in by_kind else None,
        }
        for kind in kinds
    ]
    out["waiting_cases"] = int(waiting or 0)
    out["oldest_waiting_case"] = (
        None
        if oldest is None
        else {
            "id": oldest[0],
            "status": oldest[1],
            "created_at": _iso(oldest[2]),
            "waiting_hours": round((now - _aware(oldest[2])).total_seconds() / 3600, 1),
            "sla_due_at": _iso(oldest[3]),
        }
    )
    return out


def _aware(value: Any) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _iso(value: Any) -> str | None:
    return None if value is None else _aware(value).isoformat()
