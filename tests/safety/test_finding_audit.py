"""Issue 13, finding 7: the record can be neither extended before its start nor cut at its
end without `audit verify` saying so (the end needs an anchor kept outside the database)."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import delete, select

from refund_desk import clock
from refund_desk.cases import anchor
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor, VerifyResult, verify_chain
from refund_desk.storage.models import AuditHead, AuditRecord, Job
from tests.cli_helpers import run
from tests.conftest import TEST_SECRET
from tests.helpers import ACME
from tests.storage.test_audit import drop_triggers


def append(runtime: Runtime, n: int) -> None:
    for i in range(n):
        with runtime.db.write() as session:
            runtime.desk.audit.append(
                session, action=f"test.{i}", actor=Actor("cli", "tests"), payload={"i": i}
            )


def verify(runtime: Runtime, anchor_hash: str | None = None) -> VerifyResult:
    with runtime.db.read() as session:
        return verify_chain(TEST_SECRET, session, anchor=anchor_hash)


def test_finding_07_a_record_slipped_in_before_the_first_fails_verify(
    any_runtime: Runtime,
) -> None:
    append(any_runtime, 3)
    with any_runtime.db.write() as session:
        session.add(
            AuditRecord(
                seq=0,
                at=clock.now(),
                case_id=None,
                actor_kind="human",
                actor_id="U0FIN1",
                action="case.approved",
                payload={},
                prev_hash="0" * 64,
                hash="f" * 64,
            )
        )
    result = verify(any_runtime)
    assert not result.ok
    assert result.first_bad_seq == 0


def test_finding_07_a_cut_tail_fails_verify_against_an_anchor(any_runtime: Runtime) -> None:
    append(any_runtime, 5)
    anchored = verify(any_runtime)
    assert anchored.ok and anchored.count == 5
    append(any_runtime, 1)
    assert verify(any_runtime, anchored.head_hash).ok, "records after the anchor are fine"
    drop_triggers(any_runtime.db)
    with any_runtime.db.write() as session:
        fourth = session.scalars(select(AuditRecord).where(AuditRecord.seq == 4)).one()
        session.execute(delete(AuditRecord).where(AuditRecord.seq >= 5))  # type: ignore[arg-type]
        head = session.get(AuditHead, 1)
        assert head is not None
        head.seq, head.hash = 4, fourth.hash
        session.add(head)
    assert verify(any_runtime).ok  # without an anchor a cut tail cannot be seen
    cut = verify(any_runtime, anchored.head_hash)
    assert not cut.ok and "anchor" in (cut.problem or "")


def test_finding_07_the_head_is_anchored_on_a_schedule(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    append(runtime, 2)
    anchor.ensure_scheduled(runtime.desk)
    anchor.ensure_scheduled(runtime.desk)  # once, however many replicas start
    with runtime.db.read() as session:
        [job] = [j for j in session.scalars(select(Job)).all() if j.kind == anchor.JOB]
    with caplog.at_level(logging.INFO, logger="refund_desk.cases.anchor"):
        runtime.desk.jobs.run_now(job.id)
    head = verify(runtime)
    assert f"audit anchor: {head.count} records, head {head.head_hash}" in caplog.text
    with runtime.db.read() as session:
        notes = [j.payload for j in session.scalars(select(Job)).all() if j.kind == "notify"]
        again = session.get(Job, job.id)
        assert again is not None and again.status == "pending"  # it comes back
    assert any(n["event"] == "audit.anchor" for n in notes)


def test_finding_07_cli_verifies_against_an_anchor(cli_db: object) -> None:
    run("policy", "publish", str(ACME))
    out = run("audit", "verify")
    head = out.strip().rsplit(" ", 1)[-1]
    assert "ok" in run("audit", "verify", "--anchor", head)
    assert "anchor" in run("audit", "verify", "--anchor", "0" * 63 + "1", code=1)
