"""Without direct rows a transaction reads the key as an ORM row kept for
the transaction; a rolled-back transaction on direct rows leaves the key table
byte for byte as it was, a committed one leaves what it did."""

from __future__ import annotations

import gc

import pytest

from refund_desk import clock
from refund_desk.storage import direct_rows
from refund_desk.storage.crypto import Vault, destroy_customer_key
from refund_desk.storage.db import Database, remembered
from refund_desk.storage.models import CustomerKey
from tests.customers.key_rows.keys_common import key_table, make_customer


def test_without_direct_rows_the_key_is_an_orm_row_kept_for_the_transaction(
    keys_db: Database, vault: Vault
) -> None:
    eh, token = make_customer(keys_db, vault, "a@example.com")
    with keys_db.write() as session:
        assert vault.decrypt(token, session=session) == "v1"
        gc.collect()
        keys = [r for r in session.identity_map.values() if isinstance(r, CustomerKey)]
        assert len(keys) == 1 and keys[0].email_hash == eh
        assert not remembered(session, "direct rows")
        assert destroy_customer_key(session, eh, clock.now())
        assert vault.decrypt(token, session=session) is None
        session.flush()
        gc.collect()
        assert vault.decrypt(token, session=session) is None
        session.rollback()


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("steps", ["erase", "erase_return", "read_erase_return_read"])
def test_rollback_leaves_the_key_table_as_it_was(
    keys_db: Database, vault: Vault, direct: bool, steps: str
) -> None:
    eh, token = make_customer(keys_db, vault, "a@example.com")
    make_customer(keys_db, vault, "b@example.com")
    before = key_table(keys_db)
    with keys_db.write() as session:
        if direct:
            direct_rows.use_direct_rows(session)
        if steps.startswith("read"):
            assert vault.decrypt(token, session=session) == "v1"
        assert destroy_customer_key(session, eh, clock.now())
        if "return" in steps:
            session.flush()
            gc.collect()
            assert vault.for_customer(session, eh).generation == 2
        if steps.endswith("read"):
            assert vault.decrypt(token, session=session) is None
        session.rollback()
    assert key_table(keys_db) == before
    with keys_db.write() as session:
        if direct:
            direct_rows.use_direct_rows(session)
        assert vault.decrypt(token, session=session) == "v1"


@pytest.mark.parametrize("direct", [True, False])
def test_rollback_by_an_exception_leaves_the_key_table_as_it_was(
    keys_db: Database, vault: Vault, direct: bool
) -> None:
    eh, token = make_customer(keys_db, vault, "a@example.com")
    before = key_table(keys_db)
    with pytest.raises(KeyError), keys_db.write() as session:
        if direct:
            direct_rows.use_direct_rows(session)
        assert vault.decrypt(token, session=session) == "v1"
        assert destroy_customer_key(session, eh, clock.now())
        raise KeyError("boom")
    assert key_table(keys_db) == before


@pytest.mark.parametrize("direct", [True, False])
def test_commit_leaves_what_it_did(keys_db: Database, vault: Vault, direct: bool) -> None:
    eh, token = make_customer(keys_db, vault, "a@example.com")
    other, other_token = make_customer(keys_db, vault, "b@example.com")
    with keys_db.write() as session:
        if direct:
            direct_rows.use_direct_rows(session)
        assert vault.decrypt(token, session=session) == "v1"
        assert destroy_customer_key(session, eh, clock.now())
        assert vault.decrypt(token, session=session) is None
    rows = {r[0]: r for r in key_table(keys_db)}
    assert rows[eh][1] == 1 and rows[eh][2] is None and rows[eh][3] is not None
    assert rows[other][2] is not None
    with keys_db.write() as session:
        if direct:
            direct_rows.use_direct_rows(session)
        new_token = vault.for_customer(session, eh).encrypt("v2")
        assert vault.decrypt(new_token, session=session) == "v2"
    rows = {r[0]: r for r in key_table(keys_db)}
    assert rows[eh][1] == 2 and rows[eh][2] is not None and rows[eh][3] is None
    with keys_db.read() as session:
        direct_rows.use_direct_rows(session)
        assert vault.decrypt(new_token, session=session) == "v2"
        assert vault.decrypt(token, session=session) is None
        assert vault.decrypt(other_token, session=session) == "v1"
