"""The hot statements run with the driver's cursor (`storage/prepared.py`) send what
SQLAlchemy would send, read back what it would read, and fail as it would fail.

The oracle is SQLAlchemy itself: the statements a real refund runs directly are run again
through SQLAlchemy, with a listener catching the SQL and the parameters it hands the driver.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Connection, event, text
from sqlalchemy.exc import IntegrityError, MultipleResultsFound, NoResultFound, OperationalError

from refund_desk.runtime import Runtime
from refund_desk.storage import prepared
from refund_desk.storage.db import Database, plain
from refund_desk.storage.jobs import queue
from refund_desk.storage.prepared import Prepared
from tests.helpers import Harness

# the statement, its parameters, what went out, its rows, and SQLAlchemy's for a read
Ran = tuple[Prepared, Any, Any, Any, Any]


@pytest.fixture()
def ran_directly(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Ran]]:
    """Every direct run: the parameters given, the SQL and parameters the driver got, rows."""
    runs: list[Ran] = []
    build = prepared._Plan.parameters

    def parameters(plan: Any, given: Any) -> Any:
        sent = build(plan, given)
        pending.append((given, (plan.sql, sent)))
        return sent

    pending: list[tuple[Any, Any]] = []
    original_run = Prepared.run

    def run(self: Prepared, connection: Connection, params: Any = None) -> Any:
        pending.clear()
        rows = original_run(self, connection, params)
        if pending:
            sent = (
                (pending[0][1][0], [p[1][1] for p in pending])
                if isinstance(params, list) and len(params) > 1
                else pending[0][1]
            )
            oracle = _read_through_sqlalchemy(connection, self, params, sent[0])
            runs.append((self, params, sent, list(rows), oracle))
        return rows

    monkeypatch.setattr(prepared._Plan, "parameters", parameters)
    monkeypatch.setattr(Prepared, "run", run)
    yield runs


def _read_through_sqlalchemy(
    connection: Connection, statement: Prepared, params: Any, sql: str
) -> tuple[Any, Any] | None:
    """A read, run again at once in the same transaction through SQLAlchemy: what it handed
    the driver, and its rows."""
    if not sql.lstrip().upper().startswith("SELECT"):
        return None
    seen: list[tuple[str, Any]] = []

    def catch(_conn: Any, _cursor: Any, sql: str, parameters: Any, *_: Any) -> None:
        seen.append((sql, parameters))

    event.listen(connection, "before_cursor_execute", catch)
    try:
        rows = connection.execute(statement.statement, params).all()
    finally:
        event.remove(connection, "before_cursor_execute", catch)
    return seen[-1], rows


def _through_sqlalchemy(db: Database, statement: Any, params: Any) -> tuple[Any, Any]:
    """What SQLAlchemy hands the driver for the same statement and parameters, and its
    rows (None if the statement failed: a row the refund inserted is there already)."""
    seen: list[tuple[str, Any]] = []

    def catch(_conn: Any, _cursor: Any, sql: str, parameters: Any, *_: Any) -> None:
        seen.append((sql, parameters))

    event.listen(db.engine, "before_cursor_execute", catch)
    try:
        with db.engine.connect() as connection:
            connection.begin()
            rows = None
            try:
                result = connection.execute(statement, params)
                rows = result.all() if result.returns_rows else []
            except IntegrityError:
                pass
            connection.rollback()
    finally:
        event.remove(db.engine, "before_cursor_execute", catch)
    statement_sent = [s for s in seen if not s[0].startswith("BEGIN")]
    return statement_sent[0], rows


def _normal(sent: Any) -> Any:
    """SQL and parameters in one shape: tuples as tuples, a psycopg `Json` as what it wraps
    (two wrappers of equal values are not equal)."""
    sql, parameters = sent

    def value(v: Any) -> Any:
        return ("json", v.obj) if type(v).__name__ == "Json" else v

    def one(p: Any) -> Any:
        if isinstance(p, dict):
            return {k: value(v) for k, v in p.items()}
        return tuple(value(v) for v in p)

    if isinstance(parameters, list):  # executemany
        return sql, [one(p) for p in parameters]
    return sql, one(parameters)


def test_a_refund_sends_what_sqlalchemy_would_send(
    any_runtime: Runtime, ran_directly: list[Ran]
) -> None:
    desk = Harness(any_runtime)
    desk.publish()
    payment = desk.payment()
    assert desk.post(desk.request(payment)).json()["status"] == "refunded"
    # the same payment again: the paths of a payment seen before (its lock, our refunds)
    desk.post(desk.request(payment, amount="1.00"))

    kinds = {" ".join(r[2][0].split()[:2]) for r in ran_directly}
    assert {"INSERT INTO", "UPDATE jobs", "SELECT audit_head.seq,"} <= kinds, kinds
    assert len(ran_directly) > 30
    for statement, params, sent, rows, read in ran_directly:
        if read is not None:  # a read: compared in its own transaction, rows and all
            oracle_sent, oracle_rows = read
            assert [tuple(r) for r in rows] == [tuple(r) for r in oracle_rows], sent[0]
            for ours, theirs in zip(rows, oracle_rows, strict=True):
                assert [type(v) for v in ours] == [type(v) for v in theirs], sent[0]
        else:
            oracle_sent, _ = _through_sqlalchemy(any_runtime.db, statement.statement, params)
        assert _normal(sent) == _normal(oracle_sent), sent[0]


def test_a_unique_violation_is_sqlalchemys_integrity_error(db: Database) -> None:
    with db.write() as session:
        queue(session, kind="notify", payload={}, dedupe_key="once")
    with pytest.raises(IntegrityError), db.write() as session:
        queue(session, kind="notify", payload={}, dedupe_key="once")
    with db.write() as session:  # the connection went back to the pool usable
        assert queue(session, kind="notify", payload={}, dedupe_key="twice") > 0


def test_a_listener_on_the_engine_sees_every_statement(db: Database) -> None:
    """Tracing and statement counters listen to the engine: they are not bypassed."""
    seen: list[str] = []

    def catch(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        seen.append(sql)

    event.listen(db.engine, "before_cursor_execute", catch)
    try:
        with db.write() as session:
            job_id = queue(session, kind="notify", payload={"n": 1})
    finally:
        event.remove(db.engine, "before_cursor_execute", catch)
    assert job_id > 0
    assert any(sql.startswith("INSERT INTO jobs") for sql in seen), seen


def test_a_connection_outside_a_transaction_is_begun_as_sqlalchemy_would(db: Database) -> None:
    statement = Prepared(text("SELECT 1 AS one"))
    with db.look() as connection:
        assert statement.run(connection).one().one == 1
        assert connection.in_transaction()


def test_many_rows_at_once(db: Database) -> None:
    insert_job = Prepared(
        text(
            "INSERT INTO jobs (kind, payload, status, due_at, attempt, failures, max_attempts, "
            "created_at) VALUES (:kind, '{}', 'done', '2026-01-01', 0, 0, 1, '2026-01-01')"
        )
    )
    with db.write() as session:
        done = insert_job.run(plain(session), [{"kind": "a"}, {"kind": "b"}, {"kind": "c"}])
    assert done.rowcount == 3
    with db.read() as session:
        kinds = session.execute(text("SELECT kind FROM jobs ORDER BY kind")).scalars().all()
    assert kinds == ["a", "b", "c"]


@pytest.mark.postgres
def test_a_dead_connection_is_discarded_not_reused(pg_db: Database) -> None:
    """The driver's error on a connection the server closed goes through SQLAlchemy's own
    handler: the connection is invalidated, and the pool never hands it out again."""
    statement = Prepared(text("SELECT 1 AS one"))
    with pg_db.engine.connect() as victim:
        pid = victim.execute(text("SELECT pg_backend_pid()")).scalar_one()
        victim.commit()
        with pg_db.engine.connect() as killer:
            killer.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            killer.commit()
        with pytest.raises(OperationalError) as failed:
            statement.run(victim)
        assert failed.value.connection_invalidated
    for _ in range(12):  # more than the pool holds: none of them is the dead one
        with pg_db.engine.connect() as connection:
            assert statement.run(connection).one().one == 1


def test_one_row_or_sqlalchemys_error(db: Database) -> None:
    none = Prepared(text("SELECT 1 AS one WHERE 1 = 0"))
    two = Prepared(text("SELECT 1 AS one UNION ALL SELECT 2"))
    with db.look() as connection:
        with pytest.raises(NoResultFound):
            none.run(connection).one()
        with pytest.raises(MultipleResultsFound):
            two.run(connection).one()
        assert none.run(connection).first() is None
        assert two.run(connection).scalars() == [1, 2]


def test_a_listener_on_the_connection_sees_the_statement(db: Database) -> None:
    seen: list[str] = []

    def catch(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        seen.append(sql)

    statement = Prepared(text("SELECT 1 AS one"))
    with db.look() as connection:
        event.listen(connection, "before_cursor_execute", catch)
        assert statement.run(connection).one().one == 1
    assert "SELECT 1 AS one" in seen
