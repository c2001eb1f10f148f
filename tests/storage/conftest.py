"""Two `Database`s on one database, standing for a job process and a server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from refund_desk.storage.db import Database


def _two_processes(url: str) -> Iterator[tuple[Database, Database]]:
    """(jobs, server): two handles on one database with a table `t (who)`, as two processes
    have."""
    jobs, server = Database.from_url(url), Database.from_url(url)
    with server.write() as session:
        session.execute(text("CREATE TABLE t (who TEXT)"))
    yield jobs, server
    jobs.dispose()
    server.dispose()


@pytest.fixture()
def jobs_and_server(any_db_url: str) -> Iterator[tuple[Database, Database]]:
    yield from _two_processes(any_db_url)


@pytest.fixture()
def sqlite_jobs_and_server(sqlite_url: str) -> Iterator[tuple[Database, Database]]:
    yield from _two_processes(sqlite_url)
