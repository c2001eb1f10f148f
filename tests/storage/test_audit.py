"""The audit chain on real databases: linking, append-only triggers, tamper detection."""

from __future__ import annotations

import io
import itertools
import json
import threading
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import delete, func, select, text, update
from sqlalchemy.exc import DBAPIError

from refund_desk.storage.audit import (
    GENESIS,
    Actor,
    AuditLog,
    VerifyResult,
    export_jsonl,
    iter_records,
    verify_chain,
)
from refund_desk.storage.db import Database
from refund_desk.storage.models import AuditHead, AuditRecord
from tests.conftest import TEST_SECRET

ACTOR = Actor("cli", "tester")


@pytest.fixture()
def audit() -> AuditLog:
    return AuditLog(TEST_SECRET)


def append_n(db: Database, audit: AuditLog, n: int) -> None:
    for i in range(n):
        with db.write() as session:
            audit.append(
                session,
                action=f"test.action.{i}",
                actor=ACTOR,
                case_id=f"case-{i}",
                payload={"i": i, "note": "ünïcode", "nested": {"b": 2, "a": [1, 2.5]}},
            )


def records(db: Database) -> list[AuditRecord]:
    with db.read() as session:
        return list(iter_records(session))


def head(db: Database) -> AuditHead:
    with db.read() as session:
        row = session.get(AuditHead, 1)
        assert row is not None
        return row


def drop_triggers(db: Database) -> None:
    with db.write() as session:
        if db.is_sqlite:
            session.execute(text("DROP TRIGGER audit_records_no_update"))
            session.execute(text("DROP TRIGGER audit_records_no_delete"))
        else:
            session.execute(text("DROP TRIGGER audit_records_no_update_delete ON audit_records"))


def verify(db: Database, secret: str = TEST_SECRET) -> VerifyResult:
    with db.read() as session:
        return verify_chain(secret, session)


# ---------------------------------------------------------------- a sound chain


def test_appends_form_a_linked_chain_that_verifies(db: Database, audit: AuditLog) -> None:
    append_n(db, audit, 5)
    rows = records(db)

    assert [r.seq for r in rows] == [1, 2, 3, 4, 5]
    assert rows[0].prev_hash == GENESIS
    for prev, current in itertools.pairwise(rows):
        assert current.prev_hash == prev.hash
    assert len({r.hash for r in rows}) == 5
    result = verify(db)
    assert result.ok, result.problem
    assert result.count == 5
    assert result.head_hash == rows[-1].hash
    assert result.first_bad_seq is None
    assert (head(db).seq, head(db).hash) == (5, rows[-1].hash)


def test_empty_chain_verifies_with_genesis_head(db: Database) -> None:
    result = verify(db)
    assert result.ok
    assert (result.count, result.head_hash) == (0, GENESIS)


def test_stored_payload_matches_what_was_hashed(db: Database, audit: AuditLog) -> None:
    append_n(db, audit, 1)
    [row] = records(db)
    assert row.payload == {"i": 0, "note": "ünïcode", "nested": {"a": [1, 2.5], "b": 2}}
    assert row.actor_kind == "cli"
    assert row.actor_id == "tester"


def test_append_with_non_utc_time_still_verifies(db: Database, audit: AuditLog) -> None:
    plus_two = timezone(timedelta(hours=2))
    with db.write() as session:
        audit.append(session, action="a", actor=ACTOR, at=datetime(2025, 1, 1, 12, tzinfo=plus_two))
    assert verify(db).ok


# ---------------------------------------------------------------- append-only triggers


def test_trigger_refuses_update(db: Database, audit: AuditLog) -> None:
    append_n(db, audit, 2)
    before = records(db)

    with pytest.raises(DBAPIError, match="append-only"), db.write() as session:
        session.execute(update(AuditRecord).where(AuditRecord.seq == 1).values(action="forged"))  # type: ignore[arg-type]

    after = records(db)
    assert [(r.seq, r.action, r.payload, r.hash) for r in after] == [
        (r.seq, r.action, r.payload, r.hash) for r in before
    ]


def test_trigger_refuses_delete(db: Database, audit: AuditLog) -> None:
    append_n(db, audit, 2)

    with pytest.raises(DBAPIError, match="append-only"), db.write() as session:
        session.execute(delete(AuditRecord).where(AuditRecord.seq == 2))  # type: ignore[arg-type]

    assert [r.seq for r in records(db)] == [1, 2]
    assert verify(db).ok


def test_trigger_refuses_delete_of_every_row(db: Database, audit: AuditLog) -> None:
    append_n(db, audit, 3)

    with pytest.raises(DBAPIError, match="append-only"), db.write() as session:
        session.execute(delete(AuditRecord))

    assert len(records(db)) == 3


def test_trigger_refuses_truncate_on_postgres(pg_db: Database, audit: AuditLog) -> None:
    append_n(pg_db, audit, 2)

    with pytest.raises(DBAPIError, match="append-only"), pg_db.write() as session:
        session.execute(text("TRUNCATE audit_records"))

    assert [r.seq for r in records(pg_db)] == [1, 2]


# ---------------------------------------------------------------- tampering detected


