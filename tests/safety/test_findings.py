"""Issue 13: each demonstrated finding, reproduced as it was found; each must now hold."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from refund_desk import clock
from refund_desk.cases import approvals
from refund_desk.cases.errors import InvalidRequest
from refund_desk.cases.ports import (
    PaymentFacts,
    ProcessorRefund,
    ProcessorUnavailable,
)
from refund_desk.governance.admin import rollback, set_mode, set_paused, set_second_lead
from refund_desk.governance.versions import control
from refund_desk.jobs.queue import JobQueue
from refund_desk.payments.reconcile import reconcile
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import Case, Execution, Job
from refund_desk.web.app import create_app
from tests.conftest import make_runtime
from tests.helpers import ACME, FailingAdvisor, Harness, button_token, published

# ---------------------------------------------------------------- finding 1: Socket Mode


@pytest.fixture()
def socket_mode_runtime(sqlite_url: str) -> Iterator[Runtime]:
    """Bot and app-level tokens, no signing secret, and a Slack that cannot be reached."""
    rt = make_runtime(
        sqlite_url,
        SLACK_BOT_TOKEN="xoxb-test",
        SLACK_APP_TOKEN="xapp-test",
        SLACK_API_URL="http://127.0.0.1:9/api/",  # nothing listens on the discard port
    )
    yield rt
    rt.db.dispose()


def test_finding_01_socket_mode_mounts_no_unsigned_http_route(
    socket_mode_runtime: Runtime,
) -> None:
    app = create_app(socket_mode_runtime, scheduler=False)
    with TestClient(app) as client:  # the lifespan runs: Socket Mode start-up must not block
        body = "command=%2Frefund-policy&text=pause&user_id=U0LEAD1"
        response = client.post(
            "/slack/events",
            content=body,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert response.status_code == 404, "no HTTP Slack route without a signing secret"
        health = client.get("/healthz")
        assert health.status_code == 200
        assert health.json()["slack"] in ("connecting", "retrying")


def test_finding_01_http_route_needs_a_signing_secret(sqlite_url: str) -> None:
    from refund_desk.bot.app import build_surface

    rt = make_runtime(sqlite_url, SLACK_BOT_TOKEN="xoxb-test", SLACK_SIGNING_SECRET="s" * 20)
    try:
        client = TestClient(create_app(rt, scheduler=False))
        unsigned = client.post(
            "/slack/events",
            content="command=%2Frefund-policy&text=pause&user_id=U0LEAD1",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert unsigned.status_code == 401, "mounted, and every request must be signed"
        assert client.get("/healthz").json() == {"status": "ok", "slack": "http"}
        surface = build_surface(rt.desk, rt.settings)
        assert surface is not None and surface.http
    finally:
        rt.db.dispose()


# ---------------------------------------------------------------- shared: a desk, clicks


def act_no_run(desk: Harness, case_id: str, action: str, user: str, **kw: str) -> approvals.Outcome:
    """A click as the Slack listener makes it, on the case's button as it is now."""
    rt = desk.runtime.desk
    with rt.db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None
        value = button_token(rt, case, action)
    return approvals.act(rt, token_value=value, user=user, **kw)


def act(desk: Harness, case_id: str, action: str, user: str, **kw: str) -> approvals.Outcome:
    """A click, with the follow-up jobs run at once."""
    outcome = act_no_run(desk, case_id, action, user, **kw)
    for job in outcome.jobs:
        desk.runtime.desk.jobs.run_now(job)
    return outcome


def parked_with_money_out(desk: Harness) -> tuple[str, str]:
    """A 400.00 case approved; the refund is made but the answer lost, then the processor is
    down until the case parks with its execution still reserved."""
    payment = desk.payment("900.00")
    body = desk.post(desk.request(payment, "400.00")).json()
    assert body["status"] == "awaiting_approval", body
    desk.sandbox.set_fault("timeout-after-success", times=1)
    act(desk, body["id"], "approve", "U0LEAD1")
    desk.sandbox.set_fault("down")
    for _ in range(12):
        desk.sweep(seconds_ahead=3600, batches=1)
    case = desk.get(body["id"])
    assert case["status"] == "parked", case["status"]
    assert [r["amount"] for r in desk.refunds_at_processor(payment)] == [40000]
    return body["id"], payment


