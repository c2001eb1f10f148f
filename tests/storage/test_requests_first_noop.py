"""SQLite in memory holds nothing and waits for nothing: `serving()` and `background()` are
no-ops there. (PostgreSQL's jobs do wait for requests: `test_requests_first_postgres.py`.)"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from sqlalchemy import text

from refund_desk.storage import db as db_module
from refund_desk.storage.db import Database


def _held_background_write_time(serving_db: Database, writing_db: Database) -> float:
    stop, entered = threading.Event(), threading.Event()

    async def serve() -> None:
        async with serving_db.serving():
            entered.set()
            while not stop.is_set():
                await asyncio.sleep(0.002)

    t = threading.Thread(target=asyncio.run, args=(serve(),))
    t.start()
    assert entered.wait(5)
    try:
        began = time.monotonic()
        with writing_db.background(), writing_db.write() as session:
            session.execute(text("SELECT 1"))
        return time.monotonic() - began
    finally:
        stop.set()
        t.join(5)


def test_sqlite_in_memory_background_writes_do_not_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 2.0)
    db = Database.from_url("sqlite://")
    try:
        assert _held_background_write_time(db, db) < 0.5
    finally:
        db.dispose()
