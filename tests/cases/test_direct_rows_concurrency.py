"""Direct rows under concurrency, on PostgreSQL (and SQLite where it applies): exactly once
with concurrent recorders, the lock order of the hot transactions, an erasure beside an
advance."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlmodel import col

from refund_desk.cases import decide, executor
from refund_desk.customers import erasure
from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor, verify_chain
from refund_desk.storage.models import AuditRecord, Case, CustomerMessage, Execution, SandboxRefund
from tests.cases.advance_common import (
    advance_job,
    as_claimed,
    meet_after_the_processor,
    together,
)
from tests.conftest import SimulatedCrash, make_runtime
from tests.helpers import CUSTOMER, Harness


def _invariants(h: Harness, case_id: str, payment: str) -> None:
    rt = h.runtime
    with rt.db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None
        execs = session.scalars(select(Execution).where(col(Execution.case_id) == case_id)).all()
        succeeded = [e for e in execs if e.status == "succeeded"]
        refunds = [
            r
            for r in h.refunds_at_processor(payment)
            if (r.get("metadata") or {}).get("case_id") == case_id
        ]
        ok = [r for r in refunds if r["status"] == "succeeded"]
        assert sum(r["amount"] for r in ok) <= case.amount
        assert len(ok) <= 1, refunds
        if case.status == "refunded":
            assert len(succeeded) == 1, [(e.id, e.status) for e in execs]
            assert len(ok) == 1
        audits = session.scalars(
            select(AuditRecord.action).where(col(AuditRecord.case_id) == case_id)
        ).all()
        assert audits.count("execution.succeeded") <= 1, audits
        msgs = session.scalars(
            select(CustomerMessage.case_status).where(col(CustomerMessage.case_id) == case_id)
        ).all()
        assert msgs.count("refunded") <= 1, msgs
        result = verify_chain(rt.desk.secret, session)
        assert result.ok, result


@pytest.fixture()
def two(any_db_url: str) -> Iterator[list[Harness]]:
    runtimes = [make_runtime(any_db_url) for _ in range(2)]
    yield [Harness(rt) for rt in runtimes]
    for rt in runtimes:
        rt.db.dispose()


def test_webhooks_and_the_job_record_one_refund_at_once(two: list[Harness]) -> None:
    a, b = two
    a.publish()
    a.sandbox.set_fault("timeout-after-success", times=1)
    payment = a.payment()
    case_id = a.post(a.request(payment)).json()["id"]
    with a.runtime.db.read() as session:
        assert session.get(Case, case_id).status == "executing"  # type: ignore[union-attr]
        rows = session.scalars(select(SandboxRefund)).all()
        refunds = [SandboxProcessor._to_refund(r) for r in rows]
    assert len(refunds) == 1
    refund = refunds[0]
    barrier = threading.Barrier(4)

    def webhook(h: Harness) -> None:
        barrier.wait(10)
        executor.settle(h.runtime.desk, refund)

    def sweep(h: Harness) -> None:
        barrier.wait(10)
        h.sweep(3600)

    errors = together([lambda: webhook(a), lambda: webhook(b), lambda: sweep(a), lambda: sweep(b)])
    errors = [e for e in errors if not isinstance(e, SimulatedCrash)]
    assert not errors, errors
    a.sweep(7200)
    with a.runtime.db.read() as session:
        assert session.get(Case, case_id).status == "refunded"  # type: ignore[union-attr]
    _invariants(a, case_id, payment)


def test_the_same_advance_job_twice_while_a_click_pauses(two: list[Harness]) -> None:
    """Two runs of one advance job (a lease ran out), and the kill switch turned on at once:
    at most one refund, and none if the pause committed before the refund's reservation."""
    from refund_desk.governance import admin

    a, b = two
    a.publish()
    a.runtime.desk.run_inline = False
    payment = a.payment()
    case_id = a.post(a.request(payment)).json()["id"]
    job = advance_job(a, case_id)
    a.runtime.desk.run_inline = True
    barrier = threading.Barrier(3)

    def run(h: Harness) -> None:
        barrier.wait(10)
        decide.advance(h.runtime.desk, as_claimed(job))

    def pause() -> None:
        barrier.wait(10)
        with a.runtime.db.write() as session:
            admin.set_paused(
                session, a.runtime.desk.audit, paused=True, actor=Actor("human", "U0LEAD1")
            )

    errors = together([lambda: run(a), lambda: run(b), pause])
    assert not [e for e in errors if not isinstance(e, SimulatedCrash)], errors
    _invariants(a, case_id, payment)
    with a.runtime.db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None
        paused_at = session.scalar(
            select(AuditRecord.seq).where(col(AuditRecord.action) == "policy.paused")
        )
        paid_at = session.scalar(
            select(AuditRecord.seq).where(col(AuditRecord.action) == "execution.succeeded")
        )
    if paid_at is not None and paused_at is not None:
        # paid after the pause's record: allowed only if reserved before it
        reserved_at = None
        with a.runtime.db.read() as session:
            reserved_at = session.scalar(
                select(AuditRecord.seq).where(col(AuditRecord.action) == "execution.reserved")
            )
        assert (reserved_at is not None and reserved_at < paused_at) or paid_at < paused_at


