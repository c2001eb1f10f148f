"""Promise 1, the barrier: once a pause, a breaker trip or a mode change has committed, no
create that depends on the old state starts, on any path (inline after an automatic decision,
the execute job, a retry after a lease ran out, a person's approval click, reconciliation).
An automatic refund is never created outside `supervised`; a person's approval pays in every
mode, never while paused.

Each test commits the other process's change (a second runtime on the same database) at one
step of one refund, and `CreateWatch` records the committed switches at the start of every
create the processor receives. On SQLite the change is committed only between transactions;
on PostgreSQL also inside the refund's own transactions (from another thread).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from refund_desk.cases import executor
from refund_desk.cases import facts as case_facts
from refund_desk.cases.ports import ProcessorUnavailable
from refund_desk.payments import reconcile
from refund_desk.runtime import Runtime
from tests.conftest import SimulatedCrash
from tests.helpers import Harness
from tests.safety.independent.support import (
    CHANGES,
    FINANCE,
    LEAD,
    CreateWatch,
    case_money_breaks,
    case_row,
    click,
    exactly_once_breaks,
    executions,
    in_thread,
    ledger,
    live,
    pause,
    switches,
    two_processes,
)


@pytest.fixture()
def pair(any_db_url: str) -> Iterator[tuple[Harness, Runtime, str]]:
    """This process (A, with the HTTP API) and another one (B) on the same database."""
    with two_processes(any_db_url) as (desk, b):
        yield desk, b, any_db_url


@pytest.fixture()
def pg_pair(pg_url: str) -> Iterator[tuple[Harness, Runtime, str]]:
    """The same, on PostgreSQL only: for commits made inside the refund's own transactions."""
    with two_processes(pg_url) as (desk, b):
        yield desk, b, pg_url


def _nth_call(
    monkeypatch: pytest.MonkeyPatch,
    owner: Any,
    name: str,
    n: int,
    before: Callable[[], None],
    *,
    after_original: bool = False,
) -> dict[str, int]:
    """Wrap `owner.name`: at its n-th call, run `before` (the other process's commit)."""
    original = getattr(owner, name)
    seen = {"calls": 0, "fired": 0}

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        seen["calls"] += 1
        if seen["calls"] == n and not after_original:
            before()
            seen["fired"] += 1
        result = original(*args, **kwargs)
        if seen["calls"] == n and after_original:
            before()
            seen["fired"] += 1
        return result

    monkeypatch.setattr(owner, name, wrapper)
    return seen


def _settle_after(desk: Harness, b: Runtime, change: str, case_id: str) -> None:
    """After the change: the case waits (nothing paid); then what the promise says happens
    next: resumed, it pays once; in a stopped mode a person's approval pays, once."""
    assert live(ledger(desk.runtime)) == [], "a refund was created after the change committed"
    if change == "pause":
        desk.sweep()
        assert live(ledger(desk.runtime)) == [], "paid while paused"
        pause(b, False)
        desk.sweep()
    else:
        status = case_row(desk.runtime, case_id).status
        assert status in ("awaiting_approval", "parked"), status
        desk.sweep()  # whatever the release or resolve jobs do first
        for job in click(desk.runtime, case_id, "approve", LEAD):
            desk.runtime.desk.jobs.run_now(job)
        desk.sweep()
    assert case_row(desk.runtime, case_id).status == "refunded"
    assert len(live(ledger(desk.runtime))) == 1


CHANGED = ["pause", "approve-all", "breaker"]


@pytest.mark.parametrize("change", CHANGED)
@pytest.mark.parametrize("step", ["advance-payment", "pay-lookup"])
def test_inline_automatic_refund_respects_a_change_committed_at_each_step(
    pair: tuple[Harness, Runtime, str], monkeypatch: pytest.MonkeyPatch, change: str, step: str
) -> None:
    """Catches: the inline path (decide, reserve early, pay in the same request) creating a
    refund on the switches it read before the change committed: right after the advance's
    payment read, at the pay step's lookup."""
    _inline(pair, monkeypatch, change, step)


@pytest.mark.postgres
@pytest.mark.parametrize("change", CHANGED)
@pytest.mark.parametrize("step", ["decide-txn", "send-txn"])
def test_inline_automatic_refund_respects_a_change_committed_inside_its_transactions(
    pg_pair: tuple[Harness, Runtime, str], monkeypatch: pytest.MonkeyPatch, change: str, step: str
) -> None:
    """Catches (PostgreSQL, the commit from another connection): the decision's transaction
    reserving on switches read before the change (committed after its payment lock and before
    the switches' lock), or the barrier's own transaction missing a change committed after it
    began and before it reads the switches."""
    _inline(pg_pair, monkeypatch, change, step)


