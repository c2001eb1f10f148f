"""Direct rows (`storage/direct_rows.py`): a refund's hot transactions read, change and write
the case, the execution and the control row without the ORM's unit of work, and leave the
database as the ORM would have left it.

The oracle is the ORM itself: every kind of case below runs twice on one database, once with
direct rows and once with them turned off, and the rows, the audit trail, the jobs and the
customer's messages each run leaves must be the same but for ids and times.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import event, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm.exc import StaleDataError
from sqlmodel import Session

from refund_desk.cases import approvals
from refund_desk.cases.rows import load_for_update
from refund_desk.runtime import Runtime
from refund_desk.storage import direct_rows
from refund_desk.storage.db import Database
from refund_desk.storage.direct_rows import flush_if_pending
from refund_desk.storage.models import (
    Case,
    Control,
    Execution,
    Job,
)
from tests.direct_rows_helpers import same, state_of, without_direct_rows
from tests.helpers import Harness, button_token

# ----------------------------------------------------------------- the same refund, both ways


def _requests(desk: Harness) -> dict[str, Callable[[], dict[str, Any]]]:
    """Each kind of case by the reference policy, a customer and a payment of its own."""

    made = iter(range(1000))

    def body(tag: str, **extra: Any) -> Callable[[], dict[str, Any]]:
        def make() -> dict[str, Any]:
            email = f"{tag}-{next(made)}@example.com"  # no history of another run's refunds
            payment = desk.payment(email=email, chargebacks=extra.get("chargebacks", 0))
            request = desk.request(payment, email=email)
            request.update({k: v for k, v in extra.items() if k != "chargebacks"})
            if request.get("amount") is None:
                request.pop("amount", None)
            return request

        return make

    return {
        "refunded by the policy": body("auto"),
        "denied: more than is left": body("deny", amount="40.00"),
        "a person looks (default rule)": body(
            "review", message="I changed my mind about the colour, please take it back."
        ),
        "a person looks (risk signal)": body("risk", chargebacks=1),
        "an amount only the model read": body(
            "words",
            amount=None,
            message="The vase arrived broken. Please refund 12.50 of it, I keep the rest.",
        ),
    }


@pytest.mark.parametrize(
    "kind",
    [
        "refunded by the policy",
        "denied: more than is left",
        "a person looks (default rule)",
        "a person looks (risk signal)",
        "an amount only the model read",
    ],
)
def test_a_case_leaves_what_the_orm_would_leave(
    any_runtime: Runtime, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    desk = Harness(any_runtime)
    desk.publish()
    make = _requests(desk)[kind]

    direct = desk.post(make()).json()
    with monkeypatch.context() as patched:
        without_direct_rows(patched)
        through_orm = desk.post(make()).json()
    desk.sweep()  # what either left due: notifications, the customer's message, reminders

    assert direct["status"] == through_orm["status"], (direct, through_orm)
    same(state_of(any_runtime.db, direct["id"]), state_of(any_runtime.db, through_orm["id"]))


def test_a_processor_refusal_is_recorded_as_the_orm_would(
    any_runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    desk = Harness(any_runtime)
    desk.publish()
    make = _requests(desk)["refunded by the policy"]

    desk.sandbox.set_fault("decline", times=1)
    direct = desk.post(make()).json()
    with monkeypatch.context() as patched:
        without_direct_rows(patched)
        desk.sandbox.set_fault("decline", times=1)
        through_orm = desk.post(make()).json()
    desk.sweep()

    assert direct["status"] == through_orm["status"] == "parked"
    same(state_of(any_runtime.db, direct["id"]), state_of(any_runtime.db, through_orm["id"]))


@pytest.mark.parametrize(
    ("action", "extra"),
    [
        ("approve", {}),
        ("approve_partial", {"amount": "7.50"}),
        ("deny", {"reason": "Worn, not broken."}),
        ("escalate", {"reason": "Over my head."}),
    ],
)
def test_a_persons_click_leaves_what_the_orm_would_leave(
    any_runtime: Runtime, monkeypatch: pytest.MonkeyPatch, action: str, extra: dict[str, str]
) -> None:
    """A click's transaction holds the case as a direct row; then the refund's jobs run."""
    desk = Harness(any_runtime)
    desk.publish()
    make = _requests(desk)["a person looks (default rule)"]
    runtime = any_runtime.desk

    def click(case_id: str) -> None:
        with any_runtime.db.read() as session:
            case = session.get(Case, case_id)
            assert case is not None
            token = button_token(runtime, case, action)
        for job in approvals.act(runtime, token_value=token, user="U0LEAD2", **extra).jobs:
            runtime.jobs.run_now(job)

    direct = desk.post(make()).json()["id"]
    click(direct)
    with monkeypatch.context() as patched:
        without_direct_rows(patched)
        through_orm = desk.post(make()).json()["id"]
        click(through_orm)
    desk.sweep()

    ours, theirs = state_of(any_runtime.db, direct), state_of(any_runtime.db, through_orm)
    assert ours["audit"][-1]["action"] != "case.awaiting_approval"  # the click was recorded
    same(ours, theirs)


def test_the_hot_transactions_use_direct_rows(
    any_runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the ORM: no case, execution or control row is loaded or flushed by it while a
    refund's jobs run (the capture and the answer's view of the case may use it)."""
    desk = Harness(any_runtime)
    desk.publish()
    request = _requests(desk)["refunded by the policy"]()
    in_jobs: list[str] = []

    def in_a_job() -> bool:
        return any(
            frame.name in ("advance", "execute") and "refund_desk/cases/" in frame.filename
            for frame in traceback.extract_stack()
        )

    def on_load(target: Any, _context: Any) -> None:
        if in_a_job():
            in_jobs.append(f"loaded {type(target).__name__}")

    def on_flush(session: Session, _context: Any, _instances: Any) -> None:
        if in_a_job():
            in_jobs.extend(
                f"flushed {type(row).__name__}"
                for row in (*session.new, *session.dirty)
                if isinstance(row, Case | Execution | Control)
            )

    for model in (Case, Execution, Control):
        event.listen(model, "load", on_load)
    event.listen(Session, "before_flush", on_flush)
    try:
        assert desk.post(request).json()["status"] == "refunded"
    finally:
        for model in (Case, Execution, Control):
            event.remove(model, "load", on_load)
        event.remove(Session, "before_flush", on_flush)
    assert in_jobs == []