def executions(desk: Harness, case_id: str) -> list[Execution]:
    with desk.runtime.db.read() as session:
        return list(session.scalars(select(Execution).where(Execution.case_id == case_id)).all())


# ---------------------------------------------------------------- findings 2 and 3


def test_finding_02_partial_approval_of_a_parked_case_never_pays_the_old_amount(
    desk: Harness,
) -> None:
    case_id, payment = parked_with_money_out(desk)
    with pytest.raises(approvals.Refused) as refused:
        act(desk, case_id, "approve_partial", "U0LEAD2", amount="50.00")
    assert refused.value.code == "execution_unresolved"
    desk.sandbox.set_fault("none")
    desk.sweep(seconds_ahead=3600)  # the look-up settles the reservation
    case = desk.get(case_id)
    assert case["status"] == "refunded"
    assert case["amount"] == "400.00"
    assert [r["amount"] for r in desk.refunds_at_processor(payment)] == [40000]
    [execution] = executions(desk, case_id)
    assert execution.status == "succeeded" and execution.amount == 40000


def test_finding_03_a_deny_waits_until_the_processor_says_whether_money_left(
    desk: Harness,
) -> None:
    case_id, payment = parked_with_money_out(desk)
    with pytest.raises(approvals.Refused) as refused:
        act(desk, case_id, "deny", "U0LEAD2")
    assert refused.value.code == "execution_unresolved"
    assert desk.get(case_id)["status"] == "parked"
    desk.sandbox.set_fault("none")
    desk.sweep(seconds_ahead=3600)
    case = desk.get(case_id)
    assert case["status"] == "refunded", "the money left: the record says so"
    assert len(desk.refunds_at_processor(payment)) == 1


def test_finding_03_a_reservation_with_no_refund_is_released_then_a_person_decides(
    desk: Harness,
) -> None:
    payment = desk.payment("900.00")
    body = desk.post(desk.request(payment, "400.00")).json()
    case_id = body["id"]
    outcome = act_no_run(desk, case_id, "approve", "U0LEAD1")
    # The reservation is written, then the processor goes down before the refund is made.
    real = desk.runtime.desk.processor.list_refunds

    def down(payment_id: str) -> list[ProcessorRefund]:
        raise ProcessorUnavailable("processor_unavailable", "down")

    desk.runtime.desk.processor.list_refunds = down  # type: ignore[method-assign]
    try:
        for job in outcome.jobs:
            desk.runtime.desk.jobs.run_now(job)
        for _ in range(12):
            desk.sweep(seconds_ahead=3600, batches=1)
    finally:
        desk.runtime.desk.processor.list_refunds = real  # type: ignore[method-assign]
    assert desk.get(case_id)["status"] == "parked"
    assert [e.status for e in executions(desk, case_id)] == ["reserved"]
    desk.sweep(seconds_ahead=3600)
    assert [e.status for e in executions(desk, case_id)] == ["failed"]  # released
    assert desk.refunds_at_processor(payment) == []
    act(desk, case_id, "approve_partial", "U0LEAD2", amount="50.00")
    desk.sweep(seconds_ahead=3600)
    assert desk.get(case_id)["status"] == "refunded"
    assert [r["amount"] for r in desk.refunds_at_processor(payment)] == [5000]


def test_finding_03_reconcile_resolves_reservations_older_than_the_lease(desk: Harness) -> None:
    case_id, payment = parked_with_money_out(desk)
    desk.sandbox.set_fault("none")
    with desk.runtime.db.write() as session:  # only reconcile may find it now
        for job in session.scalars(select(Job).where(Job.status == "pending")).all():
            if job.kind == "execute":
                session.delete(job)
    rt = desk.runtime.desk
    reconcile(rt, since=clock.now() - timedelta(days=1), until=clock.now() + timedelta(hours=2))
    assert desk.get(case_id)["status"] == "refunded"
    assert len(desk.refunds_at_processor(payment)) == 1


# ---------------------------------------------------------------- finding 4


