"""Call sites of statements on `plain(session)` (no autoflush there) after an ORM object was
added or changed earlier in the same transaction: a pending approval is counted and its note
read, and a move then `tell` writes the message as the case is now."""

from __future__ import annotations

import secrets

import pytest
from sqlalchemy import select
from sqlmodel import col

from refund_desk.cases.lifecycle import Status, move
from refund_desk.cases.quorum import approval_count
from refund_desk.customers.outcomes import _approver_note
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import SYSTEM, verify_chain
from refund_desk.storage.models import Approval, Case, CustomerMessage
from tests.conftest import TEST_SECRET
from tests.helpers import Harness


@pytest.fixture()
def waiting(any_runtime: Runtime) -> tuple[Harness, str]:
    desk = Harness(any_runtime)
    desk.publish()
    body = desk.post(desk.request(desk.payment("900.00"), "600.00")).json()
    assert body["status"] == "awaiting_approval", body
    return desk, str(body["id"])


def _approval(case: Case, reason: str | None = "  Checked the photos.  ") -> Approval:
    return Approval(
        case_id=case.id,
        round=case.approval_round,
        approver="U0FIN1",
        decision="approve",
        reason=reason,
        token_nonce=secrets.token_hex(8),
    )


def test_a_pending_approval_is_counted_and_its_note_read(waiting: tuple[Harness, str]) -> None:
    desk, case_id = waiting
    with desk.runtime.db.write() as session:
        case = session.get(Case, case_id)
        assert case is not None
        assert approval_count(session, case) == 0
        session.add(_approval(case))  # pending: not flushed
        assert approval_count(session, case) == 1
        assert _approver_note(session, case) == "Checked the photos."


def test_a_move_then_tell_writes_the_message_as_the_case_is_now(
    waiting: tuple[Harness, str],
) -> None:
    desk, case_id = waiting
    audit = desk.runtime.desk.audit
    with desk.runtime.db.write() as session:
        case = session.get(Case, case_id)
        assert case is not None
        session.add(_approval(case, reason=None))
        move(session, audit, case, Status.denied, actor=SYSTEM, payload={"why": "ünïcode ✓"})
        revision = case.revision
    with desk.runtime.db.read() as session:
        told = session.scalars(
            select(CustomerMessage).where(col(CustomerMessage.case_id) == case_id)
        ).all()
        stored = session.get(Case, case_id)
        assert stored is not None and stored.status == "denied" and stored.revision == revision
        assert [(m.case_status, m.case_revision) for m in told] == [("denied", revision)]
        assert verify_chain(TEST_SECRET, session).ok
