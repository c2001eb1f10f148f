"""A customer with a live key and a field sealed under it; the key table as stored."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

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