def test_finding_04_an_advisor_failure_keeps_the_policys_tier_and_group(desk: Harness) -> None:
    desk.runtime.desk.advisor = FailingAdvisor()  # type: ignore[assignment]
    payment = desk.payment("900.00", chargebacks=1)  # risk-signal: tier 4, finance, two
    case_id = desk.post(desk.request(payment, "400.00")).json()["id"]
    case = desk.get(case_id)
    assert case["status"] in ("awaiting_approval", "parked")
    with pytest.raises(approvals.Refused) as refused:
        act(desk, case_id, "approve", "U0LEAD1")
    assert refused.value.code == "not_an_approver"
    act(desk, case_id, "approve", "U0FIN1")
    assert desk.get(case_id)["status"] in ("awaiting_approval", "parked")
    assert desk.refunds_at_processor(payment) == []
    act(desk, case_id, "approve", "U0FIN2")
    desk.sweep()
    assert desk.get(case_id)["status"] == "refunded"


def test_finding_04_unreadable_facts_route_to_the_strictest_tier_and_group(
    desk: Harness,
) -> None:
    payment = desk.payment("900.00")
    processor = desk.runtime.desk.processor
    real, calls = processor.payment, [0]

    def flaky(payment_id: str) -> PaymentFacts:
        calls[0] += 1
        if calls[0] > 1:  # intake could read it; the decision cannot
            raise ProcessorUnavailable("processor_unavailable", "down")
        return real(payment_id)

    processor.payment = flaky  # type: ignore[method-assign]
    try:
        case_id = desk.post(desk.request(payment, "400.00")).json()["id"]
        for _ in range(12):
            desk.sweep(seconds_ahead=3600, batches=1)
    finally:
        processor.payment = real  # type: ignore[method-assign]
    assert desk.get(case_id)["status"] == "parked"
    with pytest.raises(approvals.Refused) as refused:
        act(desk, case_id, "approve", "U0LEAD1")
    assert refused.value.code == "not_an_approver"
    act(desk, case_id, "approve", "U0FIN1")
    desk.sweep()
    assert desk.refunds_at_processor(payment) == [], "tier 4: one approver is not enough"
    act(desk, case_id, "approve", "U0FIN2")
    desk.sweep()
    assert desk.get(case_id)["status"] == "refunded"


# ---------------------------------------------------------------- finding 8


def test_finding_08_a_slow_processor_call_keeps_its_lease(runtime: Runtime) -> None:
    rt = runtime
    desk = published(rt)
    rt.desk.jobs.lease = timedelta(seconds=1)
    other = JobQueue(rt.db, owner="replica-b", lease_seconds=1)
    other.handlers = dict(rt.desk.jobs.handlers)
    real = desk.sandbox.create_refund

    def slow(**kw: Any) -> ProcessorRefund:
        time.sleep(2.5)
        return real(**kw)

    desk.sandbox.create_refund = slow  # type: ignore[method-assign]
    rt.desk.jobs_elsewhere = True
    payment = desk.payment("100.00")  # room for a second refund, were one made
    case_id = desk.post(desk.request(payment, "20.00")).json()["id"]
    with rt.db.read() as session:
        [advance] = [j.id for j in session.scalars(select(Job)).all() if j.kind == "advance"]
    rt.desk.jobs.run_now(advance)  # decided and approved; the refund job is queued
    with rt.db.read() as session:
        [job] = [j.id for j in session.scalars(select(Job)).all() if j.kind == "execute"]
    with rt.db.write() as session:  # due at once for any replica's sweep
        row = session.get(Job, job)
        assert row is not None
        row.due_at = clock.now() - timedelta(seconds=1)
    first = threading.Thread(target=rt.desk.jobs.run_now, args=(job,))
    first.start()
    time.sleep(1.6)  # the first worker's lease would have run out by now
    other.sweep(now=clock.now())
    first.join()
    other.sweep(now=clock.now())
    assert len(desk.refunds_at_processor(payment)) == 1
    assert desk.get(case_id)["status"] == "refunded"


def test_finding_08_the_sandbox_honours_idempotency_keys(desk: Harness) -> None:
    desk.sandbox.honour_idempotency_keys = True  # as the product runs it (tests turn it off)
    payment = desk.payment("30.00")
    made = [
        desk.sandbox.create_refund(
            payment_id=payment,
            amount=1000,
            currency="usd",
            idempotency_key="refund-desk-ex_same",
            metadata={"execution_id": "ex_same"},
        )
        for _ in range(2)
    ]
    assert made[0].id == made[1].id
    assert len(desk.refunds_at_processor(payment)) == 1


