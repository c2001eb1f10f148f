"""On PostgreSQL, jobs' write transactions let the requests someone is waiting on go first,
across the processes on one host that use the database, for at most the patience.

There is no single writer to queue for, but a job process's transactions take the same cores
as the captures: measured with two job processes beside one HTTP process, the HTTP process
was busy about two thirds of the intake burst while the jobs took the rest of the cores.
Two `Database`s on one URL stand for two processes (each opens the database's file of its
own, and `flock` locks of different open files conflict as between processes); one test
uses a real second process.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from refund_desk.storage import db as db_module
from refund_desk.storage.db import Database, requests_first_path
from tests.requests_first_helpers import Served, ServingProcess, job_waited, write_time

pytestmark = pytest.mark.postgres


def test_a_job_waits_while_another_process_serves_requests_then_writes(
    two_pg_processes: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 5.0)
    jobs, server = two_pg_processes
    done = threading.Event()
    job = threading.Thread(target=lambda: (write_time(jobs), done.set()))
    with Served(server):
        job.start()
        assert not done.wait(0.3), "the job wrote while requests were being served"
    assert done.wait(5), "the job did not write once the requests were served"
    job.join(5)
    assert Path(requests_first_path(jobs.engine.url)).exists()


def test_a_job_waits_no_longer_than_the_patience(
    two_pg_processes: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 0.2)
    jobs, server = two_pg_processes
    with Served(server):
        waited = write_time(jobs)
    assert 0.15 <= waited < 1.0, f"the job waited {waited:.3f} s"


def test_only_background_writes_wait(
    two_pg_processes: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request's own write, an urgent one (a Slack click), and a job a request runs itself
    do not wait; nor does a job when nothing is served."""
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 5.0)
    jobs, server = two_pg_processes
    assert write_time(jobs) < 1.0  # nothing served
    with Served(server):
        assert write_time(jobs, background=False) < 1.0
        with jobs.urgent():
            assert write_time(jobs) < 1.0

    async def served_request_runs_a_job() -> float:
        async with jobs.serving():
            return await asyncio.to_thread(write_time, jobs)

    assert asyncio.run(served_request_runs_a_job()) < 1.0


def test_the_file_is_named_for_the_database_not_its_driver_or_password(pg_url: str) -> None:
    """Other databases on the server do not hold each other's jobs back."""
    url = make_url(pg_url)
    assert requests_first_path(url) != requests_first_path(url.set(database="another"))
    assert requests_first_path(url) == requests_first_path(
        url.set(drivername="postgresql+psycopg", password="other")
    )


def test_requests_served_by_a_real_second_process_hold_back_a_job(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 5.0)
    db = Database.from_url(pg_url)
    try:
        with ServingProcess(pg_url) as server:
            done = threading.Event()
            job = threading.Thread(target=lambda: (write_time(db), done.set()))
            job.start()
            assert not done.wait(0.3)
            server.release()
            assert done.wait(5)
            job.join(5)
    finally:
        db.dispose()


@pytest.mark.parametrize(
    "spelled",
    [
        "postgresql+psycopg://postgres@localhost:5432/db",
        "postgresql+psycopg://postgres@LOCALHOST/db",
        "postgresql+psycopg://postgres@127.0.0.1:5432/db",
        "postgresql+psycopg://postgres@127.0.1.1/db",
        "postgresql+psycopg://postgres@[::1]:5432/db",
        "postgresql+psycopg://postgres@/db",  # the local socket
        "postgresql+psycopg://postgres@/db?host=/var/run/postgresql",
    ],
)
def test_this_machines_server_is_one_file_however_it_is_spelled(spelled: str) -> None:
    assert requests_first_path(make_url(spelled)) == requests_first_path(
        make_url("postgresql://postgres@127.0.0.1/db")
    )


def test_another_host_port_user_or_database_is_another_file() -> None:
    here = requests_first_path(make_url("postgresql://postgres@localhost:5432/db"))
    for other in (
        "postgresql://postgres@db.internal:5432/db",
        "postgresql://postgres@10.0.0.5:5432/db",
        "postgresql://postgres@localhost:5433/db",
        "postgresql://someone@localhost:5432/db",
        "postgresql://postgres@localhost:5432/other",
    ):
        assert requests_first_path(make_url(other)) != here, other


def test_a_job_addressing_the_server_by_name_waits_for_one_addressing_it_by_address(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job process configured with `localhost` is held back by a server serving requests
    on the same database through `127.0.0.1`."""
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 0.3)
    url = make_url(pg_url)
    assert url.host == "127.0.0.1"
    by_name = url.set(host="localhost").render_as_string(hide_password=False)
    assert job_waited(by_name, pg_url) >= 0.25, "the job did not let the requests go first"
