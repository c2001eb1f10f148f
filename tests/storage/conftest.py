"""A `Database` on each real database (any_db_url) and on PostgreSQL alone (pg_db)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from refund_desk.storage.db import Database


@pytest.fixture()
def db(any_db_url: str) -> Iterator[Database]:
    database = Database.from_url(any_db_url)
    yield database
    database.dispose()


@pytest.fixture()
def pg_db(pg_url: str) -> Iterator[Database]:
    database = Database.from_url(pg_url)
    yield database
    database.dispose()
