"""A job in the server's own process waits for requests about its patience in all: the time
it waited at `.requests` counts towards its patience in the in-process queue (`_Turns`),
which it joins with the time it began to wait, not the time it queued."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from refund_desk.storage import db as db_module
from refund_desk.storage.db import Database


def test_a_job_write_in_a_busy_server_waits_about_the_patience_not_twice_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    patience = 0.3
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", patience)
    db = Database.from_url(f"sqlite:///{tmp_path / 'busy.db'}")
    with db.write() as session:
        session.execute(text("CREATE TABLE t (who TEXT)"))
    stop, entered = threading.Event(), threading.Event()

    def capture(i: int) -> None:
        with db.write() as session:
            session.execute(text("INSERT INTO t VALUES (:w)"), {"w": f"intake-{i}"})
            time.sleep(0.002)

    def capturing() -> None:  # a capture thread of the pool, one capture after another
        i = 0
        while not stop.is_set():
            capture(i)
            i += 1

    async def stream() -> None:
        async with db.serving():  # requests queued all along
            threads = [threading.Thread(target=capturing) for _ in range(4)]
            for t in threads:
                t.start()
            entered.set()
            while not stop.is_set():
                await asyncio.sleep(0.005)
            for t in threads:
                await asyncio.to_thread(t.join, 10)

    server = threading.Thread(target=asyncio.run, args=(stream(),))
    server.start()
    assert entered.wait(5)
    time.sleep(0.05)
    try:
        began = time.monotonic()
        with db.background(), db.write() as session:
            session.execute(text("INSERT INTO t VALUES ('job')"))
        waited = time.monotonic() - began
    finally:
        stop.set()
        server.join(10)
        db.dispose()
    assert waited < 1.5 * patience, f"the job's write waited {waited:.2f} s (patience {patience})"
