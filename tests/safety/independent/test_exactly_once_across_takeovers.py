"""Promise 3: each execution id has at most one refund at the processor, from our own record
alone (the sandbox ignores idempotency keys here): under timeout-after-success and
crash-after-success, when a job's lease runs out while its create is in flight and another
replica takes the job over, and with two replicas running jobs at once (PostgreSQL).
Also promise 5 where a lost in-flight create ends on a denied case.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text

from refund_desk import clock
from refund_desk.cases import executor
from refund_desk.cases.ports import ProcessorUnavailable
from refund_desk.payments import reconcile
from refund_desk.runtime import Runtime
from tests.conftest import SimulatedCrash
from tests.helpers import Harness, published
from tests.safety.independent.support import (
    LEAD,
    CreateWatch,
    case_money_breaks,
    case_row,
    click,
    exactly_once_breaks,
    executions,
    ledger,
    live,
    mode,
    sandbox_of,
    two_processes,
)

WAIT = 20.0  # seconds any one step may wait for the other thread


@pytest.fixture()
def replicas(pg_url: str) -> Iterator[tuple[Harness, Runtime]]:
    """Two replicas on one PostgreSQL database, each its own job owner; A has the API."""
    with two_processes(pg_url, "replica-a", b_lease=1.0) as pair:
        yield pair


def _approved_case(
    desk: Harness, amount: str = "20.00", paid: str = "30.00", email: str = "ada@example.com"
) -> str:
    """An automatic case decided and approved, its execute job queued, nothing reserved."""
    desk.runtime.desk.jobs_elsewhere = True
    payment = desk.payment(paid, email=email)
    body = desk.post({**desk.request(payment, amount), "email": email}).json()
    desk.sweep(batches=1)
    assert case_row(desk.runtime, body["id"]).status == "approved"
    return str(body["id"])


def _run(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


def _take_over(rt: Runtime) -> int:
    """A sweep of another replica after the first one's lease ran out (its renewals stopped)."""
    return rt.desk.jobs.sweep(now=clock.now() + timedelta(hours=1), max_batches=1)


@pytest.mark.parametrize("ignore", ["attribute", "cli-fault"])
@pytest.mark.parametrize("fault", ["timeout-after-success", "crash-after-success"])
def test_one_refund_after_a_fault_when_keys_are_ignored(
    any_runtime: Runtime, fault: str, ignore: str
) -> None:
    """Catches: a retry after an unknown outcome creating again (the processor would happily
    make a second refund for the repeated key), on both ways of ignoring keys."""
    desk = published(any_runtime)
    if ignore == "cli-fault":
        desk.sandbox.honour_idempotency_keys = True
        desk.sandbox.set_fault("ignore-idempotency-keys")
    payment = desk.payment("30.00")
    desk.sandbox.set_fault(fault, times=1)
    if fault == "crash-after-success":
        with pytest.raises(SimulatedCrash):
            desk.post(desk.request(payment, "20.00"))
    else:
        desk.post(desk.request(payment, "20.00"))
    for _ in range(3):
        desk.sweep(seconds_ahead=3600)
    [execution] = executions(any_runtime)
    assert execution.status == "succeeded"
    assert len(live(ledger(any_runtime))) == 1
    assert exactly_once_breaks(any_runtime) == {}
    assert case_money_breaks(any_runtime) == []


