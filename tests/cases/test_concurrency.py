"""Fifty requests at once are one refund, on SQLite and on PostgreSQL, through real HTTP."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from sqlalchemy import func, select

from refund_desk.storage.audit import verify_chain
from refund_desk.storage.models import Case
from tests.conftest import TEST_SECRET
from tests.helpers import Harness, LiveServer

N = 50


def _burst(server: LiveServer, key: str, body: dict[str, Any], idem: str | None) -> list[Any]:
    headers = {"Authorization": f"Bearer {key}"}
    if idem:
        headers["Idempotency-Key"] = idem
    with httpx.Client(base_url=server.url, timeout=60) as client:

        def one(_: int) -> httpx.Response:
            return client.post("/api/v1/refund-requests", json=body, headers=headers)

        with ThreadPoolExecutor(max_workers=N) as pool:
            return list(pool.map(one, range(N)))


def test_fifty_identical_requests_give_one_refund(live: tuple[Harness, LiveServer]) -> None:
    desk, server = live
    payment = desk.payment("30.00")
    responses = _burst(server, desk.key, desk.request(payment, "20.00"), None)
    assert all(r.status_code == 201 for r in responses), {r.status_code for r in responses}
    bodies = [r.json() for r in responses]
    assert len({b["id"] for b in bodies}) == N
    refunded = [b for b in bodies if b["status"] == "refunded"]
    held = [b for b in bodies if b["possible_duplicate"]]
    assert len(refunded) == 1
    assert len(held) == N - 1
    assert {b["status"] for b in held} == {"awaiting_approval"}, [
        (b["status"], b["decision"], b["park_reason"])
        for b in held
        if b["status"] != "awaiting_approval"
    ][:3]
    refunds = desk.refunds_at_processor(payment)
    assert len(refunds) == 1 and refunds[0]["amount"] == 2000
    with desk.runtime.db.read() as session:
        assert verify_chain(TEST_SECRET, session).ok


def test_fifty_retries_with_one_idempotency_key_give_one_case(
    live: tuple[Harness, LiveServer],
) -> None:
    desk, server = live
    payment = desk.payment("30.00")
    responses = _burst(server, desk.key, desk.request(payment, "20.00"), "checkout-42")
    assert {r.status_code for r in responses} <= {200, 201}
    assert sum(r.status_code == 201 for r in responses) == 1
    assert len({r.json()["id"] for r in responses}) == 1
    with desk.runtime.db.read() as session:
        assert session.scalar(select(func.count()).select_from(Case)) == 1
    assert len(desk.refunds_at_processor(payment)) == 1
