"""The jobs' writes let the requests being served go first (`ServedRequests`), across the
processes on one database and host, for at most `PATIENCE` each; a write someone waits for
(urgent) does not wait for them. On SQLite and on PostgreSQL."""

from __future__ import annotations

import time

from sqlalchemy import text

from refund_desk.storage.db import PATIENCE, Database


def test_a_request_served_in_one_process_is_seen_by_another(
    jobs_and_server: tuple[Database, Database],
) -> None:
    jobs, server = jobs_and_server
    assert not jobs._requests.served()
    with server.serving():
        assert jobs._requests.served()
        with server.serving():  # a second request of the same process
            assert jobs._requests.served()
        assert jobs._requests.served()
    assert not jobs._requests.served()


def test_a_job_write_waits_for_a_request_at_most_its_patience(
    jobs_and_server: tuple[Database, Database],
) -> None:
    jobs, server = jobs_and_server
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