@pytest.mark.postgres
def test_takeover_while_the_create_is_in_flight_sends_no_second_create(
    replicas: tuple[Harness, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches: the replica that takes the job over after A's lease ran out looking the refund
    up before A's create landed, finding nothing, and creating a second refund. B's lookup
    runs before A's create; B's barrier runs while A's create is still unanswered (A waits
    for it); 10 of 30, so the processor would accept a second refund."""
    desk, b = replicas
    watch = CreateWatch().watch(desk.runtime, b)
    case_id = _approved_case(desk, "10.00")
    a_in_create, b_listed, b_passed = threading.Event(), threading.Event(), threading.Event()
    a_create = desk.sandbox.create_refund
    threads: dict[str, threading.Thread] = {}

    def slow_create(**kw: Any) -> Any:
        a_in_create.set()
        assert b_listed.wait(WAIT)
        refund = a_create(**kw)
        b_passed.wait(5)  # the answer comes back only after B's barrier
        return refund

    desk.sandbox.create_refund = slow_create  # type: ignore[method-assign]
    b_list = sandbox_of(b).list_refunds

    def b_lists(payment_id: str) -> Any:
        found = b_list(payment_id)
        b_listed.set()
        return found

    sandbox_of(b).list_refunds = b_lists  # type: ignore[method-assign]
    send = executor._send

    def send_then_tell(*args: Any) -> Any:
        try:
            return send(*args)
        finally:
            if threading.current_thread() is threads.get("b"):
                b_passed.set()

    monkeypatch.setattr(executor, "_send", send_then_tell)
    ta, out_a = _run(lambda: desk.sweep(seconds_ahead=10, batches=1))
    assert a_in_create.wait(WAIT)
    tb, out_b = _run(lambda: _take_over(b))
    threads["b"] = tb
    ta.join(WAIT)
    tb.join(WAIT)
    assert "error" not in out_a and "error" not in out_b, (out_a, out_b)
    assert b_passed.is_set(), "B did not reach the barrier"
    desk.sandbox.create_refund = a_create  # type: ignore[method-assign]
    desk.sweep()
    assert len({c.execution_id for c in watch.calls}) == len(watch.calls) == 1, watch.calls
    assert exactly_once_breaks(desk.runtime) == {}
    assert len(live(ledger(desk.runtime))) == 1
    assert case_row(desk.runtime, case_id).status == "refunded"


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("amount", "then"),
    [("10.00", "create"), ("20.00", "create"), ("10.00", "back-to-person")],
)
def test_takeover_lookup_before_a_create_that_then_times_out(
    replicas: tuple[Harness, Runtime], amount: str, then: str
) -> None:
    """Catches: `_answered` clearing `sent_at` after A's create timed out (timeout-after-success:
    the refund exists) while replica B, which took the job over after A's lease ran out, has
    already looked the refund up (before A's create landed) and not yet passed the barrier.
    B's barrier then finds `sent_at` empty, marks it and creates: two refunds for one
    execution id. The lookup that `_answered` relies on ("a timed-out create is in the
    processor's listing from now on") is B's, and it ran before.
    10 of 30: the processor makes the second refund. 20 of 30: it refuses it (only 10 left),
    so the desk asked for more than was left, and the refused call fails an execution whose
    refund had succeeded. back-to-person: the mode leaves `supervised` before B's barrier, so
    B's `_back_to_person` finds `sent_at` empty and releases the reservation whose refund the
    processor holds; the case goes to a person as "nothing was sent", whose approval then
    pays a second time."""
    desk, b = replicas
    watch = CreateWatch().watch(desk.runtime, b)
    case_id = _approved_case(desk, amount)
    a_in_create, b_listed, a_answered = threading.Event(), threading.Event(), threading.Event()
    a_create = desk.sandbox.create_refund

    def create_then_time_out(**kw: Any) -> Any:
        a_in_create.set()
        assert b_listed.wait(WAIT)
        desk.sandbox.set_fault("timeout-after-success", times=1)
        return a_create(**kw)

    desk.sandbox.create_refund = create_then_time_out  # type: ignore[method-assign]
    answered = executor._answered

    def answered_then_tell(*args: Any) -> None:
        answered(*args)
        a_answered.set()

    executor._answered = answered_then_tell  # type: ignore[assignment]
    b_list = sandbox_of(b).list_refunds

    def b_lists(payment_id: str) -> Any:
        found = b_list(payment_id)
        b_listed.set()
        a_answered.wait(WAIT)  # B's barrier runs after A heard its timeout
        if then == "back-to-person":
            mode(b, "approve-all")
        return found

    sandbox_of(b).list_refunds = b_lists  # type: ignore[method-assign]
    try:
        ta, out_a = _run(lambda: desk.sweep(seconds_ahead=10, batches=1))
        assert a_in_create.wait(WAIT)
        tb, out_b = _run(lambda: _take_over(b))
        ta.join(WAIT)
        tb.join(WAIT)
    finally:
        executor._answered = answered
    assert "error" not in out_a and "error" not in out_b, (out_a, out_b)
    assert a_answered.is_set(), "A's create did not time out"
    desk.sandbox.create_refund = a_create  # type: ignore[method-assign]
    sandbox_of(b).list_refunds = b_list  # type: ignore[method-assign]
    desk.sweep()
    if then == "back-to-person" and case_row(desk.runtime, case_id).status in (
        "parked",
        "awaiting_approval",
    ):  # a person approves what they are told was never sent
        for job in click(desk.runtime, case_id, "approve", LEAD):
            desk.runtime.desk.jobs.run_now(job)
        desk.sweep()
    creates = [(c.execution_id, c.amount, c.left) for c in watch.calls]
    problems = []
    if len({c[0] for c in creates}) != len(creates):
        problems.append(f"two creates for one execution (id, amount, left): {creates}")
    if exactly_once_breaks(desk.runtime):
        problems.append(f"refunds per execution id: {exactly_once_breaks(desk.runtime)}")
    if watch.over_asks():
        problems.append(f"asked for more than was left: {watch.over_asks()}")
    problems += case_money_breaks(desk.runtime)
    status = case_row(desk.runtime, case_id).status
    if status != "refunded":
        problems.append(
            f"case {status}, executions "
            f"{[(e.status, e.error_code) for e in executions(desk.runtime, case_id)]}, "
            f"refunds {[(r.amount, r.status) for r in ledger(desk.runtime)]}"
        )
    assert not problems, "\n".join(problems)


@pytest.mark.postgres
def test_a_reservation_released_while_its_create_is_in_flight(
    replicas: tuple[Harness, Runtime],
) -> None:
    """Catches: `_release` (resolve, here from reconciliation's stale pass) freeing a
    reservation whose create is still in flight, which `_back_to_person` guards against
    (`sent_at`) and `_release` does not. A's create is in flight (its lease then runs out);
    B takes the job over, the processor fails its lookup an 8th time, so B parks the case;
    reconciliation resolves the stale reservation: the lookup finds nothing yet, so it is
    released ("nothing was paid ... a person may decide again"). A's create then lands and is
    recorded nowhere. A person denies the case: money is out on a denied case, and the
    execution our record calls released has a refund at the processor."""
    desk, b = replicas
    case_id = _approved_case(desk)
    with desk.runtime.db.write() as session:  # seven failed attempts before this one
        session.execute(text("UPDATE jobs SET failures = 7 WHERE kind = 'execute'"))
    a_in_create, go = threading.Event(), threading.Event()
    a_create = desk.sandbox.create_refund

    def slow_create(**kw: Any) -> Any:
        a_in_create.set()
        assert go.wait(WAIT)
        return a_create(**kw)

    desk.sandbox.create_refund = slow_create  # type: ignore[method-assign]
    ta, out_a = _run(lambda: desk.sweep(seconds_ahead=10, batches=1))
    try:
        assert a_in_create.wait(WAIT)
        b_list = sandbox_of(b).list_refunds
        fail = {"left": 1}

        def b_lists(payment_id: str) -> Any:
            if fail["left"]:
                fail["left"] -= 1
                raise ProcessorUnavailable("processor_unavailable", "a blip")
            return b_list(payment_id)

        sandbox_of(b).list_refunds = b_lists  # type: ignore[method-assign]
        _take_over(b)
        assert case_row(desk.runtime, case_id).status == "parked"
        time.sleep(1.2)  # the reservation is older than B's lease: reconciliation's "stale"
        reconcile.reconcile(b.desk, since=clock.now() - timedelta(days=1))
        released = [e.status for e in executions(desk.runtime, case_id)]
    finally:
        go.set()
        ta.join(WAIT)
    desk.sandbox.create_refund = a_create  # type: ignore[method-assign]
    assert "error" not in out_a, out_a
    paid = live(ledger(desk.runtime))
    if released == ["failed"] and paid:
        for job in click(desk.runtime, case_id, "deny", LEAD, reason="no"):
            desk.runtime.desk.jobs.run_now(job)
    assert case_money_breaks(desk.runtime) == [], (
        f"executions {[(e.status, e.error_code) for e in executions(desk.runtime, case_id)]}, "
        f"refunds at the processor {[(r.id, r.amount, r.meta.get('execution_id')) for r in paid]}"
    )
    assert not (released == ["failed"] and paid), "a refund left for a released reservation"


@pytest.mark.postgres
def test_two_replicas_sweeping_at_once_pay_each_case_once(
    replicas: tuple[Harness, Runtime],
) -> None:
    """Catches: two replicas that keep taking each other's jobs (each sweeps as if the other's
    leases had run out) creating twice for one execution, or more than a case's amount."""
    desk, b = replicas
    watch = CreateWatch().watch(desk.runtime, b)
    cases = [_approved_case(desk, "10.00", "30.00", f"c{i}@example.com") for i in range(6)]
    stop = time.monotonic() + 4

    def sweeper(rt: Runtime, step: int) -> None:
        i = 0
        while time.monotonic() < stop:
            i += 1
            rt.desk.jobs.sweep(now=clock.now() + timedelta(seconds=step * i), max_batches=2)

    threads = [_run(lambda: sweeper(desk.runtime, 600)), _run(lambda: sweeper(b, 900))]
    for thread, _ in threads:
        thread.join(30)
    for _, out in threads:
        assert "error" not in out, out
    desk.sweep(seconds_ahead=3 * 3600)
    creates = [c.execution_id for c in watch.calls]
    assert len(set(creates)) == len(creates), f"two creates for one execution: {creates}"
    assert exactly_once_breaks(desk.runtime) == {}
    assert case_money_breaks(desk.runtime) == []
    assert watch.over_asks() == []
    assert all(case_row(desk.runtime, c).status == "refunded" for c in cases)
    assert len(live(ledger(desk.runtime))) == len(cases)
