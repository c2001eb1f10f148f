"""`direct_rows.forget` on a row never read does nothing (no statement, no error);
on a row read and changed it writes the change (one UPDATE) and drops the row, so the next
`load` reads it anew; on a row read and not changed it writes nothing and drops it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.orm.exc import StaleDataError

from refund_desk.storage import direct_rows
from refund_desk.storage.crypto import Vault
from refund_desk.storage.db import Database
from refund_desk.storage.models import CustomerKey
from tests.customers.key_rows.keys_common import direct_write, key_table, make_customer


@contextmanager
def statements(db: Database) -> Iterator[list[str]]:
    seen: list[str] = []

    def note(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        seen.append(" ".join(statement.split()).lower())

    event.listen(db.engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(db.engine, "before_cursor_execute", note)


def _generation(session: Any, eh: str) -> int:
    conn = direct_rows.plain(session)
    return int(conn.execute(text("SELECT generation FROM customer_keys WHERE email_hash = :h"),
                            {"h": eh}).scalar_one())  # fmt: skip


def test_forget_a_row_never_read_with_no_direct_rows_at_all(
    keys_db: Database, vault: Vault
) -> None:
    eh, _ = make_customer(keys_db, vault, "a@example.com")
    with direct_write(keys_db) as session:
        with statements(keys_db) as seen:
            direct_rows.forget(session, CustomerKey, eh)
            direct_rows.forget(session, CustomerKey, "no-such-key")
        assert seen == []
        session.rollback()


def test_forget_a_row_never_read_while_others_are_held(keys_db: Database, vault: Vault) -> None:
    eh, _ = make_customer(keys_db, vault, "a@example.com")
    other, _ = make_customer(keys_db, vault, "b@example.com")
    with direct_write(keys_db) as session:
        held = direct_rows.load(session, CustomerKey, other)
        assert held is not None
        held.generation = 7  # a change of another row is not written by forgetting this one
        with statements(keys_db) as seen:
            direct_rows.forget(session, CustomerKey, eh)
        assert seen == []
        assert direct_rows.load(session, CustomerKey, other) is held  # still held
        assert _generation(session, other) == 1
        session.rollback()


def test_forget_in_a_transaction_without_direct_rows(keys_db: Database, vault: Vault) -> None:
    eh, _ = make_customer(keys_db, vault, "a@example.com")
    with keys_db.write() as session:
        with statements(keys_db) as seen:
            direct_rows.forget(session, CustomerKey, eh)
        assert seen == []


def test_forget_a_row_read_and_changed_writes_it_then_drops_it(
    keys_db: Database, vault: Vault
) -> None:
    eh, _ = make_customer(keys_db, vault, "a@example.com")
    with direct_write(keys_db) as session:
        row = direct_rows.load(session, CustomerKey, eh)
        assert row is not None and row.generation == 1
        row.generation = 5
        with statements(keys_db) as seen:
            direct_rows.forget(session, CustomerKey, eh)
        assert [s for s in seen if s.startswith("update")] and len(seen) == 1, seen
        assert _generation(session, eh) == 5  # written
        again = direct_rows.load(session, CustomerKey, eh)
        assert again is not None and again is not row  # dropped: read anew
        assert again.generation == 5
        with statements(keys_db) as seen:
            direct_rows.forget(session, CustomerKey, eh)  # unchanged: nothing written
            direct_rows.forget(session, CustomerKey, eh)  # already dropped
        assert seen == []
        row.generation = 9  # the dropped object's later change is nobody's to write
        session.commit()
    assert [r[1] for r in key_table(keys_db)] == [5]


def test_forget_a_row_read_not_changed_drops_it_without_writing(
    keys_db: Database, vault: Vault
) -> None:
    eh, _ = make_customer(keys_db, vault, "a@example.com")
    with direct_write(keys_db) as session:
        row = direct_rows.load(session, CustomerKey, eh)
        assert row is not None
        with statements(keys_db) as seen:
            direct_rows.forget(session, CustomerKey, eh)
        assert seen == []
        # changed meanwhile by a statement: the next load sees it
        direct_rows.plain(session).execute(
            text("UPDATE customer_keys SET generation = 3 WHERE email_hash = :h"), {"h": eh}
        )
        again = direct_rows.load(session, CustomerKey, eh)
        assert again is not None and again is not row and again.generation == 3
        session.rollback()
    assert [r[1] for r in key_table(keys_db)] == [1]


def test_forget_a_changed_row_deleted_meanwhile_raises_like_the_orm(
    keys_db: Database, vault: Vault
) -> None:
    eh, _ = make_customer(keys_db, vault, "a@example.com")
    with direct_write(keys_db) as session:
        row = direct_rows.load(session, CustomerKey, eh)
        assert row is not None
        row.generation = 2
        direct_rows.plain(session).execute(
            text("DELETE FROM customer_keys WHERE email_hash = :h"), {"h": eh}
        )
        with pytest.raises(StaleDataError):
            direct_rows.forget(session, CustomerKey, eh)
        session.rollback()


def test_forget_an_unchanged_row_after_a_savepoint_rolled_back(
    keys_db: Database, vault: Vault
) -> None:
    """The documented rule: after a savepoint rolled back over direct rows, any write raises.
    `forget` of a row with no change is not a write, yet it raises too (its `_write` checks
    first). Recorded as behaviour; it is why a customer's key is never a direct row on
    PostgreSQL, where `_share_live_key_waiting` may roll a savepoint back."""
    eh, _ = make_customer(keys_db, vault, "a@example.com")
    with direct_write(keys_db) as session:
        assert direct_rows.load(session, CustomerKey, eh) is not None
        look = session.begin_nested()
        look.rollback()
        with pytest.raises(RuntimeError):
            direct_rows.forget(session, CustomerKey, eh)
        session.rollback()
