"""`Prepared` and SQLite's direct BEGIN: errors come back as SQLAlchemy's exceptions; a
connection the server killed is invalidated and never handed out again; the session and the
pool are usable after an error mid-transaction."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import (
    DBAPIError,
    IntegrityError,
    OperationalError,
    StatementError,
)

from refund_desk.storage.db import Database, plain
from refund_desk.storage.jobs import queue
from refund_desk.storage.models import Job
from refund_desk.storage.prepared import Prepared

_JOBS = Job.__table__  # type: ignore[attr-defined]
_DUE = sa.select(sa.func.count()).select_from(_JOBS).where(_JOBS.c.due_at < sa.bindparam("t"))


def _error_of(fn: Any) -> BaseException:
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError("no error")


def test_a_bad_value_for_a_type_is_sqlalchemys_statement_error(db: Database) -> None:
    """A naive datetime given to a UTC column: SQLAlchemy says `StatementError`."""
    naive = {"t": datetime(2026, 1, 1)}
    with db.engine.connect() as c:
        theirs = _error_of(lambda: c.execute(_DUE, naive))
        c.rollback()
        ours = _error_of(lambda: Prepared(_DUE).run(c, naive))
    assert isinstance(theirs, StatementError)
    assert type(ours) is type(theirs), (type(ours), type(theirs))


def test_unique_violation_in_a_savepoint_then_the_transaction_goes_on(db: Database) -> None:
    with db.write() as session:
        queue(session, kind="notify", payload={}, dedupe_key="k1")
    with db.write() as session:
        queue(session, kind="notify", payload={"ü": "✓"}, dedupe_key="k2")
        with pytest.raises(IntegrityError), session.begin_nested():
            queue(session, kind="notify", payload={}, dedupe_key="k1")
        queue(session, kind="notify", payload={}, dedupe_key="k3")
    with db.read() as session:
        keys = session.execute(sa.select(_JOBS.c.dedupe_key).order_by(_JOBS.c.id)).scalars().all()
    assert keys == ["k1", "k2", "k3"]


def test_an_error_then_the_pool_hands_out_good_connections(db: Database) -> None:
    bad = Prepared(sa.text("SELECT * FROM no_such_table"))
    for _ in range(3):
        with pytest.raises(DBAPIError), db.write() as session:
            bad.run(plain(session))
    for _ in range(12):
        with db.write() as session:
            assert queue(session, kind="notify", payload={}) > 0


@pytest.mark.postgres
def test_after_an_error_in_a_pg_transaction_the_next_statement_fails_as_sqlalchemys(
    pg_db: Database,
) -> None:
    one = Prepared(sa.text("SELECT 1 AS one"))
    boom = sa.text("SELECT 1/0")
    with pg_db.engine.connect() as c:
        c.begin()
        with pytest.raises(DBAPIError):
            c.execute(boom)
        theirs = _error_of(lambda: c.execute(one.statement))
        c.rollback()
        c.begin()
        with pytest.raises(DBAPIError):
            Prepared(boom).run(c)
        ours = _error_of(lambda: one.run(c))
        c.rollback()
        assert one.run(c).one().one == 1
    assert type(ours) is type(theirs)


@pytest.mark.postgres
def test_a_killed_connection_in_a_write_session_is_discarded(pg_db: Database) -> None:
    """The server ends the session of the connection a write transaction holds: the next
    hot statement fails as SQLAlchemy's OperationalError with the connection invalidated,
    the session rolls back cleanly, and no later transaction gets the dead connection."""
    one = Prepared(sa.text("SELECT 1 AS one"))
    pids = set()
    failed: BaseException | None = None
    try:
        with pg_db.write() as session:
            connection = plain(session)
            pid = one.run(connection).one()
            pid = Prepared(sa.text("SELECT pg_backend_pid() AS pid")).run(connection).one().pid
            with pg_db.engine.connect() as killer:
                killer.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
                killer.commit()
            queue(session, kind="notify", payload={})
    except OperationalError as exc:
        failed = exc
    assert failed is not None and failed.connection_invalidated  # type: ignore[attr-defined]
    for _ in range(25):
        with pg_db.write() as session:
            pids.add(
                Prepared(sa.text("SELECT pg_backend_pid() AS pid")).run(plain(session)).one().pid
            )
            assert queue(session, kind="notify", payload={}) > 0
    assert pid not in pids


def test_sqlite_begin_on_a_locked_file_is_sqlalchemys_error_and_the_connection_recovers(
    sqlite_url: str,
) -> None:
    db = Database.from_url(sqlite_url)
    path = sqlite_url.removeprefix("sqlite:///")
    try:
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        with db.engine.connect() as c:
            c.connection.dbapi_connection.execute("PRAGMA busy_timeout=50")  # type: ignore
            c.rollback()
            error = _error_of(lambda: Prepared(_DUE).run(c, {"t": datetime.now().astimezone()}))
            assert isinstance(error, OperationalError), type(error)
            assert not c.in_transaction()
            blocker.execute("ROLLBACK")
            blocker.close()
            assert Prepared(sa.text("SELECT 1 AS one")).run(c).one().one == 1
            assert c.in_transaction()
            c.rollback()
        with db.write() as session:
            assert queue(session, kind="notify", payload={}) > 0
    finally:
        db.dispose()


class _Deadline(BaseException):
    """Stands in for an exit exception (KeyboardInterrupt, SystemExit) during a query."""


@pytest.mark.postgres
@pytest.mark.parametrize("path", ["sqlalchemy", "prepared"])
def test_an_exit_exception_mid_query_is_raised_as_itself_and_the_pool_recovers(
    pg_db: Database, path: str
) -> None:
    """SQLAlchemy treats an exit exception inside a statement as a disconnect (the
    connection's state is unknown): it invalidates it, and the caller sees the exception
    itself. The same on the driver's cursor."""
    import signal

    def interrupt(*_: Any) -> None:
        raise _Deadline()

    sleep = sa.text("SELECT pg_sleep(0.5) AS s")
    previous = signal.signal(signal.SIGALRM, interrupt)
    raised: BaseException | None = None
    try:
        with pg_db.write() as session:
            connection = plain(session)
            signal.setitimer(signal.ITIMER_REAL, 0.1)
            if path == "prepared":
                Prepared(sleep).run(connection)
            else:
                connection.execute(sleep)
    except BaseException as exc:
        raised = exc
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert isinstance(raised, _Deadline), repr(raised)
    one = Prepared(sa.text("SELECT 1 AS one"))
    for _ in range(25):
        with pg_db.write() as session:
            assert one.run(plain(session)).one().one == 1


@pytest.mark.parametrize("path", ["sqlalchemy", "prepared"])
def test_a_missing_parameter_is_sqlalchemys_statement_error(db: Database, path: str) -> None:
    statement = (
        sa.select(sa.func.count()).select_from(_JOBS).where(_JOBS.c.kind == sa.bindparam("kind"))
    )
    with db.engine.connect() as c:
        if path == "prepared":
            Prepared(statement).run(c, {"kind": "x"})  # planned with its name
            error = _error_of(lambda: Prepared(statement).run(c, {}))
        else:
            error = _error_of(lambda: c.execute(statement, {}))
        c.rollback()
    assert isinstance(error, StatementError), type(error)