@pytest.mark.postgres
def test_lock_order_in_the_advance_transaction(pg_url: str) -> None:
    rt = make_runtime(pg_url)
    try:
        h = Harness(rt)
        h.publish()
        rt.desk.run_inline = False
        payment = h.payment()
        case_id = h.post(h.request(payment)).json()["id"]
        job = advance_job(h, case_id)
        rt.desk.run_inline = True
        seen: list[tuple[int, str]] = []

        def catch(conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
            seen.append((id(conn), " ".join(sql.split())))

        event.listen(rt.db.engine, "before_cursor_execute", catch)
        try:
            decide.advance(rt.desk, as_claimed(job))
        finally:
            event.remove(rt.db.engine, "before_cursor_execute", catch)
        statements = [s for _, s in seen]
        # split into transactions at COMMIT is not visible here; use lock statements in order
        locks = [
            (
                "payment"
                if re.search(r"FROM payments\b", s)
                else "key"
                if re.search(r"FROM customer_keys\b", s)
                else "case"
                if re.search(r"FROM cases\b", s)
                else "control"
                if re.search(r"FROM control\b", s)
                else "other",
                s,
            )
            for s in statements
            if "FOR UPDATE" in s or "FOR SHARE" in s or "FOR NO KEY" in s
        ]
        kinds = [k for k, _ in locks]
        assert "case" in kinds, statements
        first_case = kinds.index("case")
        assert "payment" in kinds[:first_case], kinds
        assert "key" in kinds[:first_case], kinds
        assert kinds.index("payment") < kinds.index("key") < first_case, kinds
        with rt.db.read() as session:
            assert session.get(Case, case_id).status == "refunded"  # type: ignore[union-attr]
        # the record transaction locks the case too
        assert kinds.count("case") >= 2, kinds
    finally:
        rt.db.dispose()


@pytest.mark.postgres
def test_erasure_beside_advance_neither_deadlocks_nor_leaves_words(pg_url: str) -> None:
    runtimes = [make_runtime(pg_url) for _ in range(2)]
    try:
        a, b = (Harness(rt) for rt in runtimes)
        a.publish()
        for round_ in range(4):
            a.runtime.desk.run_inline = False
            payment = a.payment()
            case_id = a.post(a.request(payment)).json()["id"]
            job = advance_job(a, case_id)
            a.runtime.desk.run_inline = True
            barrier = threading.Barrier(2)

            def run(barrier: threading.Barrier = barrier, job: Any = job) -> None:
                barrier.wait(10)
                decide.advance(a.runtime.desk, as_claimed(job))

            def erase(barrier: threading.Barrier = barrier, round_: int = round_) -> None:
                barrier.wait(10)
                if round_ % 2:
                    time.sleep(0.005 * round_)
                erasure.erase_customer(
                    b.runtime.desk, CUSTOMER, actor=Actor("cli", "t"), evidence=None
                )

            errors = together([run, erase], timeout=60)
            errors = [e for e in errors if "customer_not_found" not in repr(e)]
            assert not errors, errors
            # erase once more after (as a retry would: it succeeds); then nothing of theirs
            # reads back
            erasure.erase_customer(b.runtime.desk, CUSTOMER, actor=Actor("cli", "t"), evidence=None)
            with a.runtime.db.read() as session:
                for case in session.scalars(select(Case)).all():
                    vault = a.runtime.desk.vault
                    assert vault.decrypt(case.message_enc, session=session) is None, case.id
                    assert vault.decrypt(case.email_enc, session=session) is None, case.id
                    summary = (case.advice or {}).get("summary")
                    if summary:
                        from refund_desk.cases import advisory

                        text_ = advisory.summary_text(vault, case.advice, session=session)
                        assert "vase" not in text_.lower(), (case.id, text_)
                result = verify_chain(a.runtime.desk.secret, session)
                assert result.ok
    finally:
        for rt in runtimes:
            rt.db.dispose()


def test_execute_job_rerun_while_first_run_waits_on_the_processor(two: list[Harness]) -> None:
    """A person approves; the execute job's first run is inside the processor call (the
    refund made, its answer not back) when a second run takes the job over (lease ran out in
    the sweep's clock). Exactly one refund, one succeeded execution, case refunded."""
    a, b = two
    a.publish()
    payment = a.payment()
    body = a.request(payment, message="I changed my mind about the colour, please take it back.")
    case_id = a.post(body).json()["id"]
    from tests.direct_rows_helpers import click

    made = threading.Event()
    go = threading.Event()
    create = a.sandbox.create_refund

    def slow_create(**kw: Any) -> Any:
        refund = create(**kw)
        made.set()
        go.wait(20)
        return refund

    a.sandbox.create_refund = slow_create  # type: ignore[method-assign]

    def first() -> None:
        click(a, case_id, "approve")

    def second() -> None:
        made.wait(20)
        try:
            b.sweep(3 * 3600)
        finally:
            go.set()

    errors = together([first, second])
    assert not [e for e in errors if not isinstance(e, SimulatedCrash)], errors
    a.sandbox.create_refund = create  # type: ignore[method-assign]
    a.sweep(4 * 3600)
    with a.runtime.db.read() as session:
        assert session.get(Case, case_id).status == "refunded"  # type: ignore[union-attr]
    _invariants(a, case_id, payment)


def _lock_kinds(rt: Runtime, fn: Any) -> list[str]:
    seen: list[str] = []

    def catch(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        seen.append(" ".join(sql.split()))

    event.listen(rt.db.engine, "before_cursor_execute", catch)
    try:
        fn()
    finally:
        event.remove(rt.db.engine, "before_cursor_execute", catch)
    kinds = []
    for s in seen:
        if s.startswith("COMMIT") or s == "COMMIT":
            kinds.append("commit")
        elif "FOR UPDATE" in s or "FOR SHARE" in s:
            kinds.append(
                "payment"
                if re.search(r"FROM payments\b", s)
                else "key"
                if re.search(r"FROM customer_keys\b", s)
                else "case"
                if re.search(r"FROM cases\b", s)
                else "control"
                if re.search(r"FROM control\b", s)
                else "other"
            )
    return kinds


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["direct", "orm"])
def test_lock_order_when_the_advice_was_recorded_by_an_earlier_run(
    pg_url: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The advance transaction's locks in order on the retry of an advance whose first run
    recorded the advice (network advisor, processor unavailable at first): the payment first,
    then the case; the customer's key is not needed (no advice is sealed under it) and, if
    ever held, never after the case."""
    from refund_desk.cases.ports import ProcessorUnavailable
    from refund_desk.storage.jobs import RetryLater
    from tests.cases.advance_common import NetworkLike
    from tests.direct_rows_helpers import without_direct_rows

    if mode == "orm":
        without_direct_rows(monkeypatch)
    rt = make_runtime(pg_url)
    try:
        h = Harness(rt)
        h.publish()
        rt.desk.advisor = NetworkLike()  # type: ignore[assignment]
        rt.desk.run_inline = False
        payment = h.payment()
        case_id = h.post(h.request(payment)).json()["id"]
        job = advance_job(h, case_id)
        rt.desk.run_inline = True
        real = rt.desk.processor.payment
        calls = [0]

        def flaky(payment_id: str, **kw: Any) -> Any:
            calls[0] += 1
            if calls[0] == 1:
                raise ProcessorUnavailable("processor_unavailable", "down for a moment")
            return real(payment_id, **kw)

        rt.desk.processor.payment = flaky  # type: ignore[method-assign]
        with pytest.raises(RetryLater):
            decide.advance(rt.desk, as_claimed(job))
        with rt.db.read() as session:
            assert session.get(Case, case_id).status == "advised"  # type: ignore[union-attr]
        kinds = _lock_kinds(rt, lambda: decide.advance(rt.desk, as_claimed(job)))
        first_txn = kinds[: kinds.index("commit")] if "commit" in kinds else kinds
        assert "case" in first_txn, kinds
        at_case = first_txn.index("case")
        assert first_txn[0] == "payment", kinds
        assert "key" not in first_txn[at_case:], (first_txn, kinds)
    finally:
        rt.db.dispose()


@pytest.mark.postgres
def test_click_and_record_on_an_open_reservation_at_once(pg_url: str) -> None:
    """A person re-approves (same amount, and a partial) while the job records the refund of
    the reservation made for the first approval: money out never exceeds one approval."""
    runtimes = [make_runtime(pg_url) for _ in range(3)]
    try:
        a, b, c = (Harness(rt) for rt in runtimes)
        a.publish()
        from tests.direct_rows_helpers import click

        payment = a.payment()
        body = a.request(
            payment, message="I changed my mind about the colour, please take it back."
        )
        case_id = a.post(body).json()["id"]
        a.sandbox.set_fault("timeout-after-success", times=1)
        click(a, case_id, "approve")
        with a.runtime.db.read() as session:
            assert session.get(Case, case_id).status == "executing"  # type: ignore[union-attr]
            refunds = [
                SandboxProcessor._to_refund(r) for r in session.scalars(select(SandboxRefund)).all()
            ]
        barrier = threading.Barrier(3)

        def record() -> None:
            barrier.wait(10)
            executor.settle(a.runtime.desk, refunds[0])

        def click_same() -> None:
            barrier.wait(10)
            click(b, case_id, "approve", user="U0LEAD2")

        def click_partial() -> None:
            barrier.wait(10)
            click(c, case_id, "approve_partial", user="U0LEAD2", amount="5.00")

        errors = together([record, click_same, click_partial])
        assert not [e for e in errors if not isinstance(e, SimulatedCrash)], errors
        a.sweep(3600)
        a.sweep(7200)
        _invariants(a, case_id, payment)
        paid = [r for r in a.refunds_at_processor(payment) if r["status"] == "succeeded"]
        assert sum(r["amount"] for r in paid) <= 2000
    finally:
        for rt in runtimes:
            rt.db.dispose()


def test_one_advance_job_run_twice_at_once_pays_once(two: list[Harness]) -> None:
    """Both runs leave the processor's payment look-up together and race for the decision's
    transaction (SQLite: its one writer; PostgreSQL: the payment's and the case's locks)."""
    a, b = two
    a.publish()
    a.runtime.desk.run_inline = False
    payment = a.payment()
    case_id = a.post(a.request(payment)).json()["id"]
    job = advance_job(a, case_id)
    a.runtime.desk.run_inline = True
    meet_after_the_processor([a, b])
    errors = together([lambda h=h: decide.advance(h.runtime.desk, as_claimed(job)) for h in (a, b)])
    assert not [e for e in errors if not isinstance(e, SimulatedCrash)], errors
    with a.runtime.db.read() as session:
        assert session.get(Case, case_id).status == "refunded"  # type: ignore[union-attr]
    assert len(a.refunds_at_processor(payment)) == 1
    _invariants(a, case_id, payment)


def test_two_cases_on_one_payment_at_once_never_over_refund(two: list[Harness]) -> None:
    a, b = two
    a.publish()
    a.runtime.desk.run_inline = False
    payment = a.payment("30.00")
    ids = [a.post(a.request(payment, amt)).json()["id"] for amt in ("20.00", "15.00")]
    jobs = [advance_job(a, i) for i in ids]
    a.runtime.desk.run_inline = True
    meet_after_the_processor([a, b])
    errors = together(
        [
            lambda h=h, j=j: decide.advance(h.runtime.desk, as_claimed(j))
            for h, j in zip((a, b), jobs, strict=True)
        ]
    )
    assert not [e for e in errors if not isinstance(e, SimulatedCrash)], errors
    paid = [r for r in a.refunds_at_processor(payment) if r["status"] == "succeeded"]
    assert sum(r["amount"] for r in paid) <= 3000
    for i in ids:
        _invariants(a, i, payment)
