"""On SQLite, jobs' writes let the requests someone is waiting on go first, for a while.

A job process commits one transaction after another; without this, every intake capture
waited for a whole job transaction, so a stream of intakes and a job process took turns.
Two `Database`s on one file stand for two processes (each opens its own lock files, and
`flock` locks of different open files conflict as between processes); one test uses a real
second process. A request never waits long for a job: not even for a job process stopped in
the middle of a look at the file (`SERVE_PATIENCE`).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from refund_desk.storage import db as db_module
from refund_desk.storage.db import Database, RequestsFirst, _Turns
from tests.requests_first_helpers import Served, ServingProcess, requests_file, requests_free


def _background_write(db: Database, who: str = "job") -> None:
    with db.background(), db.write() as session:
        session.execute(text("INSERT INTO t VALUES (:who)"), {"who": who})


def _write(db: Database, who: str) -> None:
    with db.write() as session:
        session.execute(text("INSERT INTO t VALUES (:who)"), {"who": who})


def _writers(db: Database) -> list[str]:
    with db.read() as session:
        return list(session.execute(text("SELECT who FROM t ORDER BY rowid")).scalars())


def test_a_job_process_writing_back_to_back_lets_a_stream_of_intakes_go_first(
    two_processes: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """While requests are queued or captured, the job process's next transaction waits: the
    captures run back to back instead of one after each of its transactions."""
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 5.0)
    jobs, server = two_processes
    stop, started = threading.Event(), threading.Event()

    def job_process() -> None:
        while not stop.is_set():
            _background_write(jobs)
            started.set()
            time.sleep(0.001)

    async def intakes() -> None:
        async with server.serving():  # what the intake gate holds while requests wait
            for i in range(20):
                await asyncio.to_thread(_write, server, f"intake-{i}")

    worker = threading.Thread(target=job_process)
    worker.start()
    try:
        assert started.wait(5)
        asyncio.run(intakes())
    finally:
        stop.set()
        worker.join(10)
    order = _writers(server)
    first, last = order.index("intake-0"), order.index("intake-19")
    jobs_between = order[first:last].count("job")
    assert jobs_between == 0, f"{jobs_between} job transactions went between the intakes"
    assert order.count("job") > 1  # the job process did write before and after
    assert (Path(str(server.engine.url.database) + ".requests")).exists()


def test_without_requests_a_job_writes_at_once(
    two_processes: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 5.0)
    jobs, server = two_processes
    with Served(server) as held:
        held.release()  # served and done: nothing is waiting any more
    began = time.monotonic()
    _background_write(jobs)
    assert time.monotonic() - began < 1.0
    assert _writers(server) == ["job"]


def test_a_job_waits_for_requests_no_longer_than_its_patience(
    two_processes: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests that never stop slow the jobs down but never stop them."""
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 0.3)
    jobs, server = two_processes
    with Served(server):
        began = time.monotonic()
        _background_write(jobs)
        waited = time.monotonic() - began
    assert 0.25 <= waited < 3.0, waited
    assert _writers(server) == ["job"]


def test_a_waiting_job_goes_as_soon_as_the_requests_are_served(
    two_processes: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 10.0)
    jobs, server = two_processes
    done = threading.Event()
    with Served(server) as held:
        job = threading.Thread(target=lambda: (_background_write(jobs), done.set()))
        began = time.monotonic()
        job.start()
        time.sleep(0.2)
        assert not done.is_set()  # it waits while the requests are served
        held.release()
        assert done.wait(5)
        waited = time.monotonic() - began
    job.join(5)
    assert 0.15 <= waited < 5.0, waited


def test_requests_in_the_jobs_own_process_go_first_too(tmp_path: Path) -> None:
    """A server that runs its jobs in its own threads: a job's write waits for the requests
    that this same process serves (its look uses a descriptor of its own)."""
    db = Database.from_url(f"sqlite:///{tmp_path / 'one.db'}")
    with db.write() as session:
        session.execute(text("CREATE TABLE t (who TEXT)"))
    done = threading.Event()
    with Served(db) as held:
        job = threading.Thread(target=lambda: (_background_write(db), done.set()))
        job.start()
        time.sleep(0.05)
        assert not done.is_set()
        _write(db, "intake")  # a request's write is not held back
        held.release()
        assert done.wait(5)
    job.join(5)
    assert _writers(db) == ["intake", "job"]
    db.dispose()