# ----------------------------------------------------------------- the rows themselves


@pytest.fixture()
def case_id(any_runtime: Runtime) -> str:
    desk = Harness(any_runtime)
    desk.publish()
    made = desk.post(_requests(desk)["a person looks (default rule)"]()).json()
    assert made["status"] == "awaiting_approval"
    return str(made["id"])


@pytest.fixture()
def db(any_runtime: Runtime) -> Iterator[Database]:
    yield any_runtime.db


def _orm_case(db: Database, case_id: str) -> Case:
    with db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None
        return case


def test_a_direct_row_holds_what_the_orm_loads_with_the_same_types(
    db: Database, case_id: str
) -> None:
    orm_case = _orm_case(db, case_id)
    with db.write() as session:
        direct_rows.use_direct_rows(session)
        case = load_for_update(session, case_id)
        assert case not in session  # never in the session
        ours = case.model_dump()
    theirs = orm_case.model_dump()
    assert ours == theirs
    assert {k: type(v) for k, v in ours.items()} == {k: type(v) for k, v in theirs.items()}


def test_one_object_per_row_per_transaction(db: Database, case_id: str) -> None:
    with db.write() as session:
        direct_rows.use_direct_rows(session)
        first = load_for_update(session, case_id)
        assert direct_rows.load(session, Case, case_id) is first
        assert direct_rows.get(session, Case, case_id) is first
        assert direct_rows.load(session, Control, 1) is direct_rows.load(session, Control, 1)
    with db.write() as session:  # a new transaction reads afresh
        direct_rows.use_direct_rows(session)
        assert direct_rows.load(session, Case, case_id) is not first


