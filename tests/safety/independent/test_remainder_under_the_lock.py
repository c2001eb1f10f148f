"""Promise 2: the remainder is computed under the payment's lock from our record (every
execution that succeeded, is in flight or is reserved) and the processor's facts, each counted
once, never from a figure read before the lock; the desk never asks the processor for more
than is left (the sandbox would refuse it; `CreateWatch` catches the asking itself)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from refund_desk import clock
from refund_desk.cases import facts as case_facts
from refund_desk.runtime import Runtime
from tests.helpers import Harness, published
from tests.safety.independent.support import (
    FINANCE,
    LEAD,
    CreateWatch,
    case_money_breaks,
    case_row,
    click,
    exactly_once_breaks,
    ledger,
    live,
    two_processes,
)


@pytest.fixture()
def pair(any_db_url: str) -> Iterator[tuple[Harness, Runtime]]:
    with two_processes(any_db_url) as pair:
        yield pair


def _two_large_cases(desk: Harness) -> tuple[str, str, str]:
    """Two cases of 600 on one payment of 1000, each waiting for finance."""
    payment = desk.payment("1000.00")
    first = desk.post(desk.request(payment, "600.00")).json()
    second = desk.post(desk.request(payment, "600.00")).json()
    assert first["status"] == second["status"] == "awaiting_approval"
    return payment, first["id"], second["id"]


def test_another_case_paid_after_the_payment_read_counts(
    pair: tuple[Harness, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches: the reservation using the payment as read before the lock. Right after the
    execute job of case 1 read the payment (nothing refunded), another process pays case 2
    (600 of 1000); case 1 (600) must then be parked, never sent with only 400 left."""
    desk, b = pair
    watch = CreateWatch().watch(desk.runtime, b)
    _, one, two = _two_large_cases(desk)
    [job_one] = click(desk.runtime, one, "approve", FINANCE)
    [job_two] = click(desk.runtime, two, "approve", FINANCE)
    original = desk.sandbox.payment
    fired = {"n": 0}

    def payment(payment_id: str, **kw: Any) -> Any:
        facts = original(payment_id, **kw)
        if not fired["n"]:
            fired["n"] += 1
            assert b.desk.jobs.run_now(job_two)  # the other process pays case 2 in full
            assert case_row(b, two).status == "refunded"
        return facts

    monkeypatch.setattr(desk.sandbox, "payment", payment)
    desk.runtime.desk.jobs.run_now(job_one)
    assert fired["n"] == 1
    assert watch.over_asks() == []
    assert case_row(desk.runtime, one).status == "parked"
    assert [r.amount for r in live(ledger(desk.runtime))] == [60000]
    assert len(watch.calls) == 1


