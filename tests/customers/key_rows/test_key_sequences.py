"""Targeted sequences on a customer's key row in transactions that use direct rows."""

from __future__ import annotations

import gc

from refund_desk import clock
from refund_desk.storage.crypto import Vault, destroy_customer_key
from refund_desk.storage.db import Database
from refund_desk.storage.models import CustomerKey
from tests.customers.key_rows.keys_common import direct_write, key_table, make_customer


def test_decrypt_destroy_decrypt_flush_gc(keys_db: Database, vault: Vault) -> None:
    eh, token = make_customer(keys_db, vault, "a@example.com")
    with direct_write(keys_db) as session:
        assert vault.decrypt(token, session=session) == "v1"
        assert destroy_customer_key(session, eh, clock.now())
        assert vault.decrypt(token, session=session) is None
        gc.collect()
        assert vault.decrypt(token, session=session) is None
        session.flush()
        gc.collect()
        assert vault.decrypt(token, session=session) is None
        session.rollback()


def test_destroy_without_prior_read_then_decrypt(keys_db: Database, vault: Vault) -> None:
    eh, token = make_customer(keys_db, vault, "a@example.com")
    with direct_write(keys_db) as session:
        assert destroy_customer_key(session, eh, clock.now())
        gc.collect()
        assert vault.decrypt(token, session=session) is None
        session.flush()
        gc.collect()
        assert vault.decrypt(token, session=session) is None
        session.rollback()


def test_returning_customer_in_one_direct_transaction(keys_db: Database, vault: Vault) -> None:
    """Read (direct row), erase, flush, gc, make a new generation, seal, read both."""
    eh, token = make_customer(keys_db, vault, "a@example.com")
    with direct_write(keys_db) as session:
        assert vault.decrypt(token, session=session) == "v1"
        assert destroy_customer_key(session, eh, clock.now())
        session.flush()
        gc.collect()
        again = vault.for_customer(session, eh)
        assert again.generation == 2
        new_token = again.encrypt("v2")
        gc.collect()
        assert vault.decrypt(new_token, session=session) == "v2"
        assert vault.decrypt(token, session=session) is None
        session.rollback()


def test_erased_before_then_read_then_for_customer(keys_db: Database, vault: Vault) -> None:
    """The erasure committed earlier; this direct-rows transaction reads an old field (the
    erased key row becomes a direct row) and then the customer returns."""
    eh, token = make_customer(keys_db, vault, "a@example.com")
    with keys_db.write() as session:
        assert destroy_customer_key(session, eh, clock.now())
    with direct_write(keys_db) as session:
        assert vault.decrypt(token, session=session) is None
        again = vault.for_customer(session, eh)
        assert again.generation == 2
        new_token = again.encrypt("v2")
        assert vault.decrypt(new_token, session=session) == "v2"
        gc.collect()
        assert vault.decrypt(new_token, session=session) == "v2"
        assert vault.decrypt(token, session=session) is None
    rows = key_table(keys_db)
    assert [(r[0], r[1], r[2] is not None) for r in rows] == [(eh, 2, True)]


def test_erased_before_other_direct_row_held_then_for_customer(
    keys_db: Database, vault: Vault
) -> None:
    """As above, with another customer's key row held as a direct row (a refund's
    transaction holds its case etc. as direct rows)."""
    _other, other_token = make_customer(keys_db, vault, "b@example.com")
    eh, _token = make_customer(keys_db, vault, "a@example.com")
    with keys_db.write() as session:
        assert destroy_customer_key(session, eh, clock.now())
    with direct_write(keys_db) as session:
        assert vault.decrypt(other_token, session=session) == "v1"
        again = vault.for_customer(session, eh)
        assert again.generation == 2
        new_token = again.encrypt("v2")
        assert vault.decrypt(new_token, session=session) == "v2"
        assert vault.decrypt(other_token, session=session) == "v1"


def test_fresh_ready_for_erased_customer_in_direct_transaction(
    keys_db: Database, vault: Vault
) -> None:
    eh, token = make_customer(keys_db, vault, "a@example.com")
    with keys_db.write() as session:
        assert destroy_customer_key(session, eh, clock.now())
    ready = vault.ready_cipher(eh)
    assert ready.fresh
    with direct_write(keys_db) as session:
        assert vault.decrypt(token, session=session) is None
        got = vault.for_customer(session, eh, ready=ready)
        assert got.generation == 2
        new_token = got.encrypt("v2")
        assert vault.decrypt(new_token, session=session) == "v2"
        assert vault.decrypt(token, session=session) is None


def test_orm_row_in_identity_map_wins_over_direct_row(keys_db: Database, vault: Vault) -> None:
    eh, token = make_customer(keys_db, vault, "a@example.com")
    with direct_write(keys_db) as session:
        assert vault.decrypt(token, session=session) == "v1"  # direct row held
        orm_row = session.get(CustomerKey, eh)
        assert orm_row is not None
        orm_row.key_enc = None  # changed through the ORM without forget: ORM wins while held
        assert vault.decrypt(token, session=session) is None
        session.rollback()
