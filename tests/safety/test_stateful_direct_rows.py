"""The project's stateful desk (tests/safety/test_stateful.py) with rules aimed at the direct
rows' two transactions: the kill switch or a fault landing between the decision's commit and
the payment, a stale second run of an advance job, a webhook racing a sweep in threads. The
machine's own invariants (money per payment and per case, exactly one refund per execution,
the basis of every refund, the audit chain) are checked after every step."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule
from sqlalchemy import select
from sqlmodel import col

from refund_desk.cases import decide, executor
from refund_desk.governance import admin
from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import Job, SandboxRefund
from tests.cases.advance_common import as_claimed
from tests.conftest import SimulatedCrash, fresh_sqlite
from tests.safety.test_stateful import DEEP, FAULTS, DeskMachine, run_machine


class DirectRowsMachine(DeskMachine):
    def _between_commit_and_pay(self, fn: Callable[[], None], post: Callable[[], Any]) -> Any:
        desk = self.runtime.desk
        original = desk.run_claimed

        def first(job: Any) -> None:
            with contextlib.suppress(Exception):
                fn()
            original(job)

        desk.run_claimed = first  # type: ignore[method-assign]
        try:
            return post()
        finally:
            desk.run_claimed = original  # type: ignore[method-assign]

    def _new_request(self, amount: str) -> None:
        self.request(0, True, "900.00", 0, amount, "damaged")

    @rule(amount=st.sampled_from(["20.00", "45.00"]))
    def pause_between_decision_and_payment(self, amount: str) -> None:
        def pause() -> None:
            with self.runtime.db.write() as session:
                admin.set_paused(
                    session, self.runtime.desk.audit, paused=True, actor=Actor("human", "U0LEAD1")
                )

        self._between_commit_and_pay(pause, lambda: self._new_request(amount))

    @rule(fault=st.sampled_from(FAULTS), amount=st.sampled_from(["20.00", "45.00"]))
    def fault_between_decision_and_payment(self, fault: str, amount: str) -> None:
        self._between_commit_and_pay(
            lambda: self.desk.sandbox.set_fault(fault, times=1), lambda: self._new_request(amount)
        )

    @rule(mode=st.sampled_from(["approve-all", "shadow"]))
    def mode_between_decision_and_payment(self, mode: str) -> None:
        def change() -> None:
            with self.runtime.db.write() as session:
                admin.set_mode(
                    session, self.runtime.desk.audit, mode=mode, actor=Actor("human", "U0LEAD1")
                )

        self._between_commit_and_pay(change, lambda: self._new_request("20.00"))

    @rule(pick=st.integers(0, 10**6))
    def stale_advance_rerun(self, pick: int) -> None:
        with self.runtime.db.read() as session:
            jobs = session.scalars(select(Job).where(col(Job.kind) == "advance")).all()
        if jobs:
            job = jobs[pick % len(jobs)]
            with contextlib.suppress(Exception):
                self._guard(lambda: decide.advance(self.runtime.desk, as_claimed(job)))

    @precondition(lambda self: self.cases)
    @rule(pick=st.integers(0, 10**6), ahead=st.sampled_from([30, 600, 3600]))
    def webhook_races_sweep(self, pick: int, ahead: int) -> None:
        with self.runtime.db.read() as session:
            rows = session.scalars(
                select(SandboxRefund).order_by(col(SandboxRefund.created_at))
            ).all()
            refunds = [SandboxProcessor._to_refund(r) for r in rows]
        errors: list[BaseException] = []

        def run(fn: Callable[[], Any]) -> None:
            try:
                fn()
            except SimulatedCrash:
                pass
            except BaseException as exc:
                errors.append(exc)

        work: list[Callable[[], Any]] = [lambda: self.desk.sweep(seconds_ahead=ahead, batches=5)]
        if refunds:
            refund = refunds[pick % len(refunds)]
            work += [lambda: executor.settle(self.runtime.desk, refund)] * 2
        threads = [threading.Thread(target=run, args=(w,), daemon=True) for w in work]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads), "stuck"
        assert not errors, errors


def _run(make: Callable[[], str], examples: int, steps: int) -> None:
    run_machine(make, examples=examples, steps=steps, machine=DirectRowsMachine, derandomize=False)


def test_stateful_direct_rows_sqlite(sqlite_template: Path, tmp_path: Path) -> None:
    _run(lambda: fresh_sqlite(sqlite_template, tmp_path), 250 if DEEP else 30, 50 if DEEP else 30)


@pytest.mark.postgres
def test_stateful_direct_rows_postgres(pg_template: str) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from tests.conftest import PG_URL, _counter

    admin_engine = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    made: list[str] = []

    def make() -> str:
        name = f"rd_rsm_{os.getpid()}_{next(_counter)}"
        with admin_engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"'))
        made.append(name)
        return make_url(PG_URL).set(database=name).render_as_string(hide_password=False)

    try:
        _run(make, 40 if DEEP else 6, 25)
    finally:
        with admin_engine.connect() as conn:
            for name in made:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin_engine.dispose()
