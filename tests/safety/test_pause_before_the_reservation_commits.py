"""A pause committed before the reservation commits must stop the refund.

The execute job run right after the reserving transaction (`pay_reserved`) pays without
reading the case, the open execution and the kill switch again. On PostgreSQL (READ
COMMITTED) a lead's pause that commits while the reserving transaction works on (the
re-check, the policy, the breaker's window) committed BEFORE the reservation did; the lead
was told "no refund is paid until resume", so the barrier before the create must see it.
"""

from __future__ import annotations

from typing import Any

import pytest

from refund_desk.cases import executor
from refund_desk.governance.admin import set_paused
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor
from tests.helpers import published


def test_a_pause_that_committed_before_the_reservation_stops_the_refund(
    pg_runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PostgreSQL only: on SQLite the reservation holds the one writer, so no pause can
    # commit inside it.
    any_runtime = pg_runtime
    desk = published(any_runtime)
    payment = desk.payment("30.00")
    real_recheck = executor._recheck
    paused: list[bool] = []

    def a_lead_pauses_meanwhile(*args: Any, **kwargs: Any) -> Any:
        if not paused:  # a lead's /refund-policy pause, committed in its own transaction
            with any_runtime.db.write() as session:
                set_paused(session, any_runtime.desk.audit, paused=True, actor=Actor("cli", "lead"))
            paused.append(True)
        return real_recheck(*args, **kwargs)

    monkeypatch.setattr(executor, "_recheck", a_lead_pauses_meanwhile)
    response = desk.post(desk.request(payment, "20.00"))
    assert response.status_code == 201, response.text
    assert paused == [True]
    # The pause committed before the refund was reserved: nothing may leave until resume.
    assert desk.refunds_at_processor(payment) == []
    assert response.json()["status"] != "refunded"