def tampered(db: Database, audit: AuditLog, statement: Any, seq: int) -> VerifyResult:
    """Five records, then `statement` on record `seq` past the append-only triggers; the
    chain verified."""
    append_n(db, audit, 5)
    drop_triggers(db)
    with db.write() as session:
        session.execute(statement.where(AuditRecord.seq == seq))
    return verify(db)


def test_altered_payload_is_detected_at_that_record(db: Database, audit: AuditLog) -> None:
    result = tampered(db, audit, update(AuditRecord).values(payload={"i": 999}), seq=3)
    assert not result.ok
    assert result.first_bad_seq == 3
    assert result.count == 2


def test_altered_action_is_detected_at_that_record(db: Database, audit: AuditLog) -> None:
    result = tampered(db, audit, update(AuditRecord).values(action="refund.forged"), seq=4)
    assert not result.ok
    assert result.first_bad_seq == 4


def test_deleted_middle_record_is_detected_as_a_gap(db: Database, audit: AuditLog) -> None:
    result = tampered(db, audit, delete(AuditRecord), seq=3)
    assert not result.ok
    assert result.first_bad_seq == 3
    assert result.problem is not None and "3" in result.problem


def test_cut_tail_is_detected_against_the_head(db: Database, audit: AuditLog) -> None:
    result = tampered(db, audit, delete(AuditRecord), seq=5)
    assert not result.ok
    assert result.first_bad_seq == 5
    assert result.count == 4


def test_different_secret_fails_at_the_first_record(db: Database, audit: AuditLog) -> None:
    append_n(db, audit, 3)

    result = verify(db, secret="another-secret-" + "y" * 40)
    assert not result.ok
    assert result.first_bad_seq == 1


# ---------------------------------------------------------------- transactions


def test_rolled_back_append_leaves_no_record(db: Database, audit: AuditLog) -> None:
    append_n(db, audit, 2)
    head_before = head(db)

    with pytest.raises(RuntimeError), db.write() as session:
        audit.append(session, action="doomed", actor=ACTOR)
        raise RuntimeError("the change fails")

    assert [r.seq for r in records(db)] == [1, 2]
    head_after = head(db)
    assert (head_after.seq, head_after.hash) == (head_before.seq, head_before.hash)
    append_n(db, audit, 1)
    assert [r.seq for r in records(db)] == [1, 2, 3]
    assert verify(db).ok


def test_concurrent_appends_on_postgres_never_fork(pg_db: Database, audit: AuditLog) -> None:
    threads, per_thread = 8, 25
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                with pg_db.write() as session:
                    audit.append(
                        session, action="concurrent", actor=ACTOR, payload={"t": n, "i": i}
                    )
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=120)

    assert not errors, errors
    rows = records(pg_db)
    assert [r.seq for r in rows] == list(range(1, threads * per_thread + 1))
    with pg_db.read() as session:
        assert session.scalar(select(func.count()).select_from(AuditRecord)) == 200
    result = verify(pg_db)
    assert result.ok, result.problem
    assert result.count == 200
    assert len({(r["t"], r["i"]) for r in (row.payload for row in rows)}) == 200


# ---------------------------------------------------------------- export


def test_export_writes_each_record_and_the_head(db: Database, audit: AuditLog) -> None:
    append_n(db, audit, 4)
    out = io.StringIO()
    with db.read() as session:
        returned = export_jsonl(iter_records(session), out)

    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == 5
    assert [line["seq"] for line in lines[:4]] == [1, 2, 3, 4]
    assert all(
        {"hash", "prev_hash", "action", "payload", "at"} <= line.keys() for line in lines[:4]
    )
    chain = verify(db)
    assert lines[-1] == {"head_hash": chain.head_hash, "count": 4}
    assert returned == chain.head_hash == lines[3]["hash"]


def test_export_of_an_empty_chain_has_only_the_genesis_head(db: Database) -> None:
    out = io.StringIO()
    with db.read() as session:
        export_jsonl(iter_records(session), out)
    assert [json.loads(line) for line in out.getvalue().splitlines()] == [
        {"head_hash": GENESIS, "count": 0}
    ]


def test_record_time_is_stored_as_utc(db: Database, audit: AuditLog) -> None:
    at = datetime(2025, 6, 1, 8, 30, 15, 123456, tzinfo=UTC)
    with db.write() as session:
        audit.append(session, action="timed", actor=ACTOR, at=at)
    [row] = records(db)
    assert row.at == at
    assert verify(db).ok


def test_records_are_linked_at_commit_in_the_order_they_were_appended(
    db: Database, audit: AuditLog
) -> None:
    with db.write() as session:
        first = audit.append(session, action="first", actor=ACTOR)
        second = audit.append(session, action="second", actor=ACTOR)
        assert (first.hash, second.hash) == ("", "")  # not linked before the commit
    assert [(r.seq, r.action) for r in records(db)] == [(1, "first"), (2, "second")]
    assert (first.seq, second.prev_hash) == (1, first.hash)
    assert verify(db).ok


def test_an_append_inside_a_savepoint_is_refused(db: Database, audit: AuditLog) -> None:
    with (
        pytest.raises(RuntimeError, match="savepoints"),
        db.write() as session,
        session.begin_nested(),
    ):
        audit.append(session, action="nested", actor=ACTOR)
    assert records(db) == []
