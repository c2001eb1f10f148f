"""A customer's key row across transactions, on direct rows and the ORM's: a Database on each
real database, and a Vault on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from refund_desk.storage.crypto import Vault
from refund_desk.storage.db import Database
from tests.conftest import TEST_SECRET


@pytest.fixture()
def keys_db(any_db_url: str) -> Iterator[Database]:
    database = Database.from_url(any_db_url)
    yield database
    database.dispose()


@pytest.fixture()
def vault(keys_db: Database) -> Vault:
    return Vault(TEST_SECRET, keys_db)