def test_finding_08_the_lease_outlives_the_processor_timeout(sqlite_url: str) -> None:
    rt = make_runtime(sqlite_url, REFUND_DESK_LEASE_SECONDS="0.5")
    assert rt.desk.jobs.lease.total_seconds() > rt.desk.processor.timeout_seconds
    rt.db.dispose()


# ---------------------------------------------------------------- finding 9


@pytest.mark.parametrize("mode", ["approve-all", "shadow"])
def test_finding_09_a_persons_approval_executes_in_every_mode(desk: Harness, mode: str) -> None:
    with desk.runtime.db.write() as session:
        set_mode(session, desk.runtime.desk.audit, mode=mode, actor=Actor("cli", "tests"))
    payment = desk.payment("30.00")
    case_id = desk.post(desk.request(payment, "20.00")).json()["id"]
    assert desk.get(case_id)["status"] == "awaiting_approval"
    act(desk, case_id, "approve", "U0LEAD1")
    desk.sweep()
    assert desk.get(case_id)["status"] == "refunded"
    assert len(desk.refunds_at_processor(payment)) == 1


# ---------------------------------------------------------------- finding 5

# The leads' limit, 500 in USD, made 50000 in JPY.
JPY = ACME.read_text().replace("currency: USD", "currency: JPY").replace("500}", "50000}")


def test_finding_05_limits_are_never_compared_across_currencies(desk: Harness) -> None:
    desk.publish(JPY)
    payment = desk.payment("900.00")
    case_id = desk.post(desk.request(payment, "400.00")).json()["id"]
    assert desk.get(case_id)["status"] == "awaiting_approval"
    with pytest.raises(approvals.Refused) as refused:
        act(desk, case_id, "approve", "U0LEAD1")
    assert refused.value.code == "over_limit"
    assert "JPY" in refused.value.message and "USD" in refused.value.message
    assert "50,000 USD" not in refused.value.message and "50000.00 USD" not in refused.value.message
    desk.sweep()
    assert desk.refunds_at_processor(payment) == []


def test_finding_05_a_policy_rate_converts_the_case_amount(desk: Harness) -> None:
    desk.publish(JPY + "rates: {USD: 150}\n")
    payment = desk.payment("900.00")
    big = desk.post(desk.request(payment, "400.00")).json()["id"]  # 60,000 JPY
    with pytest.raises(approvals.Refused) as refused:
        act(desk, big, "approve", "U0LEAD1")
    assert refused.value.message.startswith("Your approval limit is 50000 JPY")
    small = desk.post(desk.request(desk.payment("900.00"), "300.00")).json()["id"]  # 45,000
    act(desk, small, "approve", "U0LEAD1")
    desk.sweep()
    assert desk.get(small)["status"] == "refunded"


# ---------------------------------------------------------------- finding 6


def test_finding_06_governance_changes_need_a_second_lead(desk: Harness) -> None:
    desk.publish(ACME.read_text().replace("leads: [U0LEAD1]", "leads: [U0LEAD1, U0LEAD2]"))
    audit = desk.runtime.desk.audit
    one, two = Actor("human", "U0LEAD1"), Actor("human", "U0LEAD2")

    def run(fn: Any, actor: Actor, **kw: Any) -> Any:
        with desk.runtime.db.write() as session:
            return fn(session, audit, actor=actor, **kw)

    def switches() -> Any:
        with desk.runtime.db.read() as session:
            row = control(session)
            return row.publish_needs_second_lead, row.mode, row.active_version

    run(set_second_lead, Actor("cli", "admin"), on=True)
    run(set_second_lead, one, on=False)  # a request only
    assert switches()[0] is True
    with pytest.raises(InvalidRequest) as again:
        run(set_second_lead, one, on=False)
    assert again.value.code == "second_lead_needed"
    run(set_mode, one, mode="approve-all")
    assert switches()[1] == "supervised"
    run(set_mode, two, mode="approve-all")  # confirmed by a different lead
    assert switches()[1] == "approve-all"
    run(rollback, one, version=1)
    assert switches()[2] == 2
    run(set_paused, one, paused=True)  # the one-lead emergency lever stays
    with desk.runtime.db.read() as session:
        assert control(session).paused
    run(set_second_lead, two, on=False)
    assert switches()[0] is False
