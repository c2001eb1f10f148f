"""Cancellations (a client gone) and failures at the intake gate, wherever they hit, leave
`.requests` unlocked and the serving count at zero."""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text
from starlette.concurrency import run_in_threadpool

from refund_desk.storage.db import Database, SqliteWriters
from refund_desk.web.admission import IntakeGate
from tests.requests_first_helpers import requests_free


@pytest.fixture
def db(tmp_path: Path):  # type: ignore[no-untyped-def]
    d = Database.from_url(f"sqlite:///{tmp_path / 'c.db'}")
    with d.write() as session:
        session.execute(text("CREATE TABLE t (who TEXT)"))
    yield d
    d.dispose()


def _writers(db: Database) -> SqliteWriters:
    w = db._write_lock
    assert isinstance(w, SqliteWriters)
    return w


def test_requests_cancelled_while_queued_at_the_gate_leave_nothing_held(db: Database) -> None:
    gate = IntakeGate(1, serving=db.serving)
    release = threading.Event()

    def capture(n: int) -> int:
        release.wait(5)
        with db.write() as session:
            session.execute(text("INSERT INTO t VALUES (:n)"), {"n": str(n)})
        return n

    async def main() -> list[object]:
        tasks = [
            asyncio.ensure_future(gate.run(lambda n=n: run_in_threadpool(capture, n)))
            for n in range(6)
        ]
        await asyncio.sleep(0.05)
        assert _writers(db).requests._serving == 6
        assert not requests_free(db)
        for task in tasks[2:]:
            task.cancel()  # disconnected while queued at the gate
        await asyncio.sleep(0.01)
        assert _writers(db).requests._serving == 2
        release.set()
        return await asyncio.gather(*tasks, return_exceptions=True)

    results = asyncio.run(asyncio.wait_for(main(), 10))
    assert results[:2] == [0, 1]
    assert all(isinstance(r, asyncio.CancelledError) for r in results[2:])
    assert _writers(db).requests._serving == 0
    assert requests_free(db)


def test_a_request_cancelled_while_serve_begin_retries_leaves_nothing_held(
    db: Database,
) -> None:
    """A background writer of another process is looking (holds `.requests` exclusively):
    `serving()` retries on the loop; the client goes away meanwhile."""
    fd = os.open(f"{db.engine.url.database}.requests", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    lag: list[float] = []

    async def ticker() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.001)
            now = time.monotonic()
            lag.append(now - last)
            last = now

    async def main() -> None:
        tick = asyncio.ensure_future(ticker())
        task = asyncio.ensure_future(_serve_once(db))
        await asyncio.sleep(0.05)
        assert not task.done()  # retrying
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        tick.cancel()

    try:
        asyncio.run(asyncio.wait_for(main(), 10))
        assert _writers(db).requests._serving == 0
        assert max(lag) < 0.05, f"the loop stalled {max(lag):.3f} s while retrying"
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    assert requests_free(db)
    asyncio.run(asyncio.wait_for(_serve_once(db), 5))  # and serving works again
    assert requests_free(db)


async def _serve_once(db: Database) -> None:
    async with db.serving():
        await asyncio.sleep(0)


def test_a_capture_that_raises_or_is_cancelled_mid_capture_leaves_nothing_held(
    db: Database,
) -> None:
    gate = IntakeGate(None, serving=db.serving)

    def bad() -> None:
        with db.write() as session:
            session.execute(text("INSERT INTO t VALUES ('x')"))
            raise RuntimeError("capture failed")

    def slow() -> None:
        time.sleep(0.1)

    async def main() -> None:
        with pytest.raises(RuntimeError):
            await gate.run(lambda: run_in_threadpool(bad))
        task = asyncio.ensure_future(gate.run(lambda: run_in_threadpool(slow)))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(main(), 10))
    assert _writers(db).requests._serving == 0
    assert requests_free(db)


def test_serving_from_two_event_loops_in_threads_counts_right(db: Database) -> None:
    """A test client may run several loops; the counter is process-wide."""
    barrier = threading.Barrier(4)

    async def many() -> None:
        for _ in range(200):
            async with db.serving():
                await asyncio.sleep(0)

    def run() -> None:
        barrier.wait()
        asyncio.run(many())

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert _writers(db).requests._serving == 0
    assert requests_free(db)
