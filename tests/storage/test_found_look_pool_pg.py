"""`Database.look` runs on an AUTOCOMMIT connection on PostgreSQL. The
connection must go back to the pool in transactional mode: a later `write` or `read` on the
same pooled connection is one transaction (atomic), never statement-by-statement."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import ProgrammingError

from refund_desk.storage.db import Database, make_engine

pytestmark = pytest.mark.postgres


@pytest.fixture()
def small_db(pg_url: str) -> Iterator[Database]:
    db = Database(make_engine(pg_url, pool_size=1))
    with db.engine.begin() as conn:
        conn.execute(text("CREATE TABLE review_atomic (n int)"))
    yield db
    db.dispose()


def _driver(session_or_conn: object) -> object:
    conn = session_or_conn.connection()  # type: ignore[attr-defined]
    return conn.connection.driver_connection


class Boom(Exception):
    pass


def _a_failed_write_leaves_nothing(db: Database) -> None:
    """A write that raises after its INSERT leaves no row: it ran as one transaction."""
    with pytest.raises(Boom), db.write() as session:
        session.execute(text("INSERT INTO review_atomic VALUES (1)"))
        raise Boom
    with db.read() as session:
        assert session.execute(text("SELECT count(*) FROM review_atomic")).scalar() == 0


def test_a_write_after_a_look_on_the_same_pooled_connection_is_atomic(small_db: Database) -> None:
    for i in range(5):
        with small_db.look() as conn:
            assert conn.execute(text("SELECT 1")).scalar() == 1
            look_pid = conn.execute(text("SELECT pg_backend_pid()")).scalar()
        with pytest.raises(Boom), small_db.write() as session:
            assert session.execute(text("SELECT pg_backend_pid()")).scalar() == look_pid
            assert _driver(session).autocommit is False  # type: ignore[attr-defined]
            session.execute(text("INSERT INTO review_atomic VALUES (:n)"), {"n": i})
            raise Boom
        with small_db.read() as session:
            assert _driver(session).autocommit is False  # type: ignore[attr-defined]
            assert session.execute(text("SELECT count(*) FROM review_atomic")).scalar() == 0


def test_a_look_that_raises_leaves_the_connection_transactional(small_db: Database) -> None:
    with pytest.raises(Boom), small_db.look() as conn:
        conn.execute(text("SELECT 1"))
        raise Boom
    _a_failed_write_leaves_nothing(small_db)


def test_a_failed_statement_in_a_look_then_a_write(small_db: Database) -> None:
    with pytest.raises(ProgrammingError), small_db.look() as conn:
        conn.execute(text("SELECT * FROM no_such_table"))
    with small_db.look() as conn:  # the connection is usable after an error in autocommit
        assert conn.execute(text("SELECT 2")).scalar() == 2
    _a_failed_write_leaves_nothing(small_db)


def test_an_invalidated_look_connection_is_replaced_transactional(small_db: Database) -> None:
    with small_db.look() as conn:
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar()
    other = create_engine(small_db.engine.url, isolation_level="AUTOCOMMIT")
    with other.connect() as admin:  # another client ends the pooled connection's session
        admin.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    other.dispose()
    time.sleep(0.05)
    _a_failed_write_leaves_nothing(small_db)