def _inline(
    pair: tuple[Harness, Runtime, str], monkeypatch: pytest.MonkeyPatch, change: str, step: str
) -> None:
    desk, b, _ = pair
    watch = CreateWatch().watch(desk.runtime, b)
    commit = lambda: in_thread(lambda: CHANGES[change](b))  # noqa: E731
    payment = desk.payment("30.00")
    if step == "advance-payment":  # 1: intake's read, 2: the advance's read
        hook = _nth_call(monkeypatch, desk.sandbox, "payment", 2, commit, after_original=True)
    elif step == "pay-lookup":
        hook = _nth_call(monkeypatch, desk.sandbox, "list_refunds", 1, commit)
    elif step == "decide-txn":
        hook = _nth_call(monkeypatch, case_facts, "customer_history", 1, commit)
    else:
        hook = _nth_call(monkeypatch, executor, "_in_flight_since", 1, commit)
    body = desk.post(desk.request(payment, "20.00")).json()
    assert hook["fired"] == 1, "the step was not reached"
    assert watch.against_the_switches() == []
    _settle_after(desk, b, change, body["id"])
    assert watch.against_the_switches() == []
    assert exactly_once_breaks(desk.runtime) == {}
    assert case_money_breaks(desk.runtime) == []


@pytest.mark.parametrize("change", CHANGED)
@pytest.mark.parametrize("step", ["job-payment", "job-lookup"])
def test_execute_job_respects_a_change_committed_at_each_step(
    pair: tuple[Harness, Runtime, str], monkeypatch: pytest.MonkeyPatch, change: str, step: str
) -> None:
    """Catches: the execute job (run by a sweep, not inline) creating on a pause or mode read
    before the change: right after its payment read, at its lookup."""
    _job(pair, monkeypatch, change, step)


@pytest.mark.postgres
@pytest.mark.parametrize("change", CHANGED)
@pytest.mark.parametrize("step", ["reserve-txn", "send-txn"])
def test_execute_job_respects_a_change_committed_inside_its_transactions(
    pg_pair: tuple[Harness, Runtime, str], monkeypatch: pytest.MonkeyPatch, change: str, step: str
) -> None:
    """Catches (PostgreSQL): the reservation's transaction missing a change committed after
    its payment lock and before the switches' lock, or the barrier's transaction missing one
    committed after it began."""
    _job(pg_pair, monkeypatch, change, step)


def _job(
    pair: tuple[Harness, Runtime, str], monkeypatch: pytest.MonkeyPatch, change: str, step: str
) -> None:
    desk, b, _ = pair
    desk.runtime.desk.jobs_elsewhere = True
    watch = CreateWatch().watch(desk.runtime, b)
    commit = lambda: in_thread(lambda: CHANGES[change](b))  # noqa: E731
    payment = desk.payment("30.00")
    body = desk.post(desk.request(payment, "20.00")).json()
    assert body["status"] == "received"
    desk.sweep(batches=1)  # the advance alone: decided and approved, the execute job queued
    assert case_row(desk.runtime, body["id"]).status == "approved"
    if step == "job-payment":
        hook = _nth_call(monkeypatch, desk.sandbox, "payment", 1, commit, after_original=True)
    elif step == "job-lookup":
        hook = _nth_call(monkeypatch, desk.sandbox, "list_refunds", 1, commit)
    elif step == "reserve-txn":
        hook = _nth_call(monkeypatch, case_facts, "refundable", 1, commit)
    else:
        hook = _nth_call(monkeypatch, executor, "_in_flight_since", 1, commit)
    desk.sweep(batches=1)
    assert hook["fired"] == 1, "the step was not reached"
    _settle_after(desk, b, change, body["id"])
    assert watch.against_the_switches() == []
    assert exactly_once_breaks(desk.runtime) == {}
    assert case_money_breaks(desk.runtime) == []


