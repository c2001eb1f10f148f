"""Concurrent first requests on one payment: several runtimes (replicas) on one PostgreSQL
database, real HTTP, threads; a first sighting held open by another transaction."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, func, select, text

from refund_desk import clock
from refund_desk.storage.audit import verify_chain
from refund_desk.storage.models import Case, Payment
from tests.conftest import TEST_SECRET, make_runtime
from tests.helpers import Harness, LiveServer

pytestmark = pytest.mark.postgres

N = 30


def test_replicas_first_sighting_burst(pg_url: str) -> None:
    runtimes = [make_runtime(pg_url) for _ in range(3)]
    servers: list[LiveServer] = []
    try:
        desk = Harness(runtimes[0])
        desk.publish()
        servers = [LiveServer(rt) for rt in runtimes]
        payment = desk.payment("30.00")
        body = desk.request(payment, "20.00")
        barrier = threading.Barrier(N)

        def one(i: int) -> httpx.Response:
            with httpx.Client(base_url=servers[i % len(servers)].url, timeout=60) as client:
                barrier.wait()
                return client.post(
                    "/api/v1/refund-requests",
                    json=body,
                    headers={"Authorization": f"Bearer {desk.key}"},
                )

        with ThreadPoolExecutor(max_workers=N) as pool:
            responses = list(pool.map(one, range(N)))
        codes = [r.status_code for r in responses]
        assert codes == [201] * N, [
            (r.status_code, r.text[:200]) for r in responses if r.status_code != 201
        ]
        bodies = [r.json() for r in responses]
        with desk.runtime.db.read() as session:
            assert session.scalar(select(func.count()).select_from(Payment)) == 1
            cases = session.scalars(select(Case)).all()
            assert len(cases) == N
            first = [c for c in cases if not c.possible_duplicate]
            assert len(first) == 1, [(c.id, c.possible_duplicate) for c in cases]
            assert all(c.duplicate_of for c in cases if c.possible_duplicate)
            assert all(c.policy_version == 1 for c in cases)
        assert sum(not b["possible_duplicate"] for b in bodies) == 1
        for _ in range(5):
            desk.sweep()
        refunds = desk.refunds_at_processor(payment)
        assert sum(r["amount"] for r in refunds) <= 3000
        with desk.runtime.db.read() as session:
            assert verify_chain(TEST_SECRET, session).ok
    finally:
        for s in servers:
            s.stop()
        for rt in runtimes:
            rt.db.dispose()


def test_threads_amount_omitted_never_exceed(pg_url: str) -> None:
    """No amount: each case asks for what is left; paid in all never exceeds the capture."""
    rt = make_runtime(pg_url)
    try:
        desk = Harness(rt)
        desk.publish()
        payment = desk.payment("30.00")
        body = desk.request(payment, None)
        barrier = threading.Barrier(12)

        def one(_: int) -> Any:
            barrier.wait()
            return desk.post(body)

        with ThreadPoolExecutor(max_workers=12) as pool:
            responses = list(pool.map(one, range(12)))
        assert {r.status_code for r in responses} <= {201, 422}, [r.text for r in responses]
        assert sum(r.status_code == 201 for r in responses) >= 1
        for _ in range(5):
            desk.sweep()
        refunds = desk.refunds_at_processor(payment)
        assert sum(r["amount"] for r in refunds) <= 3000
    finally:
        rt.db.dispose()


def _hold_row(pg_url: str, payment: str, *, amount: int, refunded: int):  # type: ignore[no-untyped-def]
    engine = create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    conn = engine.connect()
    trans = conn.begin()
    conn.execute(
        text(
            "INSERT INTO payments (id, processor, currency, amount, refunded, email_hash,"
            " created_at, seen_at) VALUES (:id, 'sandbox', 'USD', :amount, :refunded, NULL,"
            " :now, :now)"
        ),
        {"id": payment, "amount": amount, "refunded": refunded, "now": clock.now()},
    )
    return engine, conn, trans


@pytest.mark.parametrize("other", ["commit", "rollback"])
def test_capture_waits_for_held_first_sighting(pg_url: str, other: str) -> None:
    """Another transaction inserted the payment's row and has not committed: the capture waits,
    then goes on: a committed row is refreshed from the processor (its stale amount and
    refunds are not kept), a rolled-back one is this capture's first sighting."""
    rt = make_runtime(pg_url)
    try:
        desk = Harness(rt)
        desk.publish()
        payment = desk.payment("30.00")
        engine, conn, trans = _hold_row(pg_url, payment, amount=99999, refunded=7)
        result: dict[str, Any] = {}

        def post() -> None:
            result["r"] = desk.post(desk.request(payment, "20.00"))

        t = threading.Thread(target=post)
        t.start()
        time.sleep(1.0)
        assert t.is_alive(), "the capture did not wait for the held first sighting"
        (trans.commit if other == "commit" else trans.rollback)()
        conn.close()
        engine.dispose()
        t.join(30)
        r = result["r"]
        assert r.status_code == 201, r.text
        with desk.runtime.db.read() as session:
            row = session.get(Payment, payment)
            assert row is not None
            assert (row.amount, row.refunded) == (3000, 0)
            case = session.scalars(select(Case)).one()
            assert not case.possible_duplicate
    finally:
        rt.db.dispose()


def test_sqlite_two_runtimes_first_sighting(sqlite_url: str) -> None:
    """SQLite: two runtimes on one file, threads, one payment first seen by all at once."""
    rts = [make_runtime(sqlite_url), make_runtime(sqlite_url)]
    try:
        desk = Harness(rts[0])
        other = Harness(rts[1])
        desk.publish()
        payment = desk.payment("30.00")
        body = desk.request(payment, "20.00")
        barrier = threading.Barrier(10)

        def one(i: int) -> Any:
            barrier.wait()
            return (desk if i % 2 else other).post(body)

        with ThreadPoolExecutor(max_workers=10) as pool:
            responses = list(pool.map(one, range(10)))
        assert [r.status_code for r in responses] == [201] * 10, [r.text for r in responses]
        with desk.runtime.db.read() as session:
            assert session.scalar(select(func.count()).select_from(Payment)) == 1
            cases = session.scalars(select(Case)).all()
            assert sum(not c.possible_duplicate for c in cases) == 1
        assert sum(r["amount"] for r in desk.refunds_at_processor(payment)) <= 3000
    finally:
        for rt in rts:
            rt.db.dispose()
