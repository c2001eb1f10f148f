"""The breaker's `FOR UPDATE` on the control row reads it afresh (PostgreSQL, READ COMMITTED):
`_recheck` reads the row (mode) before `breaker.over_limit` locks it, and a replica that
waited for that lock must not trip the breaker on the row as read before the wait (a second
`breaker.tripped` over the first replica's, or `approve-all` over a lead's committed mode)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select
from sqlmodel import col

from refund_desk.cases import breaker
from refund_desk.governance import admin
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import AuditRecord, Control
from tests.cases.test_breaker import policy_with, small_request
from tests.helpers import Harness

pytestmark = pytest.mark.postgres


@pytest.fixture()
def desk(pg_runtime: Runtime) -> Harness:
    return Harness(pg_runtime)


def _tripped(desk: Harness) -> list[AuditRecord]:
    with desk.runtime.db.read() as session:
        return list(
            session.scalars(
                select(AuditRecord).where(col(AuditRecord.action) == "breaker.tripped")
            ).all()
        )


def _mode(desk: Harness) -> str:
    with desk.runtime.db.read() as session:
        row = session.get(Control, 1)
        assert row is not None
        return row.mode


def test_a_replica_waiting_on_the_breaker_lock_does_not_trip_it_a_second_time(
    desk: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    desk.publish(policy_with(max_refunds_per_hour=1))
    assert small_request(desk, "c0@example.com")["status"] == "refunded"
    real = breaker.over_limit
    done: list[bool] = []

    def other_replica_first(session: Any, *args: Any, **kwargs: Any) -> Any:
        # Another replica, over the same limit, trips the breaker and commits while this
        # transaction (which read the control row already) waits for the row's lock.
        if not done:
            done.append(True)
            with desk.runtime.db.write() as other:
                breaker.trip(desk.runtime.desk, other, "another replica: over the limit")
        return real(session, *args, **kwargs)

    monkeypatch.setattr(breaker, "over_limit", other_replica_first)
    assert small_request(desk, "c1@example.com")["status"] == "awaiting_approval"
    assert done
    # One trip: the second replica sees the breaker already tripped (mode approve-all).
    assert len(_tripped(desk)) == 1, [r.payload for r in _tripped(desk)]


def test_a_lead_mode_change_committed_while_waiting_is_not_overwritten_by_a_trip(
    desk: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    desk.publish(policy_with(max_refunds_per_hour=1))
    assert small_request(desk, "c0@example.com")["status"] == "refunded"
    real = breaker.over_limit
    done: list[bool] = []

    def lead_first(session: Any, *args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append(True)
            with desk.runtime.db.write() as other:
                admin.set_mode(
                    other, desk.runtime.desk.audit, mode="shadow", actor=Actor("human", "ULEAD")
                )
        return real(session, *args, **kwargs)

    monkeypatch.setattr(breaker, "over_limit", lead_first)
    small_request(desk, "c1@example.com")
    assert done
    assert _mode(desk) == "shadow"  # the lead's committed change stands
    assert _tripped(desk) == []
