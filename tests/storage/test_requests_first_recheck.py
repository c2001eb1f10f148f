"""A background writer that looked at `.requests` while nothing was served and then queued
for the writer behind another transaction looks again once it has the writer: if requests
are served by then (and its patience is not spent), it hands the writer back and waits for
them, so no background transaction starts while a request is served and waiting. Two
`Database`s on one file stand for two processes (their `flock`s conflict as such)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from refund_desk.storage import db as db_module
from refund_desk.storage.db import Database


def _order(db: Database) -> list[str]:
    with db.read() as session:
        return list(session.execute(text("SELECT who FROM t ORDER BY rowid")).scalars())


def _run_scenario(jobs: Database, server: Database, second_job_db: Database) -> list[str]:
    """Job transaction A runs 0.3 s; job B (of `second_job_db`) queues behind it while
    nothing is served; 0.1 s later the server starts serving a request whose capture queues
    for the writer too. A commits: the request should go before B (B waited 0.2 s < 5 s)."""
    a_in = threading.Event()

    def job_a() -> None:
        with jobs.background(), jobs.write() as session:
            a_in.set()
            time.sleep(0.3)
            session.execute(text("INSERT INTO t VALUES ('job-a')"))

    def job_b() -> None:
        with second_job_db.background(), second_job_db.write() as session:
            session.execute(text("INSERT INTO t VALUES ('job-b')"))

    def capture() -> None:
        with server.write() as session:
            session.execute(text("INSERT INTO t VALUES ('intake')"))

    async def request() -> None:
        async with server.serving():
            await asyncio.to_thread(capture)

    with server.write() as session:
        session.execute(text("DELETE FROM t"))
    ta = threading.Thread(target=job_a)
    ta.start()
    assert a_in.wait(5)
    tb = threading.Thread(target=job_b)
    tb.start()
    time.sleep(0.1)  # B has probed (nothing served) and waits for the writer
    asyncio.run(request())
    ta.join(5)
    tb.join(5)
    return _order(server)


def test_a_queued_job_thread_of_the_same_job_process_does_not_cut_in_before_a_request(
    two_processes: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job process with two job threads (the in-process `_Turns` hands B the turn as soon
    as A is done; B then races the server's capture for the `.writer` flock)."""
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 5.0)
    jobs, server = two_processes
    results = [_run_scenario(jobs, server, jobs) for _ in range(5)]
    cut_in = [r for r in results if r.index("job-b") < r.index("intake")]
    assert not cut_in, (
        f"{len(cut_in)}/5 runs: a background write started while a request "
        f"was served and waiting: {results}"
    )


def test_a_queued_job_of_another_job_process_does_not_cut_in_before_a_request(
    two_processes: tuple[Database, Database], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`serve --job-processes 2`: B is in a second job process."""
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 5.0)
    jobs, server = two_processes
    other = Database.from_url(str(jobs.engine.url))
    try:
        results = [_run_scenario(jobs, server, other) for _ in range(5)]
    finally:
        other.dispose()
    cut_in = [r for r in results if r.index("job-b") < r.index("intake")]
    assert not cut_in, (
        f"{len(cut_in)}/5 runs: a background write started while a request "
        f"was served and waiting: {results}"
    )
