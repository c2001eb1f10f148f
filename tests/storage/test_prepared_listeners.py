"""`Prepared` with statement listeners: SQLAlchemy runs every statement (listeners see
all of them, BEGIN included on SQLite); context work (defaults, expanding IN, literal
execute) goes through SQLAlchemy with the same results; a connection outside a transaction
is begun as SQLAlchemy would (SQLite: BEGIN IMMEDIATE on the engine, DEFERRED for reads)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine, event

from refund_desk.api_keys import create_api_key, hash_key, presented
from refund_desk.storage.db import Database, plain
from refund_desk.storage.jobs import queue
from refund_desk.storage.models import Job
from refund_desk.storage.prepared import Prepared

_JOBS = Job.__table__  # type: ignore[attr-defined]


def _catcher(seen: list[str]) -> Any:
    def catch(_c: Any, _cur: Any, sql: str, *_: Any) -> None:
        seen.append(sql)

    return catch


def test_an_engine_listener_sees_the_statements_of_look(db: Database) -> None:
    """`db.look()` runs on an engine made with `execution_options` (SQLite: DEFERRED reads;
    PostgreSQL: AUTOCOMMIT), before the listener was added to the engine."""
    key = create_api_key(db, "listeners")
    seen: list[str] = []
    catch = _catcher(seen)
    event.listen(db.engine, "before_cursor_execute", catch)
    try:
        assert presented(db, hash_key(key)) is not None
    finally:
        event.remove(db.engine, "before_cursor_execute", catch)
    assert any("FROM api_keys" in s for s in seen), seen


def test_an_after_cursor_execute_listener_alone_sees_them(db: Database) -> None:
    seen: list[str] = []
    catch = _catcher(seen)
    event.listen(db.engine, "after_cursor_execute", catch)
    try:
        with db.write() as session:
            queue(session, kind="notify", payload={})
    finally:
        event.remove(db.engine, "after_cursor_execute", catch)
    assert any(s.startswith("INSERT INTO jobs") for s in seen), seen


def test_a_listener_on_every_engine_sees_them(db: Database) -> None:
    seen: list[str] = []
    catch = _catcher(seen)
    event.listen(Engine, "before_cursor_execute", catch)
    try:
        with db.write() as session:
            queue(session, kind="notify", payload={})
    finally:
        event.remove(Engine, "before_cursor_execute", catch)
    assert any(s.startswith("INSERT INTO jobs") for s in seen), seen


def test_a_listener_on_the_connection_sees_them(db: Database) -> None:
    """SQLAlchemy's own statement events on one connection (`event.listen(connection, ...)`)
    are the engine's statement listeners too, for that connection."""
    seen: list[str] = []
    with db.engine.connect() as connection:
        event.listen(connection, "before_cursor_execute", _catcher(seen))
        Prepared(sa.select(_JOBS.c.id).where(_JOBS.c.id == sa.bindparam("i"))).run(
            connection, {"i": 1}
        )
        connection.rollback()
    assert any("FROM jobs" in s for s in seen), seen


def test_sqlite_begin_is_seen_by_a_listener(sqlite_url: str) -> None:
    db = Database.from_url(sqlite_url)
    seen: list[str] = []
    catch = _catcher(seen)
    event.listen(db.engine, "before_cursor_execute", catch)
    try:
        with db.write() as session:
            queue(session, kind="notify", payload={})
        with db.look() as connection:
            Prepared(sa.text("SELECT 1 AS one")).run(connection)
    finally:
        event.remove(db.engine, "before_cursor_execute", catch)
        db.dispose()
    begins = [s for s in seen if s.startswith("BEGIN")]
    assert begins == ["BEGIN IMMEDIATE", "BEGIN DEFERRED"], seen


@pytest.fixture()
def traced(sqlite_url: str) -> Iterator[tuple[Database, list[str]]]:
    """SQLite: every statement the driver runs, BEGIN included, seen by SQLite itself."""
    db = Database.from_url(sqlite_url)
    sql: list[str] = []

    @event.listens_for(db.engine, "connect")
    def _trace(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.set_trace_callback(sql.append)

    db.engine.dispose()
    yield db, sql
    db.dispose()


def test_sqlite_a_bare_connection_is_begun_immediate_and_look_deferred(
    traced: tuple[Database, list[str]],
) -> None:
    db, sql = traced
    ins = Prepared(sa.text("INSERT INTO control (id) SELECT 99 WHERE 0"))
    with db.engine.connect() as connection:
        sql.clear()
        ins.run(connection)
        assert connection.in_transaction()
        assert connection.connection.dbapi_connection.in_transaction  # type: ignore[union-attr]
        connection.commit()
    assert sql[0] == "BEGIN IMMEDIATE", sql
    with db.look() as connection:
        sql.clear()
        Prepared(sa.text("SELECT 1 AS one")).run(connection)
    assert sql[0] == "BEGIN DEFERRED", sql
    with db.write() as session:
        sql.clear()
        queue(session, kind="notify", payload={})
    assert sql[0] == "BEGIN IMMEDIATE" and sql[-1] == "COMMIT", sql


def test_context_work_runs_through_sqlalchemy_with_the_same_results(db: Database) -> None:
    """Python-side defaults not given, expanding IN, literal execute."""
    from refund_desk import clock

    now = clock.now()
    insert_defaults = Prepared(sa.insert(_JOBS).returning(_JOBS.c.id, _JOBS.c.status))
    expanding = Prepared(
        sa.select(_JOBS.c.id)
        .where(_JOBS.c.id.in_(sa.bindparam("ids", expanding=True)))
        .order_by(_JOBS.c.id)
    )
    literal = Prepared(
        sa.select(_JOBS.c.id)
        .where(_JOBS.c.kind == sa.bindparam("k", literal_execute=True))
        .order_by(_JOBS.c.id)
    )
    with db.write() as session:
        c = plain(session)
        made = [
            insert_defaults.run(
                c, {"kind": k, "due_at": now, "created_at": now, "payload": {"ü": i}}
            ).one()
            for i, k in enumerate(["a", "b", "a"])
        ]
        assert [m.status for m in made] == ["pending"] * 3
        ids = [m.id for m in made]
        assert expanding.run(c, {"ids": ids[:2]}).scalars() == ids[:2]
        assert expanding.run(c, {"ids": ids}).scalars() == ids
        assert expanding.run(c, {"ids": []}).scalars() == []
        assert literal.run(c, {"k": "a"}).scalars() == [ids[0], ids[2]]
        assert literal.run(c, {"k": "b"}).scalars() == [ids[1]]
        row = c.execute(
            sa.select(_JOBS.c.attempt, _JOBS.c.max_attempts).where(_JOBS.c.id == ids[0])
        )
        assert tuple(row.one()) == (0, 20)