@pytest.mark.postgres
def test_a_reservation_under_the_lock_holds_off_another_case(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches: the payment's lock not covering the remainder (PostgreSQL, real concurrency).
    While case 1's reservation is inside its transaction, about to compute the remainder,
    another process runs case 2's execute job; whichever reserves second must see the first
    (reserved counts), so exactly one pays and nothing asks for more than is left."""
    with two_processes(pg_url) as (desk, b):
        a = desk.runtime
        watch = CreateWatch().watch(a, b)
        _, one, two = _two_large_cases(desk)
        [job_one] = click(a, one, "approve", FINANCE)
        [job_two] = click(a, two, "approve", FINANCE)
        original = case_facts.refundable
        other: dict[str, Any] = {}

        def refundable(*args: Any, **kw: Any) -> Any:
            if "thread" not in other and threading.current_thread() is threading.main_thread():
                other["thread"] = threading.Thread(
                    target=lambda: b.desk.jobs.run_now(job_two), daemon=True
                )
                other["thread"].start()
                other["thread"].join(1.5)  # it waits on the payment's lock held here
                other["blocked"] = other["thread"].is_alive()
            return original(*args, **kw)

        monkeypatch.setattr(case_facts, "refundable", refundable)
        a.desk.jobs.run_now(job_one)
        other["thread"].join(20)
        assert not other["thread"].is_alive()
        assert other["blocked"], "case 2's reservation did not wait for case 1's lock"
        desk.sweep()
        assert watch.over_asks() == []
        statuses = sorted([case_row(a, one).status, case_row(a, two).status])
        assert statuses == ["parked", "refunded"], statuses
        assert [r.amount for r in live(ledger(a))] == [60000]


def test_our_own_refund_is_counted_once(any_runtime: Runtime) -> None:
    """Catches: our succeeded refund counted twice (from our record and again from the
    processor's list). 10 of 30 refunded; a request for the other 20 is still refundable in
    full, so the policy approves it (a double count would deny it as over the refundable)."""
    desk = published(any_runtime)
    watch = CreateWatch().watch(any_runtime)
    payment = desk.payment("30.00")
    assert desk.post(desk.request(payment, "10.00")).json()["status"] == "refunded"
    second = desk.post(desk.request(payment, "20.00")).json()
    assert second["status"] == "refunded", second
    assert sum(r.amount for r in live(ledger(any_runtime))) == 3000
    assert watch.over_asks() == []


def test_a_reserved_refund_the_processor_already_has_is_counted_once(
    any_runtime: Runtime,
) -> None:
    """Catches: an execution still reserved in our record whose refund the processor already
    holds (timeout-after-success) counted twice. 20 of 30 is out that way; a second case for
    10 (a possible duplicate, so a person approves it) must still find 10 refundable."""
    desk = published(any_runtime)
    watch = CreateWatch().watch(any_runtime)
    payment = desk.payment("30.00")
    desk.sandbox.set_fault("timeout-after-success", times=1)
    first = desk.post(desk.request(payment, "20.00")).json()
    assert first["status"] == "executing"
    second = desk.post(desk.request(payment, "10.00")).json()
    assert second["status"] in ("parked", "awaiting_approval"), second
    assert second["status"] != "denied"
    for job in click(any_runtime, second["id"], "approve", LEAD):
        any_runtime.desk.jobs.run_now(job)
    desk.sweep()
    assert case_row(any_runtime, first["id"]).status == "refunded"
    assert case_row(any_runtime, second["id"]).status == "refunded"
    assert sum(r.amount for r in live(ledger(any_runtime))) == 3000
    assert watch.over_asks() == []
    assert case_money_breaks(any_runtime) == []


def test_a_partial_approval_above_what_is_left_never_reaches_the_processor(
    pair: tuple[Harness, Runtime],
) -> None:
    """Catches: a person's partial amount checked against a figure read before another case
    paid: two cases of 600 on 1000; case 2 is approved partially at 500 while case 1, paid in
    between, left only 400."""
    desk, b = pair
    watch = CreateWatch().watch(desk.runtime, b)
    _, one, two = _two_large_cases(desk)
    partial = click(desk.runtime, two, "approve_partial", FINANCE, amount="500.00")
    for job in click(desk.runtime, one, "approve", FINANCE):
        b.desk.jobs.run_now(job)
    for job in partial:
        desk.runtime.desk.jobs.run_now(job)
    desk.sweep()
    assert watch.over_asks() == []
    assert case_row(desk.runtime, one).status == "refunded"
    assert case_row(desk.runtime, two).status == "parked"
    assert sum(r.amount for r in live(ledger(desk.runtime))) == 60000


@pytest.mark.postgres
def test_two_replicas_paying_cases_of_one_payment_at_once(pg_url: str) -> None:
    """Catches: two replicas computing the remainder of one payment side by side (three cases
    of 600 on 1500, all approved, executed by two replicas at once): the money out must stay
    within the payment and no create may ask for more than is left."""
    with two_processes(pg_url, "replica-a") as (desk, b):
        a = desk.runtime
        watch = CreateWatch().watch(a, b)
        payment = desk.payment("1500.00")
        ids = [desk.post(desk.request(payment, "600.00")).json()["id"] for _ in range(3)]
        for case_id in ids:
            click(a, case_id, "approve", FINANCE)
        start = threading.Barrier(2)

        def run(rt: Runtime) -> None:
            start.wait()
            for i in range(4):
                rt.desk.jobs.sweep(now=clock.now() + timedelta(seconds=30 + 400 * i))
                time.sleep(0.01)

        threads = [threading.Thread(target=run, args=(rt,), daemon=True) for rt in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(40)
        desk.sweep(seconds_ahead=7200)
        assert watch.over_asks() == []
        assert exactly_once_breaks(a) == {}
        assert case_money_breaks(a) == []
        assert sum(r.amount for r in live(ledger(a))) == 120000
        assert sorted(case_row(a, c).status for c in ids) == ["parked", "refunded", "refunded"]
