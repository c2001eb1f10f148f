"""Direct rows against the ORM under random programs: Hypothesis draws a program of intake,
clicks, faults, pauses, mode changes, sweeps and webhooks; it runs on two fresh databases,
with direct rows and without, and every case must end the same (rows, audit, jobs,
messages), the control row and the processor's ledger too. The money invariants are checked
on the direct-rows run."""

from __future__ import annotations

import contextlib
import os
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select, text
from sqlmodel import col

from refund_desk.cases import executor
from refund_desk.governance import admin
from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor, verify_chain
from refund_desk.storage.models import Case, Control, Execution, SandboxRefund
from tests.conftest import SimulatedCrash
from tests.direct_rows_helpers import (
    FOR_A_PERSON,
    before_execution,
    click,
    control_state,
    pause,
    same,
    state_of,
    without_direct_rows,
)
from tests.helpers import ACME, Harness

LEAD = "U0LEAD1"
DEEP = os.environ.get("REFUND_DESK_DEEP", "").lower() in ("1", "true", "yes")

op = st.one_of(
    st.tuples(st.just("request"), st.sampled_from(["auto", "review", "deny", "words", "risk"])),
    st.tuples(
        st.just("click"),
        st.integers(0, 50),
        st.sampled_from(["approve", "approve", "approve_partial", "deny"]),
        st.sampled_from(["5.00", "7.50", "19.99"]),
    ),
    st.tuples(
        st.just("fault"),
        st.sampled_from(
            ["timeout-after-success", "down", "decline", "crash-after-success", "none"]
        ),
        st.sampled_from([1, 2, None]),
    ),
    st.tuples(
        st.just("fault-at-pay"),
        st.sampled_from(["timeout-after-success", "down", "decline", "crash-after-success"]),
    ),
    st.tuples(st.just("pause-at-pay")),
    st.tuples(st.just("pause"), st.booleans()),
    st.tuples(st.just("mode"), st.sampled_from(["supervised", "approve-all", "shadow"])),
    st.tuples(st.just("sweep"), st.sampled_from([600, 3600, 7200])),
    st.tuples(st.just("webhook"), st.integers(0, 50)),
    st.tuples(st.just("breaker"), st.integers(1, 3)),
    st.tuples(st.just("advisor"), st.sampled_from(["local", "network", "failing"])),
    st.tuples(st.just("lease-rerun")),
    st.tuples(st.just("reconcile"), st.sampled_from([0, 3600])),
    st.tuples(st.just("erase"), st.integers(0, 50)),
    st.tuples(st.just("erase-at-pay")),
)


def _do(h: Harness, program: list[tuple[Any, ...]]) -> list[str]:
    cases: list[str] = []
    n = [0]
    rt = h.runtime
    real = rt.desk.advisor
    with rt.db.write() as session:
        session.connection().execute(text("UPDATE control SET review_sample_rate = 1.0"))

    def post(kind: str) -> None:
        n[0] += 1
        email = f"{kind}-{n[0]}@example.com"
        payment = h.payment(email=email, chargebacks=1 if kind == "risk" else 0)
        body = h.request(payment, email=email)
        if kind == "review":
            body["message"] = FOR_A_PERSON
        elif kind == "deny":
            body["amount"] = "40.00"
        elif kind == "words":
            body.pop("amount")
            body["message"] = "The vase arrived broken. Please refund 12.50 of it, I keep the rest."
        try:
            made = h.post(body)
            if made.status_code < 300:
                cases.append(str(made.json()["id"]))
                return
        except SimulatedCrash:
            pass
        with rt.db.read() as session:
            known = set(cases)
            for cid in session.scalars(select(Case.id).order_by(col(Case.created_at))).all():
                if cid not in known:
                    cases.append(str(cid))

    for step in program:
        kind = step[0]
        with contextlib.suppress(SimulatedCrash):
            if kind == "request":
                post(step[1])
            elif kind == "click" and cases:
                click(
                    h,
                    cases[step[1] % len(cases)],
                    step[2],
                    amount=step[3] if step[2] == "approve_partial" else None,
                )
            elif kind == "fault":
                h.sandbox.set_fault(step[1], times=step[2])
            elif kind == "fault-at-pay":
                with before_execution(h, lambda f=step[1]: h.sandbox.set_fault(f, times=1)):
                    post("auto")
            elif kind == "pause-at-pay":
                with before_execution(h, lambda: pause(h, True)):
                    post("auto")
            elif kind == "pause":
                with contextlib.suppress(Exception):
                    pause(h, step[1])
            elif kind == "mode":
                with contextlib.suppress(Exception), rt.db.write() as session:
                    admin.set_mode(session, rt.desk.audit, mode=step[1], actor=Actor("human", LEAD))
            elif kind == "sweep":
                h.sweep(step[1])
            elif kind == "webhook":
                with rt.db.read() as session:
                    rows = session.scalars(
                        select(SandboxRefund).order_by(col(SandboxRefund.created_at))
                    ).all()
                    refunds = [SandboxProcessor._to_refund(r) for r in rows]
                if refunds:
                    executor.settle(rt.desk, refunds[step[1] % len(refunds)])
            elif kind == "advisor":
                from tests.cases.advance_common import NetworkLike
                from tests.safety.test_stateful import FailingAdvisor

                rt.desk.advisor = {
                    "local": real,
                    "network": NetworkLike(),  # type: ignore[assignment]
                    "failing": FailingAdvisor(),
                }[step[1]]
            elif kind == "lease-rerun":
                # the last case's advance job run again, as a run whose lease ran out would
                from refund_desk.cases import decide
                from refund_desk.storage.models import Job
                from tests.cases.advance_common import as_claimed

                with rt.db.read() as session:
                    jobs = session.scalars(
                        select(Job).where(col(Job.kind) == "advance").order_by(col(Job.id).desc())
                    ).all()
                if jobs:
                    with contextlib.suppress(Exception):
                        decide.advance(rt.desk, as_claimed(jobs[0]))
            elif kind == "reconcile":
                from datetime import timedelta

                from refund_desk import clock
                from refund_desk.payments.reconcile import reconcile

                now = clock.now()
                with contextlib.suppress(Exception):
                    reconcile(
                        rt.desk,
                        since=now - timedelta(days=2),
                        until=now + timedelta(seconds=step[1]),
                    )
            elif kind == "erase" and cases:
                from refund_desk.customers import erasure

                with rt.db.read() as session:
                    case = session.get(Case, cases[step[1] % len(cases)])
                    assert case is not None
                    email = rt.desk.vault.decrypt(case.email_enc, session=session)
                if email:
                    with contextlib.suppress(Exception):
                        erasure.erase_customer(
                            rt.desk, email, actor=Actor("cli", "t"), evidence=None
                        )
            elif kind == "erase-at-pay":
                from refund_desk.customers import erasure

                email_box: list[str] = []

                def erase_now(email_box: list[str] = email_box) -> None:
                    with contextlib.suppress(Exception):
                        erasure.erase_customer(
                            rt.desk, email_box[0], actor=Actor("cli", "t"), evidence=None
                        )

                n[0] += 1
                email_box.append(f"erase-{n[0]}@example.com")
                payment = h.payment(email=email_box[0])
                with before_execution(h, erase_now):
                    made = h.post(h.request(payment, email=email_box[0]))
                if made.status_code < 300:
                    cases.append(str(made.json()["id"]))
            elif kind == "breaker":
                source = (
                    ACME.read_text()
                    .replace("max_refunds_per_hour: 200", f"max_refunds_per_hour: {step[1]}")
                    .replace("max_failures_in_row: 5", f"max_failures_in_row: {step[1] + 1}")
                )
                with contextlib.suppress(Exception):
                    h.publish(source)
    h.sandbox.set_fault("none")
    with contextlib.suppress(Exception):
        pause(h, False)
    for ahead in (600, 3600, 7200):
        with contextlib.suppress(SimulatedCrash):
            h.sweep(ahead)
    return cases