@pytest.mark.parametrize("change", ["pause", "approve-all", "breaker"])
def test_a_retry_after_the_lease_ran_out_respects_the_change(
    pair: tuple[Harness, Runtime, str], monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """Catches: the replica that takes over a reserved execution (the first process died at
    its lookup, its lease ran out) creating on the switches the reservation saw. With the
    pause, a reconciliation pass meanwhile must create nothing either."""
    desk, b, _ = pair
    watch = CreateWatch().watch(desk.runtime, b)

    def die(*_: Any, **__: Any) -> Any:
        raise SimulatedCrash()

    monkeypatch.setattr(desk.sandbox, "list_refunds", die)
    payment = desk.payment("30.00")
    with pytest.raises(SimulatedCrash):
        desk.post(desk.request(payment, "20.00"))
    [execution] = executions(desk.runtime)
    assert execution.status == "reserved"
    monkeypatch.undo()
    CHANGES[change](b)
    if change == "pause":  # reconciliation finds the stale reservation: no create from it
        reconcile.reconcile(b.desk, since=desk.runtime.desk.now().replace(year=2000))
    b.desk.jobs.sweep(now=b.desk.now() + timedelta(hours=1))
    assert watch.against_the_switches() == []
    _settle_after(desk, b, change, execution.case_id)
    assert watch.against_the_switches() == []
    assert exactly_once_breaks(desk.runtime) == {}


@pytest.mark.parametrize("step", ["after-click", "job-payment", "job-lookup"])
def test_a_persons_approval_never_pays_while_paused(
    pair: tuple[Harness, Runtime, str], monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """Catches: a person's approval paying on a pause committed after the click, right after
    the execute job's payment read, or at its lookup."""
    _click_paused(pair, monkeypatch, step)


@pytest.mark.postgres
def test_a_persons_approval_never_pays_on_a_pause_inside_the_barrier(
    pg_pair: tuple[Harness, Runtime, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches (PostgreSQL): the barrier's transaction missing a pause committed after it
    began, for a person's approval."""
    _click_paused(pg_pair, monkeypatch, "send-txn")


def _click_paused(
    pair: tuple[Harness, Runtime, str], monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    desk, b, _ = pair
    watch = CreateWatch().watch(desk.runtime, b)
    payment = desk.payment("900.00")
    body = desk.post(desk.request(payment, "600.00")).json()
    assert body["status"] == "awaiting_approval"
    commit = lambda: in_thread(lambda: pause(b))  # noqa: E731
    if step == "job-payment":
        hook = _nth_call(monkeypatch, desk.sandbox, "payment", 1, commit, after_original=True)
    elif step == "job-lookup":
        hook = _nth_call(monkeypatch, desk.sandbox, "list_refunds", 1, commit)
    elif step == "send-txn":
        hook = _nth_call(monkeypatch, executor, "_in_flight_since", 1, commit)
    else:
        hook = {"fired": 1}
    jobs = click(desk.runtime, body["id"], "approve", FINANCE)
    if step == "after-click":
        pause(b)
    for job in jobs:
        desk.runtime.desk.jobs.run_now(job)
    assert hook["fired"] == 1, "the step was not reached"
    assert watch.against_the_switches() == []
    assert live(ledger(desk.runtime)) == []
    desk.sweep()
    assert live(ledger(desk.runtime)) == []
    pause(b, False)
    desk.sweep()
    assert case_row(desk.runtime, body["id"]).status == "refunded"
    assert [r.amount for r in live(ledger(desk.runtime))] == [60000]
    assert watch.against_the_switches() == []


@pytest.mark.parametrize("change", ["approve-all", "shadow", "breaker"])
def test_a_persons_approval_pays_in_every_mode(
    pair: tuple[Harness, Runtime, str], change: str
) -> None:
    """Catches: the barrier treating a person's approval as automatic (stopping it outside
    `supervised`), including when the mode changes between the click and the job."""
    desk, b, _ = pair
    payment = desk.payment("900.00")
    body = desk.post(desk.request(payment, "600.00")).json()
    assert body["status"] == "awaiting_approval"
    jobs = click(desk.runtime, body["id"], "approve", FINANCE)
    CHANGES[change](b)
    assert switches(desk.runtime)[1] != "supervised"
    for job in jobs:
        desk.runtime.desk.jobs.run_now(job)
    desk.sweep()
    assert case_row(desk.runtime, body["id"]).status == "refunded"
    assert [r.amount for r in live(ledger(desk.runtime))] == [60000]


def test_a_persons_approval_of_a_parked_automatic_reservation_pays_after_a_breaker_trip(
    pair: tuple[Harness, Runtime, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches: a person's approval that never pays. The processor fails the pay step's
    lookup until the breaker trips (5 in a row: `approve-all`) and the job parks the case
    with its automatic reservation still open (8 failures). A person approves the parked case
    at the reserved amount, which `_check_resolved` allows ("only resumes that same refund").
    The execute job resumes the open reservation, still marked automatic; the barrier sends it
    back to a person, but `_back_to_person` only acts on an `executing` case, so nothing
    happens: the case stays `approved` with an open reservation, and nobody can decide it."""
    desk, _, _ = pair
    failing = {"on": True}
    original = desk.sandbox.list_refunds

    def list_refunds(payment_id: str) -> Any:
        if failing["on"]:
            raise ProcessorUnavailable("processor_unavailable", "down for the review")
        return original(payment_id)

    monkeypatch.setattr(desk.sandbox, "list_refunds", list_refunds)
    payment = desk.payment("30.00")
    body = desk.post(desk.request(payment, "20.00")).json()
    assert body["status"] == "executing"
    for _ in itertools.repeat(None, 12):
        if case_row(desk.runtime, body["id"]).status == "parked":
            break
        desk.sweep(seconds_ahead=400, batches=1)
    assert case_row(desk.runtime, body["id"]).status == "parked"
    assert switches(desk.runtime)[1] == "approve-all"  # the breaker tripped
    [execution] = executions(desk.runtime)
    assert execution.status == "reserved" and execution.automatic
    failing["on"] = False  # the processor is back
    for job in click(desk.runtime, body["id"], "approve", LEAD):
        desk.runtime.desk.jobs.run_now(job)
    for _ in range(3):
        desk.sweep(seconds_ahead=3600)
    case = case_row(desk.runtime, body["id"])
    assert case.status == "refunded", (
        f"a person's approval did not pay: the case is {case.status}, its executions "
        f"{[(e.status, e.automatic) for e in executions(desk.runtime)]}"
    )
    assert len(live(ledger(desk.runtime))) == 1
