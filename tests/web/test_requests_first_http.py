"""End to end over HTTP on SQLite: concurrent `POST /api/v1/refund-requests` while jobs run
(a worker thread in the server; or a job process's loop on a second `Database` of the same
file, standing for `refund-desk worker`). Every request is answered, every case is refunded
exactly once, the audit chain verifies, and no lock or counter is left behind."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from refund_desk.storage.audit import verify_chain
from refund_desk.storage.db import SqliteWriters
from refund_desk.storage.models import Case
from refund_desk.web import job_process
from tests.conftest import TEST_SECRET, make_runtime
from tests.helpers import Harness, LiveServer
from tests.requests_first_helpers import requests_free

N = 40


async def _post_all(url: str, key: str, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        return list(
            await asyncio.gather(
                *(
                    client.post(
                        "/api/v1/refund-requests",
                        json=body,
                        headers={"Authorization": f"Bearer {key}", "Idempotency-Key": f"k{i}"},
                    )
                    for i, body in enumerate(bodies)
                )
            )
        )


def _wait_refunded(h: Harness, ids: list[str], seconds: float = 90) -> dict[str, str]:
    deadline = time.monotonic() + seconds
    statuses: dict[str, str] = {}
    while time.monotonic() < deadline:
        with h.runtime.db.read() as session:
            rows = session.execute(select(Case.id, Case.status).where(Case.id.in_(ids))).all()  # type: ignore[attr-defined]
        statuses = {r[0]: r[1] for r in rows}
        if len(statuses) == len(ids) and all(s == "refunded" for s in statuses.values()):
            break
        time.sleep(0.1)
    return statuses


def _check(h: Harness, responses: list[httpx.Response], payments: list[str]) -> None:
    assert all(r.status_code == 201 for r in responses), [
        (r.status_code, r.text[:200]) for r in responses if r.status_code != 201
    ]
    ids = [r.json()["id"] for r in responses]
    assert len(set(ids)) == N
    statuses = _wait_refunded(h, ids)
    not_refunded = {k: v for k, v in statuses.items() if v != "refunded"}
    assert len(statuses) == N and not not_refunded, not_refunded
    for payment in payments:
        assert len(h.refunds_at_processor(payment)) == 1, payment
    with h.runtime.db.read() as session:
        assert verify_chain(TEST_SECRET, session).ok
        assert session.scalar(select(func.count()).select_from(Case)) == N
    writers = h.runtime.db._write_lock
    assert isinstance(writers, SqliteWriters)
    assert writers.requests._serving == 0
    assert requests_free(h.runtime.db)


def _email(i: int) -> str:
    return f"customer{i}@example.com"  # one refund each: the policy refunds it at once


def _body(h: Harness, i: int, payment: str) -> dict[str, Any]:
    return {**h.request(payment), "email": _email(i)}


@pytest.fixture()
def web(sqlite_url: str) -> Iterator[tuple[Harness, str]]:
    rt = make_runtime(sqlite_url)
    h = Harness(rt)
    h.publish()
    yield h, sqlite_url
    rt.db.dispose()


def test_concurrent_intakes_with_the_servers_own_worker_thread(
    web: tuple[Harness, str],
) -> None:
    h, _ = web
    _intakes_refunded(h, [h.payment(email=_email(i)) for i in range(N)])


def test_concurrent_intakes_with_a_job_process(web: tuple[Harness, str]) -> None:
    h, url = web
    h.runtime.settings = h.runtime.settings.model_copy(update={"job_processes": 1})
    payments = [h.payment(email=_email(i)) for i in range(N)]
    jobs = make_runtime(url)  # the job process's runtime: its own lock files' descriptors
    stop = threading.Event()
    worker = threading.Thread(target=job_process.run, args=(jobs, stop))
    worker.start()
    try:
        _intakes_refunded(h, payments)
    finally:
        stop.set()
        worker.join(60)
        jobs.db.dispose()
    assert not worker.is_alive()


def _intakes_refunded(h: Harness, payments: list[str]) -> None:
    """All the intakes at once at the live server (its sweeper on), all answered and
    refunded once."""
    server = LiveServer(h.runtime, scheduler=True)
    try:
        responses = asyncio.run(
            _post_all(server.url, h.key, [_body(h, i, p) for i, p in enumerate(payments)])
        )
        _check(h, responses, payments)
    finally:
        server.stop(timeout=30)