def _outcome(
    rt: Runtime, program: list[tuple[Any, ...]]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    try:
        return _outcome_of(rt, program)
    finally:
        rt.db.dispose()


def _outcome_of(
    rt: Runtime, program: list[tuple[Any, ...]]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    random.seed(1234)
    h = Harness(rt)
    h.publish()
    cases = _do(h, program)
    states = [state_of(rt.db, c) for c in cases]
    with rt.db.read() as session:
        control = session.get(Control, 1)
        assert control is not None
        ctl = control_state(control)
        refunds = session.scalars(select(SandboxRefund)).all()
        ledger = sorted((r.amount, r.status) for r in refunds)
        statuses = [session.get(Case, c).status for c in cases]  # type: ignore[union-attr]
        # invariants, checked on each run
        for c in cases:
            case = session.get(Case, c)
            assert case is not None
            execs = session.scalars(select(Execution).where(col(Execution.case_id) == c)).all()
            ok = [e for e in execs if e.status == "succeeded"]
            paid = [
                r for r in refunds if r.status == "succeeded" and r.payment_id == case.payment_id
            ]
            assert len(paid) <= 1, (c, case.status, [(r.amount, r.status) for r in paid])
            if case.status == "refunded":
                assert len(ok) == 1, (c, [(e.status, e.amount) for e in execs])
                assert len(paid) == 1 and paid[0].amount == ok[0].amount == case.amount
            else:
                assert sum(r.amount for r in paid) == sum(e.amount for e in ok) or case.status in (
                    "parked",
                    "executing",
                    "approved",
                ), (c, case.status)
        result = verify_chain(rt.desk.secret, session)
        assert result.ok, result
        n_exec = session.scalar(select(func.count()).select_from(Execution))
    return states, {"control": ctl, "ledger": ledger, "statuses": statuses, "executions": n_exec}


def test_random_programs_leave_what_the_orm_leaves(fresh_runtimes: Any) -> None:
    """`REFUND_DESK_DEEP=1` runs many more programs (as `test_stateful.py`)."""
    on_postgresql = fresh_runtimes.kind == "postgres"
    examples = (150 if DEEP else 8) if on_postgresql else (600 if DEEP else 40)

    @settings(
        max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(program=st.lists(op, min_size=3, max_size=18))
    def check(program: list[tuple[Any, ...]]) -> None:
        direct = _outcome(fresh_runtimes(), program)
        with pytest.MonkeyPatch.context() as patched:
            without_direct_rows(patched)
            through_orm = _outcome(fresh_runtimes(), program)
        assert direct[1] == through_orm[1], (direct[1], through_orm[1])
        for ours, theirs in zip(direct[0], through_orm[0], strict=True):
            same(ours, theirs)

    check()
