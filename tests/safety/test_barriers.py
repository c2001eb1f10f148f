"""Money moves only on the state as committed: a pause, a mode change or a breaker trip that
another transaction commits between the steps of one refund (the reservation's checks, its
lock, the lookup before the create) is a barrier to the create; the remainder counts every
refund of ours that succeeded meanwhile; at most one create per execution is in flight,
whatever happened to the job's lease.

Each test commits the other process's change in its own transaction at the named step, as a
lead's command or another replica would. A change injected inside the reservation's
transaction needs PostgreSQL (on SQLite that transaction holds the one writer, so nothing
commits inside it); the steps outside any transaction run on both databases.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlmodel import col

from refund_desk import clock
from refund_desk.cases import breaker, executor
from refund_desk.cases.ports import PaymentFacts, ProcessorRefund
from refund_desk.governance.admin import set_mode, set_paused
from refund_desk.jobs.queue import JobQueue
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import AuditRecord, Case, Execution, Job
from tests.helpers import Harness, published
from tests.safety.test_findings import act_no_run

LEAD = Actor("slack", "U0LEAD1")


@pytest.fixture()
def pg_desk(pg_runtime: Runtime) -> Harness:
    return published(pg_runtime)


def commit(desk: Harness, change: Callable[[Any], object]) -> None:
    """Another process's change, committed in a transaction of its own."""
    with desk.runtime.db.write() as session:
        change(session)


def pause(desk: Harness) -> None:
    audit = desk.runtime.desk.audit
    commit(desk, lambda s: set_paused(s, audit, paused=True, actor=LEAD))


def resume(desk: Harness) -> None:
    audit = desk.runtime.desk.audit
    commit(desk, lambda s: set_paused(s, audit, paused=False, actor=Actor("cli", "admin")))


def approve_all(desk: Harness) -> None:
    audit = desk.runtime.desk.audit
    commit(desk, lambda s: set_mode(s, audit, mode="approve-all", actor=Actor("cli", "admin")))


def trip(desk: Harness) -> None:
    commit(desk, lambda s: breaker.trip(desk.runtime.desk, s, "another replica: over the limit"))


def once(change: Callable[[], None]) -> Callable[[], None]:
    done: list[bool] = []

    def run() -> None:
        if not done:
            done.append(True)
            change()

    return run


def creates(desk: Harness) -> list[dict[str, Any]]:
    """Every create the desk sends to the processor, counted as it is sent."""
    sent: list[dict[str, Any]] = []
    real = desk.sandbox.create_refund

    def counted(**kw: Any) -> ProcessorRefund:
        sent.append(kw)
        return real(**kw)

    desk.sandbox.create_refund = counted  # type: ignore[method-assign]
    return sent


def after_the_lookup(desk: Harness, change: Callable[[], None]) -> None:
    """`change` commits after the reservation committed and the lookup that precedes the
    create found nothing: outside every transaction of the refund, just before its create."""
    real = desk.sandbox.list_refunds

    def lookup(payment_id: str) -> list[ProcessorRefund]:
        found = real(payment_id)
        change()
        return found

    desk.sandbox.list_refunds = lookup  # type: ignore[method-assign]


