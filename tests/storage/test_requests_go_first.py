"""On SQLite the jobs' writes let the requests being served go first (`WriteLock.serving`),
across the processes on one file, for at most `PATIENCE` each; a write someone waits for
(urgent) does not wait for them."""

from __future__ import annotations

import time

from sqlalchemy import text

from refund_desk.storage.db import PATIENCE, Database


def _lock(db: Database):  # type: ignore[no-untyped-def]
    return db._write_lock


def test_a_request_served_in_one_process_is_seen_by_another(
    two_processes: tuple[Database, Database],
) -> None:
    jobs, server = two_processes
    assert not _lock(jobs)._requests_served()
    with server.serving():
        assert _lock(jobs)._requests_served()
        with server.serving():  # a second request of the same process
            assert _lock(jobs)._requests_served()
        assert _lock(jobs)._requests_served()
    assert not _lock(jobs)._requests_served()


def test_a_job_write_waits_for_a_request_at_most_its_patience(
    two_processes: tuple[Database, Database],
) -> None:
    jobs, server = two_processes
    with server.serving():
        began = time.monotonic()
        with jobs.write() as session:
            session.execute(text("INSERT INTO t VALUES ('job')"))
        waited = time.monotonic() - began
        began = time.monotonic()
        with server.write(urgent=True) as session:  # the request's own capture
            session.execute(text("INSERT INTO t VALUES ('capture')"))
        urgent_waited = time.monotonic() - began
    assert waited >= PATIENCE * 0.9, waited  # it let the request go first ...
    assert urgent_waited < waited, (urgent_waited, waited)  # ... which did not wait for it
    with server.read() as session:
        assert sorted(session.execute(text("SELECT who FROM t")).scalars()) == ["capture", "job"]
