"""Exactly once under faults: timeouts after success, crashes after success, declines, outages."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from refund_desk.storage.models import Control, Execution, Job
from tests.conftest import SimulatedCrash
from tests.helpers import Harness


def _executions(desk: Harness, case_id: str) -> list[Execution]:
    with desk.runtime.db.read() as session:
        return list(session.scalars(select(Execution).where(Execution.case_id == case_id)).all())


def _pause(desk: Harness, paused: bool) -> None:
    with desk.runtime.db.write() as session:
        switches = session.get(Control, 1)
        assert switches is not None
        switches.paused = paused
        session.add(switches)


def test_timeout_after_success_ends_with_one_refund(desk: Harness) -> None:
    payment = desk.payment("30.00")
    desk.sandbox.set_fault("timeout-after-success", times=1)
    body = desk.post(desk.request(payment, "20.00")).json()
    assert body["status"] == "executing"  # the outcome is unknown; the job will look it up
    assert len(desk.refunds_at_processor(payment)) == 1
    assert desk.sweep() >= 1
    case = desk.get(body["id"])
    assert case["status"] == "refunded"
    assert len(desk.refunds_at_processor(payment)) == 1
    [execution] = _executions(desk, body["id"])
    assert execution.status == "succeeded"
    assert execution.idempotency_key.endswith(execution.id)


def test_crash_after_success_then_restart_ends_with_one_refund(desk: Harness) -> None:
    payment = desk.payment("30.00")
    desk.sandbox.set_fault("crash-after-success", times=1)
    with pytest.raises(SimulatedCrash):
        desk.post(desk.request(payment, "20.00"))
    assert len(desk.refunds_at_processor(payment)) == 1
    [case_id] = {r["metadata"]["case_id"] for r in desk.refunds_at_processor(payment)}
    # The crashed process held the lease; it expires, and the next sweep resumes at phase 2.
    desk.runtime.desk.jobs.sweep()
    assert desk.get(case_id)["status"] == "executing", "a live lease is not taken over"
    desk.sweep(seconds_ahead=3600)
    with desk.runtime.db.read() as session:
        jobs = session.scalars(select(Job)).all()
        assert {j.status for j in jobs} == {"done"}
    assert desk.get(case_id)["status"] == "refunded"
    assert len(desk.refunds_at_processor(payment)) == 1


def test_decline_parks_the_case_with_the_error(desk: Harness) -> None:
    payment = desk.payment("30.00")
    desk.sandbox.set_fault("decline", times=1)
    body = desk.post(desk.request(payment, "20.00")).json()
    case = desk.get(body["id"])
    assert case["status"] == "parked"
    assert "declined" in case["park_reason"]
    actions = [r["action"] for r in case["audit"]]
    # an API request without a callback: the customer's message is recorded with the change
    assert actions[-3:] == ["execution.failed", "case.parked", "customer.told"]
    assert desk.refunds_at_processor(payment) == []
    [execution] = _executions(desk, body["id"])
    assert execution.status == "failed" and execution.error_code == "refund_declined"


def test_intake_refuses_while_the_processor_is_down(desk: Harness) -> None:
    payment = desk.payment("30.00")
    before = desk.counts()
    desk.sandbox.set_fault("down", times=1)
    response = desk.post(desk.request(payment, "20.00"))
    assert response.status_code == 503  # intake could not see the payment: nothing written
    assert response.headers["Retry-After"] == "30"  # the client knows to send it again
    assert response.json()["error"]["code"] == "processor_unavailable"
    assert desk.counts() == before
    assert desk.post(desk.request(payment, "20.00")).json()["status"] == "refunded"


def test_processor_down_retries_with_backoff_then_succeeds(desk: Harness) -> None:
    desk.runtime.desk.jobs_elsewhere = True  # let the sweeps do the work, step by step
    payment = desk.payment("30.00")
    body = desk.post(desk.request(payment, "20.00")).json()
    assert body["status"] == "received"
    desk.sandbox.set_fault("down", times=1)  # the decision meets an outage ...
    desk.sweep(batches=1)
    assert desk.get(body["id"])["status"] == "advised"
    desk.sweep(batches=1)
    assert desk.get(body["id"])["status"] == "approved"
    desk.sandbox.set_fault("down", times=2)  # ... and then the execution, twice
    for _ in range(2):
        desk.sweep(batches=1)
        assert desk.get(body["id"])["status"] == "approved"
    assert desk.refunds_at_processor(payment) == []
    desk.sweep(batches=1)
    case = desk.get(body["id"])
    assert case["status"] == "refunded"
    assert len(desk.refunds_at_processor(payment)) == 1
    with desk.runtime.db.read() as session:
        [job] = [j for j in session.scalars(select(Job)).all() if j.kind == "execute"]
        assert job.status == "done" and job.attempt == 3 and job.failures == 2
        assert "processor_unavailable" in (job.last_error or "")


def test_processor_down_too_long_parks(desk: Harness) -> None:
    payment = desk.payment("900.00")
    body = desk.post(desk.request(payment, "600.00")).json()
    assert body["status"] == "awaiting_approval"
    # Approved by a person (the Slack path does this through the same two calls).
    with desk.runtime.db.write() as session:
        from refund_desk.cases.lifecycle import Status, move
        from refund_desk.cases.rows import load_for_update
        from refund_desk.jobs.queue import enqueue
        from refund_desk.storage.audit import Actor

        case = load_for_update(session, body["id"])
        move(session, desk.runtime.desk.audit, case, Status.approved, actor=Actor("human", "U1"))
        enqueue(session, kind="execute", payload={"case_id": case.id, "revision": case.revision})
    desk.sandbox.set_fault("down")
    for _ in range(12):
        desk.sweep(batches=1)
    case = desk.get(body["id"])
    assert case["status"] == "parked"
    assert "processor" in case["park_reason"]
    desk.sandbox.set_fault("none")
    assert desk.refunds_at_processor(payment) == []


def test_kill_switch_holds_execution_until_resumed(desk: Harness) -> None:
    _pause(desk, True)
    payment = desk.payment("30.00")
    body = desk.post(desk.request(payment, "20.00")).json()
    assert body["status"] == "approved"
    desk.sweep()
    assert desk.refunds_at_processor(payment) == []
    _pause(desk, False)
    desk.sweep()
    assert desk.get(body["id"])["status"] == "refunded"
    assert len(desk.refunds_at_processor(payment)) == 1


def test_recheck_parks_when_refundable_shrank(desk: Harness) -> None:
    payment = desk.payment("30.00")
    _pause(desk, True)
    body = desk.post(desk.request(payment, "20.00")).json()
    assert body["status"] == "approved"
    # Meanwhile someone refunds 15.00 outside Refund Desk, straight at the processor.
    desk.sandbox.create_refund(
        payment_id=payment, amount=1500, currency="usd", idempotency_key="outside", metadata={}
    )
    _pause(desk, False)
    desk.sweep()
    case = desk.get(body["id"])
    assert case["status"] == "parked"
    assert "still refundable" in case["park_reason"]
    assert len(desk.refunds_at_processor(payment)) == 1  # only the outside one


def test_one_approval_queues_one_execution(desk: Harness) -> None:
    from sqlalchemy.exc import IntegrityError

    from refund_desk.cases.executor import enqueue_execution
    from refund_desk.storage.models import Case

    payment = desk.payment("900.00")
    body = desk.post(desk.request(payment, "600.00")).json()
    with desk.runtime.db.write() as session:
        case = session.get(Case, body["id"])
        assert case is not None
        enqueue_execution(session, case)
    with pytest.raises(IntegrityError), desk.runtime.db.write() as session:
        case = session.get(Case, body["id"])
        assert case is not None
        enqueue_execution(session, case)


def test_a_reserved_refund_answered_after_the_case_was_parked_is_recorded_once(
    desk: Harness,
) -> None:
    """Timeout after success, then the processor stays down: parked with a reservation.
    A person approves again once it is back; the lookup finds the refund and records it."""
    from refund_desk.cases.executor import enqueue_execution
    from refund_desk.cases.lifecycle import Status, move
    from refund_desk.cases.rows import load_for_update
    from refund_desk.storage.audit import Actor

    payment = desk.payment("30.00")
    desk.sandbox.set_fault("timeout-after-success", times=1)
    body = desk.post(desk.request(payment, "20.00")).json()
    assert body["status"] == "executing"
    desk.sandbox.set_fault("down")
    for _ in range(10):
        desk.sweep(batches=1)
    assert desk.get(body["id"])["status"] == "parked"
    desk.sandbox.set_fault("none")
    with desk.runtime.db.write() as session:
        case = load_for_update(session, body["id"])
        move(session, desk.runtime.desk.audit, case, Status.approved, actor=Actor("human", "U1"))
        enqueue_execution(session, case)
    desk.sweep()
    case = desk.get(body["id"])
    assert case["status"] == "refunded"
    assert len(desk.refunds_at_processor(payment)) == 1
    assert [r["status"] for r in case["refunds"]] == ["succeeded"]
