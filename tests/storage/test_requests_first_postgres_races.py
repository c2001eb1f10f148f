"""Requests before jobs on PostgreSQL (`RequestsFirst`, `Database.serving`,
`Database.background`, `requests_first_path`).

Attacks: starvation (jobs always progress), a serving process killed (its flock must go
with it), cancellation while `serve_begin` retries, dispose during a wait, an unusable
temporary file (no waiting, never an error), many threads at once, counting of nested and
overlapping `serving()` in one process, and which URLs share the file.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from refund_desk.storage import db as db_module
from refund_desk.storage.db import Database, RequestsFirst, requests_first_path
from tests.conftest import _pg_admin_engine
from tests.requests_first_helpers import Served, ServingProcess, file_free, job_waited, write_time

pytestmark = pytest.mark.postgres


# ---------------------------------------------------------------- starvation


def test_jobs_progress_under_a_never_ending_stream_of_requests(
    two_pg_processes: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests served back to back without a gap for 1.5 s: every job write still finishes
    within the patience (plus slack), and many of them get through."""
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 0.1)
    jobs, server = two_pg_processes
    stop = threading.Event()

    async def stream() -> None:
        async def one() -> None:
            async with server.serving():
                await asyncio.sleep(0.003)

        while not stop.is_set():
            await asyncio.gather(*(one() for _ in range(4)))

    feeder = threading.Thread(target=asyncio.run, args=(stream(),))
    feeder.start()
    try:
        time.sleep(0.05)
        waits = []
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            waits.append(write_time(jobs))
    finally:
        stop.set()
        feeder.join(10)
    assert len(waits) >= 5, waits
    assert max(waits) < 0.6, f"a job waited {max(waits):.3f} s"


def test_many_job_threads_and_many_requests_at_once(
    two_pg_processes: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 job threads in one process and 8 concurrent serving tasks in another: nothing
    errors, every job writes within the patience (plus slack), the file is free after."""
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 0.2)
    jobs, server = two_pg_processes
    stop = threading.Event()

    async def stream() -> None:
        async def one() -> None:
            while not stop.is_set():
                async with server.serving():
                    await asyncio.sleep(0.001)
                await asyncio.sleep(0)

        await asyncio.gather(*(one() for _ in range(8)))

    feeder = threading.Thread(target=asyncio.run, args=(stream(),))
    feeder.start()
    try:
        with ThreadPoolExecutor(16) as pool:
            waits = list(pool.map(lambda _: [write_time(jobs) for _ in range(5)], range(16)))
    finally:
        stop.set()
        feeder.join(10)
    flat = [w for ws in waits for w in ws]
    assert len(flat) == 80
    assert max(flat) < 2.0, f"a job waited {max(flat):.3f} s"
    assert file_free(requests_first_path(jobs.engine.url))
    assert server._requests_first._serving == 0


# ---------------------------------------------------------------- a serving process dies


def test_a_serving_process_killed_with_sigkill_releases_its_hold(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 5.0)
    db = Database.from_url(pg_url)
    try:
        with ServingProcess(pg_url) as server:
            assert not file_free(requests_first_path(db.engine.url))
            server.kill()
            assert write_time(db) < 1.0, "a dead process's requests still hold the jobs back"
    finally:
        db.dispose()


# ---------------------------------------------------------------- cancellation


def test_a_request_cancelled_while_serve_begin_retries_leaves_nothing_held(
    two_pg_processes: tuple[Database, Database],
) -> None:
    """A background writer's look is held open (an exclusive lock on another descriptor), so
    `serve_begin` keeps answering False; the request is cancelled meanwhile. Afterwards the
    count is zero, nothing holds the file, and the next request is served normally."""
    _jobs, server = two_pg_processes
    path = requests_first_path(server.engine.url)
    prober = os.open(path, os.O_RDWR)
    fcntl.flock(prober, fcntl.LOCK_EX)  # as a look that lasts

    async def main() -> None:
        entered = asyncio.Event()

        async def request() -> None:
            async with server.serving():
                entered.set()

        task = asyncio.create_task(request())
        await asyncio.sleep(0.05)
        assert not entered.is_set()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(main())
    finally:
        fcntl.flock(prober, fcntl.LOCK_UN)
        os.close(prober)
    assert server._requests_first._serving == 0
    assert file_free(path)

    async def again() -> bool:
        async with server.serving():
            return not file_free(path)

    assert asyncio.run(again())
    assert file_free(path)


def test_a_request_cancelled_while_served_releases_its_hold(
    two_pg_processes: tuple[Database, Database],
) -> None:
    _jobs, server = two_pg_processes
    path = requests_first_path(server.engine.url)

    async def main() -> None:
        inside = asyncio.Event()

        async def request() -> None:
            async with server.serving():
                inside.set()
                await asyncio.sleep(10)

        task = asyncio.create_task(request())
        await inside.wait()
        assert not file_free(path)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert server._requests_first._serving == 0
    assert file_free(path)


# ---------------------------------------------------------------- dispose during a wait


def test_dispose_during_a_jobs_wait_lets_it_write_without_error(
    two_pg_processes: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 5.0)
    jobs, server = two_pg_processes
    result: list[object] = []

    def job() -> None:
        try:
            result.append(write_time(jobs))
        except BaseException as exc:
            result.append(exc)

    with Served(server):
        thread = threading.Thread(target=job)
        thread.start()
        time.sleep(0.2)
        assert not result, "the job did not wait"
        jobs.dispose()
        thread.join(3)
        assert not thread.is_alive(), "the job kept waiting after its Database was disposed"
    assert result and isinstance(result[0], float), result


def test_dispose_of_a_serving_database_then_serve_end_is_harmless(
    two_pg_processes: tuple[Database, Database],
) -> None:
    jobs, server = two_pg_processes
    path = requests_first_path(server.engine.url)

    async def main() -> None:
        async with server.serving():
            server.dispose()
            assert file_free(path)  # closing the descriptor released the shared lock

    asyncio.run(main())
    assert write_time(jobs) < 1.0


# ---------------------------------------------------------------- an unusable file


def test_a_temporary_file_that_cannot_be_opened_means_no_waiting_and_no_error(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file's name is taken by a directory (the root user cannot be refused a plain
    file's permissions here): the Database builds, serves and writes jobs without waiting."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 5.0)
    path = requests_first_path(make_url(pg_url))
    assert path.startswith(str(tmp_path))
    os.mkdir(path)
    jobs, server = Database.from_url(pg_url), Database.from_url(pg_url)
    try:

        async def main() -> float:
            async with server.serving():
                return await asyncio.to_thread(write_time, jobs)

        assert asyncio.run(main()) < 1.0
        assert write_time(jobs) < 1.0
    finally:
        jobs.dispose()
        server.dispose()


def test_a_missing_temporary_directory_means_no_waiting_and_no_error(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "gone"))
    jobs = Database.from_url(pg_url)
    try:

        async def main() -> float:
            async with jobs.serving():
                return await asyncio.to_thread(write_time, jobs)

        assert asyncio.run(main()) < 1.0
    finally:
        jobs.dispose()


# ---------------------------------------------------------------- counting in one process


def test_nested_and_overlapping_serving_in_one_process_are_counted(
    two_pg_processes: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    _jobs, server = two_pg_processes
    path = requests_first_path(server.engine.url)

    async def main() -> None:
        async with server.serving():
            async with server.serving():
                assert server._requests_first._serving == 2
            assert not file_free(path), "the inner end released the outer request's hold"
            # another task overlaps and outlives the first
            inner_in, outer_done = asyncio.Event(), asyncio.Event()

            async def other() -> None:
                async with server.serving():
                    inner_in.set()
                    await outer_done.wait()
                    assert not file_free(path)

            task = asyncio.create_task(other())
            await inner_in.wait()
        outer_done.set()
        await task
        assert file_free(path)
        assert server._requests_first._serving == 0

    asyncio.run(main())


def test_a_job_in_the_serving_process_waits_but_its_own_request_does_not(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One Database (one process): its own requests hold back its background writers, but a
    job the request runs itself (in the request's context) does not wait."""
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 0.3)
    db = Database.from_url(pg_url)
    try:

        async def main() -> tuple[float, float]:
            async with db.serving():
                own = await asyncio.to_thread(write_time, db)
                loop = asyncio.get_running_loop()
                # a thread that does not inherit the request's context (a worker thread)
                other = await loop.run_in_executor(None, write_time, db)
            return own, other

        own, other = asyncio.run(main())
        assert own < 0.2
        assert 0.25 <= other < 1.5
    finally:
        db.dispose()


