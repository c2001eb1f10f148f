"""Shared tools of the independent tests: replicas on one database, the other process's commits,
and a watch on every create call the processor receives (with the committed state at its start).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, text
from sqlmodel import col

from refund_desk.cases import breaker
from refund_desk.cases.approvals import act
from refund_desk.governance.admin import set_mode, set_paused
from refund_desk.jobs.queue import JobQueue
from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.runtime import Runtime, install_jobs
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import Case, Control, Execution, SandboxPayment, SandboxRefund
from tests.conftest import make_runtime
from tests.helpers import Harness, button_token, published

LEAD = "U0LEAD1"  # support-leads: the default group, limit 500
FINANCE = "U0FIN1"  # finance: large cases, limit 5000
OPS = Actor("cli", "reviewer")


def sandbox_of(rt: Runtime) -> SandboxProcessor:
    assert rt.sandbox is not None
    return rt.sandbox


def replica(url: str, owner: str, lease_seconds: float | None = None) -> Runtime:
    """Another process on the same database: its own runtime, vault, sandbox and job owner."""
    rt = make_runtime(url)
    lease = lease_seconds if lease_seconds is not None else rt.desk.jobs.lease.total_seconds()
    rt.desk.jobs = JobQueue(rt.db, owner=owner, lease_seconds=lease)
    install_jobs(rt)
    return rt


@contextmanager
def two_processes(
    url: str, a_owner: str | None = None, b_lease: float | None = None
) -> Iterator[tuple[Harness, Runtime]]:
    """This process (A, with the HTTP API; a replica of its own if `a_owner` names one) and
    another one (B) on the same database."""
    a = replica(url, a_owner) if a_owner else make_runtime(url)
    b = replica(url, "replica-b", lease_seconds=b_lease)
    try:
        yield published(a), b
    finally:
        a.db.dispose()
        b.db.dispose()


# ---------------------------------------------------------------- the other process's commits


def pause(rt: Runtime, paused: bool = True) -> None:
    with rt.db.write() as session:
        set_paused(session, rt.desk.audit, paused=paused, actor=OPS)


def mode(rt: Runtime, to: str) -> None:
    with rt.db.write() as session:
        set_mode(session, rt.desk.audit, mode=to, actor=OPS)


def trip(rt: Runtime) -> None:
    with rt.db.write() as session:
        breaker.trip(rt.desk, session, "tripped by the reviewer")


CHANGES: dict[str, Callable[[Runtime], None]] = {
    "pause": pause,
    "approve-all": lambda rt: mode(rt, "approve-all"),
    "shadow": lambda rt: mode(rt, "shadow"),
    "breaker": trip,
}


def in_thread(fn: Callable[[], Any], timeout: float = 15.0) -> Any:
    """Run `fn` in another thread (another connection) and wait for it: a commit made while
    this thread sits inside a transaction of its own (PostgreSQL only)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout)
    assert not worker.is_alive(), "the other process's commit waited on a lock held here"
    if "error" in out:
        raise out["error"]
    return out.get("value")


# ---------------------------------------------------------------- state as committed


def switches(rt: Runtime) -> tuple[bool, str]:
    with rt.db.read() as session:
        row = session.get(Control, 1)
        assert row is not None
        return bool(row.paused), str(row.mode)


def case_row(rt: Runtime, case_id: str) -> Case:
    with rt.db.read() as session:
        row = session.get(Case, case_id)
        assert row is not None
        return row


def executions(rt: Runtime, case_id: str | None = None) -> list[Execution]:
    with rt.db.read() as session:
        query = select(Execution)
        if case_id is not None:
            query = query.where(col(Execution.case_id) == case_id)
        return list(session.scalars(query).all())


def ledger(rt: Runtime) -> list[SandboxRefund]:
    with rt.db.read() as session:
        return list(session.scalars(select(SandboxRefund)).all())


def live(refunds: list[SandboxRefund]) -> list[SandboxRefund]:
    return [r for r in refunds if r.status not in ("failed", "canceled")]


def click(rt: Runtime, case_id: str, action: str, user: str, **extra: Any) -> list[int]:
    """A person's click, as Slack's listener makes it; the jobs it queued."""
    token = button_token(rt.desk, case_row(rt, case_id), action)
    return list(act(rt.desk, token_value=token, user=user, **extra).jobs)


