"""`Database.dispose()` (`SqliteWriters.close`) against requests being served and background
writers looking at `.requests`: the lock is released and the count is back to zero, a writer
racing the close goes on without the closed lock (as any writer after a close does), and the
event loop's `serve_begin`/`serve_end` never wait for a look (a look holds `_probing` for two
system calls; the close takes it before the serving lock)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from refund_desk.storage import db as db_module
from refund_desk.storage.db import Database, SqliteWriters
from tests.requests_first_helpers import Served, requests_free


def _make(tmp_path: Path, name: str = "d.db") -> Database:
    db = Database.from_url(f"sqlite:///{tmp_path / name}")
    with db.write() as session:
        session.execute(text("CREATE TABLE IF NOT EXISTS t (who TEXT)"))
    return db


def _bg_write(db: Database, errors: list[BaseException]) -> None:
    try:
        with db.background(), db.write() as session:
            session.execute(text("INSERT INTO t VALUES ('job')"))
    except BaseException as exc:
        errors.append(exc)


def test_dispose_while_serving_releases_the_lock_and_serve_end_is_harmless(
    tmp_path: Path,
) -> None:
    db = _make(tmp_path)

    async def main() -> None:
        async with db.serving():
            assert not requests_free(db)
            await asyncio.to_thread(db.dispose)
        # after dispose: serving again works (no fd), nothing raises
        async with db.serving():
            pass

    asyncio.run(asyncio.wait_for(main(), 10))
    assert requests_free(db)
    writers = db._write_lock
    assert isinstance(writers, SqliteWriters)
    assert writers.requests._serving == 0


def test_a_background_writer_racing_dispose_does_not_crash_on_a_closed_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A background writer waiting for requests while the `Database` is disposed: its looks
    find the lock file closed and it goes on without it (as any writer after a close does),
    never calling `flock` on a closed descriptor. Many rounds, with a second writer starting
    while the close waits for the first (which waiter wins a lock varies)."""
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 0.05)
    errors: list[BaseException] = []
    for round_ in range(30):
        db = _make(tmp_path, f"r{round_}.db")
        writers = db._write_lock
        assert isinstance(writers, SqliteWriters)
        holder = Database.from_url(str(db.engine.url))  # another process serving
        served = Served(holder).__enter__()
        first = threading.Thread(target=_bg_write, args=(db, errors))
        first.start()
        time.sleep(0.01)  # `first` waits for the requests, looking again and again
        closer = threading.Thread(target=db.dispose)
        closer.start()
        time.sleep(0.005)  # the close has the turn
        second = threading.Thread(target=_bg_write, args=(db, errors))
        second.start()  # waits for the requests too, until the files are closed
        for t in (first, second, closer):
            t.join(10)
        served.release()
        holder.dispose()
    assert not errors, f"{len(errors)} background writes failed around dispose: {errors[:3]!r}"


def test_dispose_does_not_block_the_event_loop_while_a_job_probes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The event loop is never blocked by these locks: a request served while the
    `Database` is being disposed and a job waits for requests does not wait for either (the
    close holds the serving lock only for the time it closes the files)."""
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 0.5)
    db = _make(tmp_path)
    other = Database.from_url(str(db.engine.url))
    errors: list[BaseException] = []
    served = Served(other).__enter__()
    job = threading.Thread(target=_bg_write, args=(db, errors))
    job.start()
    time.sleep(0.02)  # the job waits for the requests elsewhere (up to 0.5 s)

    async def loop_side() -> float:
        closer = threading.Thread(target=db.dispose)
        closer.start()
        await asyncio.sleep(0.02)  # the close is under way
        began = time.monotonic()
        async with db.serving():  # a request arrives on this process's loop
            pass
        blocked = time.monotonic() - began
        await asyncio.to_thread(closer.join, 10)
        return blocked

    try:
        blocked = asyncio.run(loop_side())
    finally:
        job.join(10)
        served.release()
        other.dispose()
    assert blocked < 0.05, f"the event loop was blocked {blocked:.2f} s in serving()"
