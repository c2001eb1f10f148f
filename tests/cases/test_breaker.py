"""The circuit breaker stops automatic refunds, tells the leads, and waits for a lead."""

from __future__ import annotations

import pytest
import yaml
from sqlalchemy import select
from sqlmodel import col

from refund_desk.runtime import Runtime
from refund_desk.storage.models import AuditRecord, Control, Job
from tests.helpers import ACME, Harness


def policy_with(**breaker: object) -> str:
    raw = yaml.safe_load(ACME.read_text())
    raw["breaker"] = breaker
    return yaml.safe_dump(raw, sort_keys=False)


def switches(desk: Harness) -> Control:
    with desk.runtime.db.read() as session:
        row = session.get(Control, 1)
        assert row is not None
        return row


def tripped(desk: Harness) -> list[AuditRecord]:
    with desk.runtime.db.read() as session:
        return list(
            session.scalars(
                select(AuditRecord).where(col(AuditRecord.action) == "breaker.tripped")
            ).all()
        )


def small_request(desk: Harness, email: str) -> dict[str, object]:
    payment = desk.payment("30.00", email=email)
    body: dict[str, object] = desk.post({**desk.request(payment, "20.00"), "email": email}).json()
    return body


@pytest.fixture()
def desk(any_runtime: Runtime) -> Harness:
    return Harness(any_runtime)


def test_too_many_automatic_refunds_in_an_hour_trips_the_breaker(desk: Harness) -> None:
    desk.publish(policy_with(max_refunds_per_hour=2))
    first, second, third = (small_request(desk, f"c{i}@example.com") for i in range(3))
    assert first["status"] == second["status"] == "refunded"
    assert third["status"] == "awaiting_approval"
    assert switches(desk).mode == "approve-all"
    assert "2 automatic refunds in an hour" in (switches(desk).breaker_reason or "")
    [record] = tripped(desk)
    assert record.payload["mode"] == "approve-all"
    with desk.runtime.db.read() as session:
        notices = session.scalars(select(Job).where(col(Job.kind) == "notify")).all()
        assert any(j.payload["event"] == "policy.notice" for j in notices)
    fourth = small_request(desk, "c4@example.com")
    assert fourth["status"] == "awaiting_approval"  # stays off until a lead turns it back on


def test_money_per_hour_trips_the_breaker(desk: Harness) -> None:
    desk.publish(policy_with(max_amount_per_hour=50))
    statuses = [small_request(desk, f"m{i}@example.com")["status"] for i in range(3)]
    assert statuses == ["refunded", "refunded", "awaiting_approval"]
    assert "50.00 USD" in (switches(desk).breaker_reason or "")


def test_failures_in_a_row_trip_the_breaker_and_success_resets_the_count(desk: Harness) -> None:
    desk.publish(policy_with(max_failures_in_row=2))
    desk.sandbox.set_fault("decline", times=1)
    assert small_request(desk, "a@example.com")["status"] == "parked"
    assert switches(desk).consecutive_failures == 1
    assert small_request(desk, "b@example.com")["status"] == "refunded"
    assert switches(desk).consecutive_failures == 0
    desk.sandbox.set_fault("decline", times=2)
    small_request(desk, "c@example.com")
    small_request(desk, "d@example.com")
    assert switches(desk).mode == "approve-all"
    assert "failed 2 times in a row" in (switches(desk).breaker_reason or "")
    assert small_request(desk, "e@example.com")["status"] == "awaiting_approval"
