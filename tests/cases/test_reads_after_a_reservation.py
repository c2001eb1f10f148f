"""After `reserve_in` in a transaction, the counts that depend on executions
(`facts.refundable`, the breaker's window in `breaker.over_limit`) see that reservation in the
same transaction: the reservation is written at the commit's flush, and those counts run on
the session's connection (`plain`), so they flush a pending execution first
(`flush_if_pending`). No caller counts after reserving in one transaction today; this keeps
the next one from over-refunding or under-counting the breaker."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import yaml
from sqlmodel import Session

from refund_desk.cases import breaker, facts
from refund_desk.cases.executor import reserve_in
from refund_desk.cases.ports import PaymentFacts
from refund_desk.governance.versions import load_version
from refund_desk.runtime import Runtime
from refund_desk.storage.db import lock_payment
from tests.cases.advance_common import advance_job, case_row
from tests.helpers import ACME, Harness


def _approved_case(desk: Harness, amount: str = "20.00") -> tuple[str, str]:
    """A case the policy approved automatically, its execute job not yet run."""
    runtime = desk.runtime
    runtime.desk.jobs_elsewhere = True
    payment = desk.payment("30.00")
    body = desk.post(desk.request(payment, amount)).json()
    job = runtime.desk.jobs.claim_one(advance_job(desk, body["id"]).id or 0)
    assert job is not None
    runtime.desk.jobs.run(job)  # advise + decide; the execute job waits (left to the sweeps)
    assert case_row(desk, body["id"]).status == "approved"
    return body["id"], payment


@pytest.fixture()
def desk(any_runtime: Runtime) -> Harness:
    harness = Harness(any_runtime)
    raw = yaml.safe_load(ACME.read_text())
    raw["breaker"] = {"max_refunds_per_hour": 1}
    harness.publish(yaml.safe_dump(raw, sort_keys=False))
    return harness


@contextmanager
def _reserved(desk: Harness) -> Iterator[tuple[Session, PaymentFacts, str]]:
    """An approved case's 20.00 reserved in a transaction left open (rolled back after)."""
    case_id, payment_id = _approved_case(desk)
    runtime = desk.runtime
    payment = runtime.desk.processor.payment(payment_id)
    with runtime.db.write() as session:
        lock_payment(session, payment_id)
        execution = reserve_in(runtime.desk, session, case_id, None, payment)
        assert execution is not None and execution.amount == 2000 and execution.automatic
        yield session, payment, case_id
        session.rollback()


def test_refundable_sees_a_reservation_made_earlier_in_the_transaction(desk: Harness) -> None:
    with _reserved(desk) as (session, payment, _):
        left = facts.refundable(session, payment).left
    assert left == 1000, f"30.00 captured, 20.00 just reserved: {left} minor units left"


def test_the_breakers_window_sees_a_reservation_made_earlier_in_the_transaction(
    desk: Harness,
) -> None:
    with _reserved(desk) as (session, _, case_id):
        policy = load_version(session, case_row(desk, case_id).policy_version or 0)
        why = breaker.over_limit(session, policy, 500, "USD")
    assert why is not None, "one automatic refund reserved, limit 1 an hour: one more is over"