# ---------------------------------------------------------------- every create, watched


@dataclass
class CreateCall:
    payment_id: str
    amount: int
    execution_id: str
    case_id: str
    paused: bool  # committed at the call's start
    mode: str
    automatic: bool | None
    execution_status: str | None
    case_status: str | None
    left: int  # captured less every refund the processor holds that is not failed or canceled


@dataclass
class CreateWatch:
    """Wraps `create_refund` of each runtime's sandbox; reads the committed state at the call's
    start on a connection of its own (never inside the caller's transaction: the executor
    calls the processor outside any)."""

    calls: list[CreateCall] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def watch(self, *runtimes: Runtime) -> CreateWatch:
        for rt in runtimes:
            sandbox = rt.sandbox
            assert sandbox is not None
            original = sandbox.create_refund

            def create_refund(*, _rt: Runtime = rt, _orig: Any = original, **kw: Any) -> Any:
                self._snap(_rt, kw)
                return _orig(**kw)

            sandbox.create_refund = create_refund  # type: ignore[method-assign]
        return self

    def _snap(self, rt: Runtime, kw: dict[str, Any]) -> None:
        meta = kw.get("metadata") or {}
        with rt.db.look() as conn:
            paused, mode_ = conn.execute(
                text("SELECT paused, mode FROM control WHERE id = 1")
            ).one()
            captured = conn.execute(
                select(col(SandboxPayment.amount)).where(col(SandboxPayment.id) == kw["payment_id"])
            ).scalar_one()
            out = conn.execute(
                select(col(SandboxRefund.amount), col(SandboxRefund.status)).where(
                    col(SandboxRefund.payment_id) == kw["payment_id"]
                )
            ).all()
            ex = conn.execute(
                select(col(Execution.automatic), col(Execution.status)).where(
                    col(Execution.id) == meta.get("execution_id")
                )
            ).first()
            status = conn.execute(
                select(col(Case.status)).where(col(Case.id) == meta.get("case_id"))
            ).scalar()
        left = captured - sum(a for a, s in out if s not in ("failed", "canceled"))
        with self.lock:
            self.calls.append(
                CreateCall(
                    payment_id=kw["payment_id"],
                    amount=kw["amount"],
                    execution_id=str(meta.get("execution_id")),
                    case_id=str(meta.get("case_id")),
                    paused=bool(paused),
                    mode=str(mode_),
                    automatic=None if ex is None else bool(ex[0]),
                    execution_status=None if ex is None else str(ex[1]),
                    case_status=None if status is None else str(status),
                    left=int(left),
                )
            )

    # ------------------------------------------------------------ the promises, checked

    def over_asks(self) -> list[CreateCall]:
        """Promise 2: a create for more than is left on the payment at the processor."""
        return [c for c in self.calls if c.amount > c.left]

    def against_the_switches(self) -> list[CreateCall]:
        """Promise 1: a create started while paused, or an automatic one outside `supervised`."""
        return [c for c in self.calls if c.paused or (c.automatic and c.mode != "supervised")]


def exactly_once_breaks(rt: Runtime) -> dict[str, int]:
    """Promise 3: execution ids with more than one refund at the processor."""
    seen: dict[str, int] = {}
    for refund in ledger(rt):
        ex = (refund.meta or {}).get("execution_id")
        if ex:
            seen[ex] = seen.get(ex, 0) + 1
    return {k: v for k, v in seen.items() if v > 1}


def case_money_breaks(rt: Runtime) -> list[str]:
    """Promise 5: money out on a denied case, or a refunded case whose money out is not
    exactly its approved amount (every refund the processor holds, by the case it names)."""
    out: dict[str, int] = {}
    for refund in live(ledger(rt)):
        case_id = (refund.meta or {}).get("case_id")
        if case_id:
            out[case_id] = out.get(case_id, 0) + refund.amount
    problems = []
    with rt.db.read() as session:
        for case in session.scalars(select(Case)).all():
            paid = out.get(case.id, 0)
            if case.status == "denied" and paid:
                problems.append(f"{case.id} is denied with {paid} out")
            if case.status == "refunded" and paid != case.amount:
                problems.append(f"{case.id} is refunded for {case.amount} with {paid} out")
    return problems
