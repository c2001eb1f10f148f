"""`advance`'s two paths, on SQLite and PostgreSQL:
a processor failure records the advice once and retries or parks only an undecided case; a
run of an advance job whose lease ran out (its case already decided) changes nothing, with
the processor up or down; two cases on one payment never refund more than was captured."""

from __future__ import annotations

import pytest

from refund_desk.cases import decide
from tests.cases.advance_common import (
    CountingLocal,
    NetworkLike,
    advance_job,
    advisor_calls,
    as_claimed,
    case_row,
    executions,
)
from tests.helpers import Harness

PATHS = pytest.mark.parametrize("local", [True, False], ids=["local", "network"])


def _queued(desk: Harness, payment: str, amount: str = "20.00") -> str:
    """A case whose advance job waits for a sweep (the intake itself asks the processor)."""
    desk.runtime.desk.jobs_elsewhere = True
    body = desk.post(desk.request(payment, amount)).json()
    desk.runtime.desk.jobs_elsewhere = False
    return str(body["id"])


@PATHS
def test_a_processor_outage_keeps_the_advice_and_the_retry_refunds_once(
    desk: Harness, local: bool
) -> None:
    advisor = CountingLocal() if local else NetworkLike()
    desk.runtime.desk.advisor = advisor
    payment = desk.payment()
    case_id = _queued(desk, payment)
    desk.sandbox.set_fault("down", times=1)
    desk.sweep(batches=1)
    assert case_row(desk, case_id).status == "advised"  # advice kept, decision retried
    desk.sweep()
    assert case_row(desk, case_id).status == "refunded"
    assert len(desk.refunds_at_processor(payment)) == 1
    assert advisor.calls == 1 and advisor_calls(desk, case_id) == 1  # never asked twice


@PATHS
def test_a_processor_that_stays_down_parks_the_advised_case(desk: Harness, local: bool) -> None:
    desk.runtime.desk.advisor = CountingLocal() if local else NetworkLike()
    payment = desk.payment()
    case_id = _queued(desk, payment)
    desk.sandbox.set_fault("down")
    for _ in range(12):
        desk.sweep(seconds_ahead=24 * 3600)
    case = case_row(desk, case_id)
    assert case.status == "parked" and case.advice is not None
    assert "processor could not be asked" in (case.park_reason or "")
    assert executions(desk, case_id) == []


@PATHS
@pytest.mark.parametrize("amount", ["20.00", "900.00"], ids=["refunded", "awaiting"])
@pytest.mark.parametrize("processor", ["down", "none"])
def test_a_late_run_of_a_finished_advance_job_changes_nothing(
    desk: Harness, local: bool, amount: str, processor: str
) -> None:
    desk.runtime.desk.advisor = CountingLocal() if local else NetworkLike()
    payment = desk.payment("1000.00")
    body = desk.post(desk.request(payment, amount)).json()
    before = case_row(desk, body["id"])
    assert before.status in ("refunded", "awaiting_approval"), before.status
    job = advance_job(desk, body["id"])
    desk.sandbox.set_fault(processor)
    decide.advance(desk.runtime.desk, as_claimed(job))  # a run whose lease had run out
    desk.sandbox.set_fault("none")
    after = case_row(desk, body["id"])
    assert (after.status, after.revision) == (before.status, before.revision)
    assert len(executions(desk, body["id"])) == (1 if before.status == "refunded" else 0)
    assert len(desk.refunds_at_processor(payment)) == (1 if before.status == "refunded" else 0)


def test_two_cases_on_one_payment_never_refund_more_than_was_paid(desk: Harness) -> None:
    payment = desk.payment("30.00")
    first = _queued(desk, payment, "20.00")
    second = _queued(desk, payment, "15.00")
    desk.sweep()
    assert sum(r["amount"] for r in desk.refunds_at_processor(payment)) == 2000
    assert case_row(desk, first).status == "refunded"
    assert case_row(desk, second).status == "awaiting_approval"


def test_an_erased_customers_case_advised_locally_keeps_no_quote(desk: Harness) -> None:
    from refund_desk.customers import erasure
    from refund_desk.storage.audit import Actor
    from tests.helpers import CUSTOMER

    payment = desk.payment("30.00")
    desk.runtime.desk.jobs_elsewhere = True
    body = desk.post(desk.request(payment, "20.00", message="My zanzibar vase shattered")).json()
    desk.runtime.desk.jobs_elsewhere = False
    erasure.erase_customer(desk.runtime.desk, CUSTOMER, actor=Actor("cli", "t"), evidence=None)
    desk.sweep()
    case = case_row(desk, body["id"])
    assert case.status not in ("received", "advised")
    assert "zanzibar" not in str(case.advice)