def inside_the_reservation(monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> None:
    """`change` commits while the reservation's transaction runs its checks (PostgreSQL: on
    SQLite that transaction holds the one writer)."""
    real = executor._recheck

    def recheck(*args: Any, **kwargs: Any) -> Any:
        change()
        return real(*args, **kwargs)

    monkeypatch.setattr(executor, "_recheck", recheck)


def approved_by_a_person(desk: Harness, amount: str = "100.00", paid: str = "100.00") -> str:
    """A tier-3 case approved by a lead; its execute job queued, not run. Returns its job."""
    payment = desk.payment(paid)
    case_id = desk.post(desk.request(payment, amount)).json()["id"]
    assert desk.get(case_id)["status"] == "awaiting_approval"
    outcome = act_no_run(desk, case_id, "approve", "U0LEAD1")
    [job] = outcome.jobs
    return case_id + ":" + str(job)


def run_job(desk: Harness, job: int) -> None:
    desk.runtime.desk.jobs.run_now(job)


def status(desk: Harness, case_id: str) -> str:
    return str(desk.get(case_id)["status"])


def execution_of(desk: Harness, case_id: str) -> list[Execution]:
    with desk.runtime.db.read() as session:
        return list(
            session.scalars(select(Execution).where(col(Execution.case_id) == case_id)).all()
        )


# ---------------------------------------------------------------- the pause


@pytest.mark.postgres
def test_a_pause_committed_while_the_execute_job_reserves_stops_the_payment(
    pg_desk: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    desk = pg_desk
    case_id, job = approved_by_a_person(desk).split(":")
    sent = creates(desk)
    inside_the_reservation(monkeypatch, once(lambda: pause(desk)))
    run_job(desk, int(job))
    assert sent == [] and status(desk, case_id) == "approved"
    assert desk.refunds_at_processor(desk.get(case_id)["payment"]) == []
    resume(desk)
    desk.sweep()
    assert status(desk, case_id) == "refunded" and len(sent) == 1


def test_a_pause_committed_after_the_reservation_stops_the_create(desk: Harness) -> None:
    case_id, job = approved_by_a_person(desk).split(":")
    sent = creates(desk)
    after_the_lookup(desk, once(lambda: pause(desk)))
    run_job(desk, int(job))
    assert sent == []
    assert status(desk, case_id) == "executing"  # reserved, waiting for the switch
    [execution] = execution_of(desk, case_id)
    assert execution.status == "reserved" and execution.sent_at is None
    resume(desk)
    desk.sweep()
    assert status(desk, case_id) == "refunded" and len(sent) == 1


def test_an_automatic_refund_reserved_inline_waits_for_a_pause_committed_before_its_create(
    desk: Harness,
) -> None:
    sent = creates(desk)
    after_the_lookup(desk, once(lambda: pause(desk)))
    payment = desk.payment("30.00")
    body = desk.post(desk.request(payment, "20.00", reason="damaged")).json()
    assert sent == [] and body["status"] != "refunded"
    resume(desk)
    desk.sweep()
    assert status(desk, body["id"]) == "refunded" and len(sent) == 1


# ---------------------------------------------------------------- the mode and the breaker


@pytest.mark.postgres
@pytest.mark.parametrize("change", [approve_all, trip], ids=["mode-changed", "breaker-tripped"])
def test_a_mode_change_committed_during_an_automatic_reservation_sends_it_to_a_person(
    pg_desk: Harness, monkeypatch: pytest.MonkeyPatch, change: Callable[[Harness], None]
) -> None:
    desk = pg_desk
    sent = creates(desk)
    inside_the_reservation(monkeypatch, once(lambda: change(desk)))
    payment = desk.payment("30.00")
    body = desk.post(desk.request(payment, "20.00", reason="damaged")).json()
    desk.sweep()
    assert sent == []
    assert status(desk, body["id"]) == "awaiting_approval"
    assert desk.refunds_at_processor(payment) == []


@pytest.mark.parametrize("change", [approve_all, trip], ids=["mode-changed", "breaker-tripped"])
def test_a_mode_change_committed_after_an_automatic_reservation_gives_it_back_to_a_person(
    desk: Harness, change: Callable[[Harness], None]
) -> None:
    sent = creates(desk)
    after_the_lookup(desk, once(lambda: change(desk)))
    payment = desk.payment("30.00")
    body = desk.post(desk.request(payment, "20.00", reason="damaged")).json()
    desk.sweep()
    assert sent == [] and desk.refunds_at_processor(payment) == []
    case = desk.get(body["id"])
    assert case["status"] == "parked", case
    [execution] = execution_of(desk, body["id"])
    assert execution.status == "failed" and execution.error_code == "released"
    assert "a person must approve" in (execution.error_message or "")
    # A person's approval pays in every mode: once, on the new reservation.
    act_no_run(desk, body["id"], "approve", "U0LEAD1")
    desk.sweep()
    assert status(desk, body["id"]) == "refunded" and len(sent) == 1


def test_a_persons_approval_is_paid_whatever_the_mode_changes_to_before_its_create(
    desk: Harness,
) -> None:
    case_id, job = approved_by_a_person(desk).split(":")
    sent = creates(desk)
    after_the_lookup(desk, once(lambda: approve_all(desk)))
    run_job(desk, int(job))
    assert status(desk, case_id) == "refunded" and len(sent) == 1


# ---------------------------------------------------------------- the remainder


def test_the_remainder_counts_a_refund_of_ours_that_succeeded_after_the_processor_was_read(
    desk: Harness,
) -> None:
    """Two approved 60.00 cases on a 100.00 payment: A pays while B's job, which read the
    payment from the processor before, waits to reserve. B must see 40.00 left."""
    payment = desk.payment("100.00")
    first = desk.post(desk.request(payment, "60.00")).json()["id"]
    second = desk.post(desk.request(payment, "60.00")).json()["id"]
    [job_a] = act_no_run(desk, first, "approve", "U0LEAD1").jobs
    [job_b] = act_no_run(desk, second, "approve", "U0LEAD1").jobs
    sent = creates(desk)
    real = desk.sandbox.payment

    def payment_read_then_a_pays(payment_id: str, **kw: Any) -> PaymentFacts:
        facts = real(payment_id, **kw)
        if not sent:  # B has the processor's facts; A runs to its end before B reserves
            desk.sandbox.payment = real  # type: ignore[method-assign]
            run_job(desk, job_a)
            assert status(desk, first) == "refunded"
        return facts

    desk.sandbox.payment = payment_read_then_a_pays  # type: ignore[method-assign]
    run_job(desk, job_b)
    assert len(sent) == 1, "B was sent to the processor over what was left"
    case = desk.get(second)
    assert case["status"] == "parked"
    with desk.runtime.db.read() as session:
        row = session.get(Case, second)
        assert row is not None
        assert "Only 40.00 USD is still refundable" in (row.park_reason or "")
    assert execution_of(desk, second) == []
    assert sum(r["amount"] for r in desk.refunds_at_processor(payment)) == 6000


# ---------------------------------------------------------------- one create in flight


def test_a_replica_that_takes_over_a_job_whose_create_is_in_flight_does_not_send_another(
    desk: Harness,
) -> None:
    """The first replica's lease runs out (as with a process starved of CPU) while its create
    is in flight: the replica that takes the job over finds no refund yet, and waits instead
    of sending a second create. The processor here does not honour idempotency keys."""
    rt = desk.runtime
    case_id, job = approved_by_a_person(desk, "60.00", "100.00").split(":")
    real = desk.sandbox.create_refund
    in_flight, let_go = threading.Event(), threading.Event()
    sent: list[str] = []

    def slow(**kw: Any) -> ProcessorRefund:
        sent.append(threading.current_thread().name)
        in_flight.set()
        assert let_go.wait(30)
        return real(**kw)

    desk.sandbox.create_refund = slow  # type: ignore[method-assign]
    first = threading.Thread(target=rt.desk.jobs.run_now, args=(int(job),), name="replica-a")
    first.start()
    assert in_flight.wait(30)
    other = JobQueue(rt.db, owner="replica-b", lease_seconds=rt.desk.jobs.lease.total_seconds())
    other.handlers = dict(rt.desk.jobs.handlers)
    # From replica B's view the lease ran out long ago.
    other.sweep(now=clock.now() + rt.desk.jobs.lease * 10)
    assert sent == ["replica-a"], "a second create was sent while the first was in flight"
    with rt.db.read() as session:
        row = session.get(Job, int(job))
        assert row is not None and "in flight" in (row.last_error or "")
    let_go.set()
    first.join(30)
    desk.sweep()
    assert status(desk, case_id) == "refunded"
    assert len(desk.refunds_at_processor(desk.get(case_id)["payment"])) == 1


def test_a_create_that_failed_is_not_in_flight_so_the_retry_goes_at_once(desk: Harness) -> None:
    case_id, job = approved_by_a_person(desk, "60.00", "100.00").split(":")
    real = desk.sandbox.list_refunds

    def lookup_then_down(payment_id: str) -> list[ProcessorRefund]:
        found = real(payment_id)
        desk.sandbox.set_fault("down", times=1)  # the create that follows fails
        return found

    desk.sandbox.list_refunds = lookup_then_down  # type: ignore[method-assign]
    run_job(desk, int(job))
    desk.sandbox.list_refunds = real  # type: ignore[method-assign]
    [execution] = execution_of(desk, case_id)
    assert execution.status == "reserved" and execution.sent_at is not None
    # The mark now ends at the answer: a lookup from now on sees every earlier create.
    assert execution.sent_at <= executor._in_flight_since(desk.runtime.desk, clock.now())
    desk.sweep(seconds_ahead=60)
    assert status(desk, case_id) == "refunded"


def test_every_create_on_record_passed_the_barrier(desk: Harness) -> None:
    case_id, job = approved_by_a_person(desk, "60.00", "100.00").split(":")
    before = clock.now()
    run_job(desk, int(job))
    [execution] = execution_of(desk, case_id)
    assert execution.status == "succeeded"
    assert execution.sent_at is not None and execution.sent_at >= before - timedelta(seconds=1)
    with desk.runtime.db.read() as session:
        actions = session.scalars(
            select(col(AuditRecord.action)).where(col(AuditRecord.case_id) == case_id)
        ).all()
    assert "execution.succeeded" in actions