# ---------------------------------------------------------------- which databases share


def test_other_databases_do_not_hold_each_other_back(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 5.0)
    name = make_url(pg_url).database + "_other"
    admin = _pg_admin_engine()
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    other_url = make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    jobs, server = Database.from_url(other_url), Database.from_url(pg_url)
    try:
        assert requests_first_path(jobs.engine.url) != requests_first_path(server.engine.url)
        with Served(server):
            assert write_time(jobs) < 1.0
    finally:
        jobs.dispose()
        server.dispose()
        Path(requests_first_path(make_url(other_url))).unlink(missing_ok=True)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_the_same_database_with_another_driver_name_or_password_shares_the_file(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 0.3)
    url = make_url(pg_url)
    plain_url = url.set(drivername="postgresql", password="whatever")
    jobs = Database.from_url(plain_url.render_as_string(hide_password=False))
    server = Database.from_url(pg_url)
    try:
        with Served(server):
            assert write_time(jobs) >= 0.25
    finally:
        jobs.dispose()
        server.dispose()


def test_the_same_database_with_its_default_port_left_out_shares_the_file(
    pg_url: str,
) -> None:
    """`postgresql://postgres@127.0.0.1/db` and `...@127.0.0.1:5432/db` are one database (the
    port a client uses when none is given is 5432); the file is named with `url.port`, which
    is None for the first, so a CLI or job process configured without the port and a server
    configured with it do not see each other's requests."""
    url = make_url(pg_url)
    assert url.port == 5432
    without_port = make_url(pg_url.replace(":5432/", "/"))
    assert without_port.port is None and without_port.database == url.database
    assert requests_first_path(url) == requests_first_path(without_port)


def test_a_job_configured_without_the_default_port_waits_for_the_server(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same, as behaviour: a job process whose URL leaves out :5432 is not held back by
    a server serving requests on the very same database."""
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 0.3)
    without_port = pg_url.replace(":5432/", "/")
    assert job_waited(without_port, pg_url) >= 0.25, "the job did not let the requests go first"


def test_requests_first_never_raises_once_closed() -> None:
    """Closed (a disposed Database): every operation is a no-op, never an error."""
    rf = RequestsFirst(os.path.join(tempfile.mkdtemp(), "x.requests"))
    rf.close()
    assert rf.serve_begin() is True
    rf.serve_end()
    assert rf.served(time.monotonic() + 1) is False
    rf.close()
