"""Direct rows in one transaction: it reads its own writes, nothing is half-written, a
savepoint rolled back stops them, a row deleted meanwhile is an error, and an object used after
its transaction never writes twice or stale."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import delete, func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm.exc import StaleDataError
from sqlmodel import col

from refund_desk.cases.rows import load_for_update
from refund_desk.governance.versions import control
from refund_desk.runtime import Runtime
from refund_desk.storage import direct_rows
from refund_desk.storage.audit import SYSTEM
from refund_desk.storage.db import Database, plain
from refund_desk.storage.models import AuditRecord, Case, Control, Execution, Job
from tests.helpers import Harness

FOR_A_PERSON = "I changed my mind about the colour, please take it back."


@pytest.fixture()
def desk(any_runtime: Runtime) -> Harness:
    h = Harness(any_runtime)
    h.publish()
    return h


@pytest.fixture()
def case_id(desk: Harness) -> str:
    payment = desk.payment()
    made = desk.post(desk.request(payment, message=FOR_A_PERSON)).json()
    assert made["status"] == "awaiting_approval"
    return str(made["id"])


@pytest.fixture()
def db(any_runtime: Runtime) -> Iterator[Database]:
    yield any_runtime.db


def _case(db: Database, case_id: str) -> Case:
    with db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None
        return case


def _audit_count(db: Database) -> int:
    with db.read() as session:
        return int(session.scalar(select(func.count()).select_from(AuditRecord)) or 0)


def _new_execution(db: Database, case_id: str, ex_id: str = "ex_review") -> Execution:
    return Execution(
        id=ex_id,
        idempotency_key=f"idem_{ex_id}",
        case_id=case_id,
        payment_id=_case(db, case_id).payment_id,
        amount=100,
        currency="USD",
        status="reserved",
        automatic=False,
        basis="approval",
    )


# ------------------------------------------------------------------ reading its own writes


def test_session_get_of_a_changed_case_sees_the_change(db: Database, case_id: str) -> None:
    with db.write() as session:
        direct_rows.use_direct_rows(session)
        case = load_for_update(session, case_id)
        case.park_reason = "seen by get"
        case.revision += 7
        orm = session.get(Case, case_id)
        assert orm is not None
        assert (orm.park_reason, orm.revision) == ("seen by get", case.revision)
        session.rollback()


def test_orm_query_sees_a_new_execution_and_its_later_change(db: Database, case_id: str) -> None:
    with db.write() as session:
        direct_rows.use_direct_rows(session)
        execution = _new_execution(db, case_id)
        direct_rows.add(session, execution)
        execution.status = "succeeded"
        found = session.scalars(
            select(Execution).where(
                col(Execution.case_id) == case_id, col(Execution.status) == "succeeded"
            )
        ).all()
        assert [e.id for e in found] == ["ex_review"]
        session.rollback()


def test_plain_count_after_flush_if_pending_sees_a_picked_execution_change(
    db: Database, case_id: str
) -> None:
    with db.write() as session:
        direct_rows.use_direct_rows(session)
        execution = _new_execution(db, case_id)
        direct_rows.add(session, execution)
        execution.status = "failed"
        direct_rows.flush_if_pending(session, lambda row: isinstance(row, Execution))
        n = plain(session).scalar(
            select(func.count()).select_from(Execution).where(col(Execution.status) == "reserved")
        )
        assert n == 0
        session.rollback()


def test_control_changes_seen_by_every_step(db: Database, case_id: str) -> None:
    with db.write() as session:
        direct_rows.use_direct_rows(session)
        switches = control(session)
        switches.paused = True
        assert control(session) is switches and control(session).paused
        locked = direct_rows.load(session, Control, 1, lock=True, fresh=True)
        assert locked is switches and locked.paused is True
        assert session.scalar(select(Control.paused).where(Control.id == 1)) is True
        session.rollback()
    with db.read() as session:
        c = session.get(Control, 1)
        assert c is not None and c.paused is False


# ------------------------------------------------------------------ nothing half-written


def test_savepoint_released_then_transaction_rolled_back_writes_nothing(
    db: Database, case_id: str
) -> None:
    with pytest.raises(RuntimeError, match="boom"), db.write() as session:
        direct_rows.use_direct_rows(session)
        case = load_for_update(session, case_id)
        with session.begin_nested():
            case.park_reason = "inside a released savepoint"
        raise RuntimeError("boom")
    assert _case(db, case_id).park_reason is None


def test_savepoint_rolled_back_by_an_exception_then_commit_refuses(
    db: Database, case_id: str, desk: Harness
) -> None:
    before = _audit_count(db)
    with pytest.raises(RuntimeError, match="savepoint"), db.write() as session:
        direct_rows.use_direct_rows(session)
        case = load_for_update(session, case_id)
        case.park_reason = "before the savepoint"  # not written yet
        desk.runtime.desk.audit.append(session, action="review.test", actor=SYSTEM, payload={})
        try:
            with session.begin_nested():
                case.escalation_level += 1
                raise ValueError("inside")
        except ValueError:
            pass
    assert _case(db, case_id).park_reason is None
    assert _case(db, case_id).escalation_level == 0
    assert _audit_count(db) == before


def test_change_written_inside_savepoint_that_rolls_back_is_not_committed(
    db: Database, case_id: str
) -> None:
    """The change was written inside the savepoint; its rollback undid it in the database,
    while the object still holds it. Whatever happens next, the commit must not leave the
    database believing that value was written when it was not, nor silently drop it."""
    outcome: Any = None
    try:
        with db.write() as session:
            direct_rows.use_direct_rows(session)
            case = load_for_update(session, case_id)
            sp = session.begin_nested()
            case.park_reason = "written then taken back"
            session.execute(select(Job.id).limit(1))  # written here
            sp.rollback()
            # no further change: the commit alone
    except RuntimeError as exc:
        outcome = exc
    stored = _case(db, case_id).park_reason
    assert outcome is not None or stored == "written then taken back", (
        "the commit succeeded and silently dropped a change the transaction made"
    )


def test_write_failure_at_commit_leaves_no_orm_rows_and_no_audit(
    db: Database, case_id: str, desk: Harness
) -> None:
    before = _audit_count(db)
    with pytest.raises(IntegrityError), db.write() as session:
        direct_rows.use_direct_rows(session)
        case = load_for_update(session, case_id)
        case.park_reason = "never"
        desk.runtime.desk.audit.append(session, action="review.test", actor=SYSTEM, payload={})
        case.status = None  # type: ignore[assignment]  # NOT NULL: the UPDATE fails
    assert _case(db, case_id).park_reason is None
    assert _audit_count(db) == before


def test_row_deleted_in_the_same_transaction_is_stale_data(db: Database, case_id: str) -> None:
    with db.write() as session:
        direct_rows.use_direct_rows(session)
        execution = _new_execution(db, case_id)
        direct_rows.add(session, execution)
        session.execute(delete(Execution).where(col(Execution.id) == "ex_review"))
        execution.status = "succeeded"
        with pytest.raises(StaleDataError):
            direct_rows.write(session)
        session.rollback()


def test_row_deleted_then_commit_raises_not_silent(db: Database, case_id: str) -> None:
    with pytest.raises(StaleDataError), db.write() as session:
        direct_rows.use_direct_rows(session)
        execution = _new_execution(db, case_id)
        direct_rows.add(session, execution)
        plain(session).execute(delete(Execution).where(col(Execution.id) == "ex_review"))
        execution.status = "succeeded"
    with db.read() as session:
        assert session.get(Execution, "ex_review") is None


@pytest.mark.postgres
def test_pg_row_deleted_by_another_transaction_is_stale_data(pg_url: str) -> None:
    from tests.conftest import make_runtime

    rt = make_runtime(pg_url)
    try:
        h = Harness(rt)
        h.publish()
        case_id = str(h.post(h.request(h.payment(), message=FOR_A_PERSON)).json()["id"])
        execution = _new_execution(rt.db, case_id, "ex_pg")
        with rt.db.write() as session:
            session.add(execution)
        with pytest.raises(StaleDataError), rt.db.write() as session:
            direct_rows.use_direct_rows(session)
            row = direct_rows.get(session, Execution, "ex_pg")
            assert row is not None
            with rt.db.engine.connect() as other:
                other.execute(text("DELETE FROM executions WHERE id = 'ex_pg'"))
                other.commit()
            row.status = "succeeded"
    finally:
        rt.db.dispose()


# ------------------------------------------------------------------ after the transaction


def test_direct_case_used_after_commit_in_an_orm_transaction(db: Database, case_id: str) -> None:
    """A direct case object kept after its transaction, changed and staged in a later ORM
    transaction (as `stage` is the way to hand a row to a transaction): it must not insert a
    second row, and must not write stale values over the newer ones."""
    with db.write() as session:
        direct_rows.use_direct_rows(session)
        kept = load_for_update(session, case_id)
    with db.write() as session:  # someone else moves the case on meanwhile
        newer = load_for_update(session, case_id)
        newer.park_reason = "newer"
        newer.revision += 1
        session.add(newer)
    error: BaseException | None = None
    try:
        with db.write() as session:
            kept.escalation_level += 1
            direct_rows.stage(session, kept)
    except Exception as exc:  # a loud refusal is acceptable
        error = exc
    stored = _case(db, case_id)
    assert stored.park_reason == "newer", (stored.park_reason, error)
    with db.read() as session:
        assert (
            session.scalar(select(func.count()).select_from(Case).where(col(Case.id) == case_id))
            == 1
        )
