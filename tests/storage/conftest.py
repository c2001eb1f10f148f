"""Two `Database`s on one database, standing for a job process and a server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from refund_desk.storage.db import Database


@pytest.fixture()
def two_processes(tmp_path: Path) -> Iterator[tuple[Database, Database]]:
    """(jobs, server): two handles on one SQLite file with a table `t (who)`."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    jobs, server = Database.from_url(url), Database.from_url(url)
    with server.write() as session:
        session.execute(text("CREATE TABLE t (who TEXT)"))
    yield jobs, server
    jobs.dispose()
    server.dispose()


@pytest.fixture()
def two_pg_processes(pg_url: str) -> Iterator[tuple[Database, Database]]:
    """(jobs, server): two handles on one PostgreSQL database with a table `t (who)`, as two
    processes have."""
    jobs, server = Database.from_url(pg_url), Database.from_url(pg_url)
    with server.write() as session:
        session.execute(text("CREATE TABLE t (who TEXT)"))
    yield jobs, server
    jobs.dispose()
    server.dispose()
