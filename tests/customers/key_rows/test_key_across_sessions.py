"""An erasure committed by another session (another process) is seen by the next
transaction on direct rows; and what a transaction on direct rows sees of a key another
session changed while it ran."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from sqlmodel import Session

from refund_desk import clock
from refund_desk.storage import direct_rows
from refund_desk.storage.crypto import Vault, destroy_customer_key
from refund_desk.storage.db import Database
from tests.conftest import TEST_SECRET
from tests.customers.key_rows.keys_common import direct_write, make_customer


@pytest.fixture()
def other(any_db_url: str) -> Iterator[Database]:
    """A second handle on the same database: another process."""
    database = Database.from_url(any_db_url)
    yield database
    database.dispose()


def test_erasure_by_another_session_between_two_direct_transactions(
    keys_db: Database, other: Database, vault: Vault
) -> None:
    eh, token = make_customer(keys_db, vault, "a@example.com")
    with direct_write(keys_db) as session:
        assert vault.decrypt(token, session=session) == "v1"
    with other.write() as session:
        assert destroy_customer_key(session, eh, clock.now())
    for direct in (True, False):
        with keys_db.write() as session:
            if direct:
                direct_rows.use_direct_rows(session)
            assert vault.decrypt(token, session=session) is None
            session.rollback()
        with keys_db.read() as session:
            if direct:
                direct_rows.use_direct_rows(session)
            assert vault.decrypt(token, session=session) is None


def test_returning_customer_by_another_session_between_two_direct_transactions(
    keys_db: Database, other: Database, vault: Vault
) -> None:
    eh, token = make_customer(keys_db, vault, "a@example.com")
    with direct_write(keys_db) as session:
        assert vault.decrypt(token, session=session) == "v1"
    other_vault = Vault(TEST_SECRET, other)
    with other.write() as session:
        assert destroy_customer_key(session, eh, clock.now())
    with other.write() as session:
        new_token = other_vault.for_customer(session, eh).encrypt("v2")
    with direct_write(keys_db) as session:
        assert vault.decrypt(token, session=session) is None
        assert vault.decrypt(new_token, session=session) == "v2"
        session.rollback()


def test_one_session_object_reused_for_two_direct_transactions(
    keys_db: Database, other: Database, vault: Vault
) -> None:
    """A session used for several transactions forgets its direct rows at each end."""
    eh, token = make_customer(keys_db, vault, "a@example.com")
    with Session(keys_db.engine, expire_on_commit=False) as session:
        with session.begin():
            direct_rows.use_direct_rows(session)
            assert vault.decrypt(token, session=session) == "v1"
        with other.write() as erase:
            assert destroy_customer_key(erase, eh, clock.now())
        with session.begin():
            direct_rows.use_direct_rows(session)
            assert vault.decrypt(token, session=session) is None


@pytest.mark.postgres
@pytest.mark.parametrize("erased_first", [False, True])
def test_pg_a_key_changed_by_another_process_meanwhile_is_read_as_it_is_now(
    pg_url: str, erased_first: bool
) -> None:
    """On PostgreSQL (read committed) a transaction on direct rows reads the key (generation
    1); another process erases the customer and the customer returns (generation 2),
    committed; this transaction's `for_customer` then reads the row as it is now (FOR SHARE)
    and seals under generation 2. Its later reads, after the ORM's rows are collected, open
    the field it sealed under the live key and not one of the destroyed key: on PostgreSQL
    the key is the ORM's row, read afresh under the share lock (`populate_existing`), never a
    direct row that would keep generation 1.

    `erased_first`: the erasure was committed before this transaction, which reads the old
    field as None (a direct row of the erased key); the customer returns in another process
    meanwhile; `for_customer` finds the live key under the share lock (no savepoint rolled
    back), and the field it seals under it then does not open."""
    db, other = Database.from_url(pg_url), Database.from_url(pg_url)
    try:
        vault = Vault(TEST_SECRET, db)
        eh, token = make_customer(db, vault, "a@example.com")
        if erased_first:
            with db.write() as session:
                assert destroy_customer_key(session, eh, clock.now())
        with db.write() as session:
            direct_rows.use_direct_rows(session)
            assert vault.decrypt(token, session=session) == (None if erased_first else "v1")
            other_vault = Vault(TEST_SECRET, other)
            if not erased_first:
                with other.write() as elsewhere:
                    assert destroy_customer_key(elsewhere, eh, clock.now())
            with other.write() as elsewhere:
                assert other_vault.for_customer(elsewhere, eh).generation == 2
            cipher = vault.for_customer(session, eh)
            assert cipher.generation == 2
            sealed = cipher.encrypt("v2")
            gc.collect()
            assert vault.decrypt(sealed, session=session) == "v2"
            assert vault.decrypt(token, session=session) is None
            session.rollback()
    finally:
        db.dispose()
        other.dispose()
