"""Reads in one transaction see what they depend on, on SQLite and PostgreSQL:

- the approval count sees an approval this transaction has added and not yet flushed;
- `control()` (read under `no_autoflush`) gives this transaction's own change to the row;
- `advance`'s transaction writes the case with at most two UPDATEs (its advice before the
  remainder's count; its decision, approval and reservation's move), and the reservation
  (written at the commit's flush) is on record;
- on SQLite, a customer's key row read again in the transaction reflects this
  transaction's erasure of it, and a returning customer's key after an erasure is a new
  generation: the erased case stays unreadable, the new one readable.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from sqlalchemy import event

from refund_desk import clock
from refund_desk.cases.quorum import approval_count
from refund_desk.cases.rows import load_for_update
from refund_desk.crypto import destroy_customer_key
from refund_desk.customers import erasure
from refund_desk.governance.versions import control
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import Approval
from tests.cases.advance_common import case_row, executions
from tests.helpers import CUSTOMER, Harness


def test_the_approval_count_includes_an_approval_added_in_this_transaction(
    desk: Harness,
) -> None:
    payment = desk.payment("900.00")
    case_id = desk.post(desk.request(payment, "600.00")).json()["id"]
    with desk.runtime.db.write() as session:
        case = load_for_update(session, case_id)
        assert approval_count(session, case) == 0
        session.add(Approval(case_id=case_id, round=case.approval_round, approver="U1",
                             decision="approve", token_nonce="n-1"))  # fmt: skip
        assert approval_count(session, case) == 1
        session.rollback()


def test_control_gives_this_transactions_own_change(desk: Harness) -> None:
    with desk.runtime.db.write() as session:
        control(session).mode = "approve-all"
        assert control(session).mode == "approve-all"
        session.rollback()


def test_advance_writes_the_case_once_and_the_reservation_commits(desk: Harness) -> None:
    runtime = desk.runtime
    runtime.desk.jobs_elsewhere = True
    payment = desk.payment("30.00")
    case_id = desk.post(desk.request(payment, "20.00")).json()["id"]
    updates: Counter[str] = Counter()

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        head = " ".join(statement.split()[:2]).lower()
        if head == "update cases":
            updates[case_id] += 1

    engine = runtime.db.engine
    event.listen(engine, "before_cursor_execute", count)
    try:
        from tests.cases.advance_common import advance_job

        job = runtime.desk.jobs.claim_one(advance_job(desk, case_id).id or 0)
        assert job is not None
        runtime.desk.jobs.run(job)  # advise, decide, route; the execute job waits
    finally:
        event.remove(engine, "before_cursor_execute", count)
    # the advice's change goes out before the remainder's count; the decision's at the commit
    assert updates[case_id] <= 2, updates
    assert case_row(desk, case_id).status == "approved"
    runtime.desk.jobs_elsewhere = False
    desk.sweep()
    assert case_row(desk, case_id).status == "refunded"
    assert [e.status for e in executions(desk, case_id)] == ["succeeded"]


def test_sqlite_the_held_key_row_reflects_this_transactions_erasure(runtime: Runtime) -> None:
    desk = Harness(runtime)
    desk.publish()
    desk.post(desk.request(desk.payment("30.00"), "20.00"))
    vault = runtime.desk.vault
    email_hash = vault.email_hash(CUSTOMER)
    with runtime.db.write() as session:
        first = vault.for_customer(session, email_hash)  # the row, now in the identity map
        assert first.generation == 1
        assert destroy_customer_key(session, email_hash, clock.now())
        again = vault.for_customer(session, email_hash)  # the session's row: the same object
        assert again.generation == 2 and again.wrapped != first.wrapped
        session.rollback()


def test_sqlite_a_returning_customer_after_an_erasure_gets_a_new_key(runtime: Runtime) -> None:
    desk = Harness(runtime)
    desk.publish()

    def ask(message: str) -> dict[str, Any]:
        return dict(desk.post(desk.request(desk.payment("30.00"), "20.00", message=message)).json())

    old = ask("My zanzibar vase arrived broken, shattered in the box.")
    erasure.erase_customer(runtime.desk, CUSTOMER, actor=Actor("cli", "t"), evidence=None)
    new = ask("My kilimanjaro vase arrived broken, shattered in the box.")
    vault = runtime.desk.vault
    with runtime.db.read() as session:
        old_case, new_case = case_row(desk, old["id"]), case_row(desk, new["id"])
        assert (
            vault.decrypt(new_case.message_enc, session=session)
            == "My kilimanjaro vase arrived broken, shattered in the box."
        )
        assert vault.decrypt(new_case.email_enc, session=session) == CUSTOMER
        assert not vault.decrypt(old_case.message_enc, session=session)
    assert case_row(desk, new["id"]).status == "refunded"
