"""`plain(session)` is remembered per (sub)transaction: a savepoint begun since gets its
`SAVEPOINT` sent first (a rolled-back savepoint takes back a plain write; a unique violation
inside one leaves the transaction usable on PostgreSQL), a new transaction on the same
session gets its connection afresh, and a transaction a failed flush made unusable refuses
as the session does. `paused_now` in a session sees the transaction's own change."""

from __future__ import annotations

import contextlib

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, PendingRollbackError
from sqlmodel import Session

from refund_desk.governance.versions import control, paused_now
from refund_desk.storage.db import Database, plain
from refund_desk.storage.jobs import queue
from refund_desk.storage.models import Job

_JOBS = Job.__table__  # type: ignore[attr-defined]


def _keys(db: Database) -> list[str | None]:
    with db.read() as session:
        return list(
            session.execute(sa.select(_JOBS.c.dedupe_key).order_by(_JOBS.c.id)).scalars().all()
        )


def test_a_savepoint_rolled_back_takes_back_a_plain_write(db: Database) -> None:
    """plain() asked before the savepoint; a job queued inside it; the savepoint rolled back:
    the job must be gone (as with `session.connection()`, which begins the SAVEPOINT)."""
    with db.write() as session:
        queue(session, kind="notify", payload={}, dedupe_key="before")  # plain() remembered
        savepoint = session.begin_nested()
        queue(session, kind="notify", payload={}, dedupe_key="inside")
        savepoint.rollback()
        queue(session, kind="notify", payload={}, dedupe_key="after")
    assert _keys(db) == ["before", "after"]


def test_a_savepoint_rolled_back_after_a_unique_violation_lets_the_transaction_go_on(
    db: Database,
) -> None:
    with db.write() as session:
        queue(session, kind="notify", payload={}, dedupe_key="k1")
    with db.write() as session:
        queue(session, kind="notify", payload={}, dedupe_key="k2")
        try:
            with session.begin_nested():
                queue(session, kind="notify", payload={}, dedupe_key="k1")
        except IntegrityError:
            pass
        queue(session, kind="notify", payload={}, dedupe_key="k3")
    assert _keys(db) == ["k1", "k2", "k3"]


def test_plain_first_asked_inside_a_savepoint_then_after_it(db: Database) -> None:
    with db.write() as session:
        with session.begin_nested():
            queue(session, kind="notify", payload={}, dedupe_key="in-released")
        savepoint = session.begin_nested()
        queue(session, kind="notify", payload={}, dedupe_key="in-rolled-back")
        savepoint.rollback()
        queue(session, kind="notify", payload={}, dedupe_key="after")
    assert _keys(db) == ["in-released", "after"]


def test_one_session_several_transactions_each_gets_a_live_connection(db: Database) -> None:
    session = Session(db.engine)
    try:
        seen = []
        for i in range(4):
            connection = plain(session)
            assert plain(session) is connection  # remembered within the transaction
            assert not connection.closed and connection.in_transaction()
            queue(session, kind="notify", payload={}, dedupe_key=f"t{i}")
            seen.append(connection)
            if i % 2:
                session.rollback()
            else:
                session.commit()
        session.close()
        assert _keys(db) == ["t0", "t2"]
    finally:
        session.close()


def test_after_a_failed_flush_plain_refuses_as_the_session_does(db: Database) -> None:
    """The session refuses a transaction a flush failure deactivated (PendingRollbackError);
    a remembered connection must not quietly run statements in a transaction of its own
    outside the session's."""
    with db.write() as session:
        queue(session, kind="notify", payload={}, dedupe_key="dup")
    session = Session(db.engine)
    try:
        plain(session)  # remembered
        session.add(Job(kind="notify", payload={}, dedupe_key="dup", due_at=_now()))
        with contextlib.suppress(IntegrityError):
            session.flush()
        raised = None
        try:
            queue(session, kind="notify", payload={}, dedupe_key="outside-the-session")
        except PendingRollbackError as exc:
            raised = exc
        assert raised is not None, "a statement ran after the session's transaction failed"
    finally:
        session.rollback()
        session.close()
    assert _keys(db) == ["dup"]


def test_paused_now_on_a_session_sees_this_transactions_change(db: Database) -> None:
    """`paused_now(session)` autoflushes, as `session.scalars` does: a pause set on the
    control row in this transaction is seen."""
    from refund_desk.storage.models import Control

    with db.write() as session:
        if session.get(Control, 1) is None:
            session.add(Control(id=1))
    with db.write() as session:
        control(session).paused = True
        assert paused_now(session) is True


def _now():  # type: ignore[no-untyped-def]
    from refund_desk import clock

    return clock.now()
