"""The model-based desk of tests/safety/test_stateful.py, on PostgreSQL, with a second
process (a second `Runtime` on the database) that files intakes, erases the customer, runs
the jobs as a job process does, and clicks the same button as the first process at the same
moment.

The base machine's invariants are checked after every step: money out per payment at most
what was captured, one refund per execution, every paid approval authorized, the audit chain
verifies; and at the end every case rests where someone hears of it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule
from sqlalchemy import func, select
from sqlmodel import col

from refund_desk import clock
from refund_desk.cases import approvals, tokens
from refund_desk.cases.errors import CaseError
from refund_desk.customers import erasure
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import Approval, Case
from tests.conftest import make_runtime
from tests.helpers import CUSTOMER, Harness, button_token
from tests.safety.test_stateful import (  # noqa: F401 - the fixture
    DEEP,
    DeskMachine,
    pg_factory,
    run_machine,
)

pytestmark = pytest.mark.postgres


class TwoProcesses(DeskMachine):
    def __init__(self) -> None:
        super().__init__()
        self.other: Runtime = make_runtime(self.runtime.settings.database_url)
        self.other_desk = Harness(self.other)

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            self.other.db.dispose()

    @rule(
        captured=st.sampled_from(["100.00", "900.00"]),
        amount=st.sampled_from(["20.00", "45.00", "400.00"]),
        again=st.booleans(),
        pick=st.integers(0, 10**6),
    )
    def intake_in_the_other_process(
        self, captured: str, amount: str, again: bool, pick: int
    ) -> None:
        if again and self.payments:
            payment = self.payments[pick % len(self.payments)]
        else:
            payment = self.desk.payment(captured)
            self.payments.append(payment)
        body = self.other_desk.request(payment, amount, reason="damaged")
        response = self._guard(lambda: self.other_desk.post(body))
        made = response is not None and response.status_code in (200, 201)
        if made and response.json()["id"] not in self.cases:
            self.cases.append(response.json()["id"])
        with self.runtime.db.read() as session:  # a power cut after the write: find it
            for case_id in session.scalars(select(col(Case.id))).all():
                if case_id not in self.cases:
                    self.cases.append(case_id)

    @rule()
    def erase_in_the_other_process(self) -> None:
        try:
            self._guard(
                lambda: erasure.erase_customer(
                    self.other.desk, CUSTOMER, actor=Actor("cli", "privacy"), evidence=None
                )
            )
        except CaseError:
            return
        vault = self.runtime.desk.vault
        with self.runtime.db.read() as session:
            for case in session.scalars(select(Case)).all():
                assert vault.decrypt(case.message_enc, session=session) is None, case.id

    @rule(ahead=st.sampled_from([0, 600, 3600, 3 * 86400]))
    def jobs_in_the_other_process(self, ahead: int) -> None:
        self._guard(
            lambda: self.other.desk.jobs.sweep(
                now=clock.now() + timedelta(seconds=ahead), max_batches=5
            )
        )

    @precondition(lambda self: self.cases)
    @rule(
        pick=st.integers(0, 10**6),
        action=st.sampled_from(["approve", "approve", "deny", "approve_partial"]),
        users=st.sampled_from(
            [
                ("U0LEAD1", "U0LEAD1"),
                ("U0LEAD1", "U0LEAD2"),
                ("U0FIN1", "U0FIN2"),
                ("U0MGR1", "U0FIN1"),
            ]
        ),
    )
    def same_button_twice_at_once(self, pick: int, action: str, users: tuple[str, str]) -> None:
        with self.runtime.db.read() as session:
            waiting = session.scalars(
                select(col(Case.id)).where(col(Case.status).in_(["awaiting_approval", "parked"]))
            ).all()
            pool = [c for c in self.cases if c in set(waiting)] or self.cases
            case = session.get(Case, pool[pick % len(pool)])
            assert case is not None
            value = button_token(self.runtime.desk, case, action)
        amount = "5.00" if action == "approve_partial" else None
        barrier = threading.Barrier(2)
        results: list[Any] = [None, None]

        def click(i: int, runtime: Runtime) -> None:
            barrier.wait(10)
            try:
                results[i] = approvals.act(
                    runtime.desk, token_value=value, user=users[i], amount=amount
                )
            except BaseException as exc:
                results[i] = exc

        ts = [
            threading.Thread(target=click, args=(0, self.runtime)),
            threading.Thread(target=click, args=(1, self.other)),
        ]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        self.used_tokens.append(value)
        decided = [r for r in results if isinstance(r, approvals.Outcome)]
        unexpected = [r for r in results if not isinstance(r, (approvals.Outcome, CaseError))]
        assert not unexpected, [repr(r)[:300] for r in unexpected]
        assert len(decided) <= 1, "one button decided twice"
        if decided:
            # the other click was refused: `already_decided` if it came second, or for a
            # reason of its own (not its group, ...) if it came first; never a decision
            with self.runtime.db.read() as session:
                used = session.scalar(
                    select(func.count())
                    .select_from(Approval)
                    .where(
                        col(Approval.token_nonce)
                        == tokens.verify(
                            self.runtime.desk.secret, value, now=self.runtime.desk.now()
                        ).nonce
                    )
                )
            assert used == 1
            for job in decided[0].jobs:
                self._guard(lambda job=job: self.runtime.desk.jobs.run_now(job))


def test_stateful_two_processes_keep_the_promises(pg_factory: Callable[[], str]) -> None:  # noqa: F811
    examples = 150 if DEEP else 12  # REFUND_DESK_DEEP=1: the larger run
    run_machine(pg_factory, examples=examples, steps=30, machine=TwoProcesses)