def test_requests_served_by_another_process_hold_back_a_job(tmp_path: Path) -> None:
    """The same across two real processes: a server process serving requests, and a job
    here."""
    path = tmp_path / "procs.db"
    url = f"sqlite:///{path}"
    db = Database.from_url(url)
    with db.write() as session:
        session.execute(text("CREATE TABLE t (who TEXT)"))
    with ServingProcess(url) as server:
        done = threading.Event()
        job = threading.Thread(target=lambda: (_background_write(db), done.set()))
        job.start()
        time.sleep(0.05)  # well under the patience (100 ms): still waiting
        assert not done.is_set()
        server.release()
        assert done.wait(5)
        job.join(5)
    assert _writers(db) == ["job"]
    db.dispose()


def test_background_threads_get_the_turn_after_the_others_unless_they_waited_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In one process: queued jobs go after queued requests, but one that has waited its
    patience goes before requests that came after it."""

    def run(patience: float) -> list[str]:
        monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", patience)
        turns, order = _Turns(), []
        turns.acquire(False)

        def write(name: str, background: bool) -> None:
            turns.acquire(False, background)
            order.append(name)
            turns.release()

        threads = []
        for name, background in [("job", True), ("intake-1", False), ("intake-2", False)]:
            thread = threading.Thread(target=write, args=(name, background))
            thread.start()
            threads.append(thread)
            time.sleep(0.05)
        turns.release()
        for thread in threads:
            thread.join(5)
        return order

    assert run(10.0) == ["intake-1", "intake-2", "job"]
    assert run(0.01) == ["job", "intake-1", "intake-2"]


def test_serving_on_postgresql_makes_no_connection() -> None:
    """Requests first on PostgreSQL is a file on this host: serving a request connects to
    nothing (here a server that does not exist)."""
    db = Database(create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none"))

    async def serve() -> bool:
        async with db.serving():
            return True

    assert asyncio.run(serve())  # no lock file, no connection


def test_a_waiting_job_looks_less_and_less_often(
    two_processes: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Waiting out half a second of requests, a job looks a few dozen times, not a thousand
    (a look every half a millisecond cost a waiting thread a few per cent of a core)."""
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 0.5)
    jobs, server = two_processes
    looks = 0
    look = RequestsFirst.served

    def counted(self: RequestsFirst, deadline: float) -> bool:
        nonlocal looks
        looks += 1
        return look(self, deadline)

    monkeypatch.setattr(RequestsFirst, "served", counted)
    with Served(server):
        began = time.monotonic()
        _background_write(jobs)
        waited = time.monotonic() - began
    assert waited >= 0.45
    assert looks <= 100, looks  # every half a millisecond: about a thousand


def _look_held_open(db: Database) -> int:
    """A background writer's look that does not end (a job process stopped in the middle of
    one): the file's exclusive lock, held on a descriptor of its own."""
    prober = os.open(requests_file(db), os.O_RDWR)
    fcntl.flock(prober, fcntl.LOCK_EX)
    return prober


def _look_ended(prober: int) -> None:
    fcntl.flock(prober, fcntl.LOCK_UN)
    os.close(prober)


def test_a_request_waits_for_a_look_that_does_not_end_no_longer_than_its_patience(
    two_processes: tuple[Database, Database],
) -> None:
    _jobs, server = two_processes
    prober = _look_held_open(server)

    async def serve() -> tuple[float, int]:
        began = time.monotonic()
        async with server.serving():
            return time.monotonic() - began, server._requests_first._serving

    try:  # (waiting for the look to end would wait forever)
        waited, counted = asyncio.run(asyncio.wait_for(serve(), timeout=5))
    finally:
        _look_ended(prober)
    assert db_module.SERVE_PATIENCE <= waited < db_module.SERVE_PATIENCE + 1.0
    assert counted == 1
    assert server._requests_first._serving == 0
    assert requests_free(server)
    with Served(server):  # the look over: a request holds the file again
        assert not requests_free(server)
    assert requests_free(server)


def test_a_request_served_without_the_lock_leaves_the_next_one_to_take_it(
    two_processes: tuple[Database, Database],
) -> None:
    """One request is served without the shared lock (a look did not end); once the look
    ends, the next request of the process takes the lock, and the last one out lets it go."""
    jobs, server = two_processes
    prober = _look_held_open(server)
    first = Served(server)
    try:
        first.__enter__()  # after the patience: served, not seen
        assert not server._requests_first._held
    except BaseException:
        first.release()
        raise
    finally:
        _look_ended(prober)
    assert requests_free(server)
    with Served(server):
        assert not requests_free(server)  # taken by the second request
        first.release()
        assert not requests_free(server)  # still held: the second is served
        assert jobs._requests_first.served(time.monotonic() + 1)
    assert requests_free(server)
    assert server._requests_first._serving == 0
