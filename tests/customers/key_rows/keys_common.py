"""A customer with a live key and a field sealed under it; the key table as stored; a write
transaction on direct rows."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import text
from sqlmodel import Session

from refund_desk.storage import direct_rows
from refund_desk.storage.crypto import Vault
from refund_desk.storage.db import Database


def make_customer(db: Database, vault: Vault, email: str, value: str = "v1") -> tuple[str, str]:
    """A customer with a live key (committed) and a token sealed under it."""
    email_hash = vault.email_hash(email)
    with db.write() as session:
        token = vault.for_customer(session, email_hash).encrypt(value)
    assert token is not None
    return email_hash, token


def key_table(db: Database) -> list[tuple[Any, ...]]:
    with db.engine.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                text(
                    "SELECT email_hash, generation, key_enc, erased_at FROM customer_keys"
                    " ORDER BY email_hash"
                )
            )
        ]


@contextmanager
def direct_write(db: Database) -> Iterator[Session]:
    """A write transaction that uses direct rows, as a refund's advice and decision do."""
    with db.write() as session:
        direct_rows.use_direct_rows(session)
        yield session