def _statements(db: Database) -> Any:
    seen: list[str] = []

    def catch(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        seen.append(" ".join(sql.split()))

    event.listen(db.engine, "before_cursor_execute", catch)
    return seen, lambda: event.remove(db.engine, "before_cursor_execute", catch)


def test_only_the_changed_columns_are_written_once_at_the_commit(
    db: Database, case_id: str
) -> None:
    seen, stop = _statements(db)
    try:
        with db.write() as session:
            direct_rows.use_direct_rows(session)
            case = load_for_update(session, case_id)
            case.park_reason = "first"
            case.escalation_level += 1
            case.park_reason = "second"
            before_commit = [s for s in seen if s.startswith("UPDATE cases")]
    finally:
        stop()
    updates = [s for s in seen if s.startswith("UPDATE cases")]
    assert before_commit == []
    assert len(updates) == 1, updates
    assert re.match(r"UPDATE cases SET (escalation_level=\S+, park_reason=\S+|park_reason=\S+, "
                    r"escalation_level=\S+) WHERE cases.id = ", updates[0]), updates  # fmt: skip
    stored = _orm_case(db, case_id)
    assert (stored.park_reason, stored.escalation_level) == ("second", 1)


def test_nothing_changed_nothing_written(db: Database, case_id: str) -> None:
    seen, stop = _statements(db)
    try:
        with db.write() as session:
            direct_rows.use_direct_rows(session)
            case = load_for_update(session, case_id)
            case.status = str(case.status)  # the same value again
            case.decision = dict(case.decision or {})  # an equal value, another object
    finally:
        stop()
    assert not [s for s in seen if s.startswith("UPDATE cases")], seen


def test_a_rolled_back_transaction_writes_nothing(db: Database, case_id: str) -> None:
    with pytest.raises(RuntimeError, match="boom"), db.write() as session:
        direct_rows.use_direct_rows(session)
        load_for_update(session, case_id).park_reason = "never"
        raise RuntimeError("boom")
    assert _orm_case(db, case_id).park_reason is None


def test_an_orm_query_sees_the_change_as_after_an_autoflush(db: Database, case_id: str) -> None:
    with db.write() as session:
        direct_rows.use_direct_rows(session)
        load_for_update(session, case_id).park_reason = "seen"
        with session.no_autoflush:  # not written inside no_autoflush, as the ORM's own
            assert session.scalar(select(Case.park_reason).where(Case.id == case_id)) is None
        assert session.scalar(select(Case.park_reason).where(Case.id == case_id)) == "seen"
        session.rollback()
    assert _orm_case(db, case_id).park_reason is None


def test_flush_if_pending_writes_the_rows_it_picks(db: Database, case_id: str) -> None:
    with db.write() as session:
        direct_rows.use_direct_rows(session)
        load_for_update(session, case_id).park_reason = "counted"
        plain_read = text("SELECT park_reason FROM cases WHERE id = :id")
        flush_if_pending(session, lambda row: isinstance(row, Execution))
        assert session.connection().scalar(plain_read, {"id": case_id}) is None
        flush_if_pending(session, lambda row: isinstance(row, Case))
        assert session.connection().scalar(plain_read, {"id": case_id}) == "counted"


def test_a_fresh_read_keeps_this_transactions_changes(db: Database, case_id: str) -> None:
    with db.write() as session:
        direct_rows.use_direct_rows(session)
        case = direct_rows.load(session, Case, case_id)
        assert case is not None
        case.park_reason = "kept"
        again = direct_rows.load(session, Case, case_id, lock=True, fresh=True)
        assert again is case and case.park_reason == "kept"
    assert _orm_case(db, case_id).park_reason == "kept"


def test_a_row_gone_meanwhile_is_the_orms_stale_data_error(db: Database, case_id: str) -> None:
    with db.write() as session:
        direct_rows.use_direct_rows(session)
        control = direct_rows.load(session, Control, 1)
        assert control is not None
        session.connection().execute(text("DELETE FROM control WHERE id = 1"))
        control.mode = "approve-all"
        with pytest.raises(StaleDataError):
            direct_rows.write(session)
        session.rollback()


def test_a_direct_row_handed_to_the_session_fails_loudly(db: Database, case_id: str) -> None:
    with pytest.raises(IntegrityError), db.write() as session:
        direct_rows.use_direct_rows(session)
        session.add(load_for_update(session, case_id))  # `stage` is the way


def test_stage_adds_orm_rows_and_leaves_direct_ones(db: Database, case_id: str) -> None:
    with db.write() as session:
        orm_case = session.get(Case, case_id)
        assert orm_case is not None
        orm_case.park_reason = "through the session"
        direct_rows.stage(session, orm_case)
        assert orm_case in session
    assert _orm_case(db, case_id).park_reason == "through the session"
    with db.write() as session:
        direct_rows.use_direct_rows(session)
        case = load_for_update(session, case_id)
        case.park_reason = "direct"
        direct_rows.stage(session, case)
        assert case not in session
    assert _orm_case(db, case_id).park_reason == "direct"


def test_a_savepoint_rolled_back_over_direct_rows_stops_them(db: Database, case_id: str) -> None:
    with pytest.raises(RuntimeError, match="savepoint"), db.write() as session:
        direct_rows.use_direct_rows(session)
        case = load_for_update(session, case_id)
        savepoint = session.begin_nested()
        case.park_reason = "inside"
        session.execute(select(Job.id).limit(1))  # written inside the savepoint
        savepoint.rollback()
        case.park_reason = "after"
    assert _orm_case(db, case_id).park_reason is None


def test_a_new_row_is_inserted_at_once(db: Database, case_id: str) -> None:
    execution = Execution(
        id="ex_direct",
        idempotency_key="idem_direct",
        case_id=case_id,
        payment_id=_orm_case(db, case_id).payment_id,
        amount=100,
        currency="USD",
        status="failed",
        automatic=False,
        basis="approval",
    )
    with db.write() as session:
        direct_rows.use_direct_rows(session)
        direct_rows.add(session, execution)
        assert (
            session.connection().scalar(
                text("SELECT amount FROM executions WHERE id = 'ex_direct'")
            )
            == 100
        )
        assert direct_rows.load(session, Execution, "ex_direct") is execution
        execution.error_code = "later"  # and a change after it, written at the commit
    with db.read() as session:
        stored = session.get(Execution, "ex_direct")
        assert stored is not None
        assert stored.model_dump() == execution.model_dump()


@pytest.mark.postgres
def test_a_locked_direct_row_is_locked(pg_runtime_case: tuple[Database, str]) -> None:
    db, case_id = pg_runtime_case
    with db.write() as session:
        direct_rows.use_direct_rows(session)
        load_for_update(session, case_id)
        with db.engine.connect() as other:
            with pytest.raises(Exception, match="could not obtain lock"):
                other.execute(
                    text("SELECT id FROM cases WHERE id = :id FOR UPDATE NOWAIT"), {"id": case_id}
                )
            other.rollback()


@pytest.fixture()
def pg_runtime_case(pg_url: str) -> Iterator[tuple[Database, str]]:
    from tests.conftest import make_runtime

    runtime = make_runtime(pg_url)
    try:
        desk = Harness(runtime)
        desk.publish()
        made = desk.post(_requests(desk)["a person looks (default rule)"]()).json()
        yield runtime.db, str(made["id"])
    finally:
        runtime.db.dispose()
