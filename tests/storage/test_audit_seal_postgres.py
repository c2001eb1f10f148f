"""The audit seal on PostgreSQL in one statement (`AuditLog._seal`, `_add_and_move`).

Attacks: concurrent transactions in several runtimes appending 1, 8, 9 and 20 records (the
one-statement path and the two-statement path interleaved): the chain stays gap-free, in
order, verifiable, the head matches, each transaction's records are consecutive; a rollback
after the seal leaves no record and no head move; tampering with a record's payload, hash
or prev_hash, or deleting one (through a superuser path that disables the triggers) is
detected by `verify_chain` and by `refund-desk audit verify`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, func, select, text
from sqlalchemy.orm import Session as OrmSession
from typer.testing import CliRunner

from refund_desk.cli.main import app as cli_app
from refund_desk.runtime import Runtime
from refund_desk.settings import load_settings
from refund_desk.storage.audit import Actor, head, verify_chain
from refund_desk.storage.models import AuditHead, AuditRecord
from tests.conftest import TEST_SECRET, make_runtime

pytestmark = pytest.mark.postgres

SIZES = (1, 8, 9, 20, 2, 7)


@pytest.fixture()
def replicas(pg_url: str) -> Iterator[list[Runtime]]:
    rts = [make_runtime(pg_url) for _ in range(3)]
    yield rts
    for rt in rts:
        rt.db.dispose()


def _append(rt: Runtime, n: int, tag: str) -> None:
    with rt.db.write() as session:
        for i in range(n):
            rt.desk.audit.append(
                session,
                action="test.appended",
                actor=Actor("cli", tag),
                case_id=None,
                correlation_id=f"{tag}",
                payload={
                    "tag": tag,
                    "i": i,
                    "n": n,
                    "text": "ünïcödé ✓",
                    "nested": {"x": [1, 2.5, None]},
                },
            )


def _chain(rt: Runtime) -> list[AuditRecord]:
    with rt.db.read() as session:
        return list(session.scalars(select(AuditRecord).order_by(AuditRecord.seq)).all())


def test_concurrent_transactions_of_1_8_9_and_20_records_keep_one_chain(
    replicas: list[Runtime],
) -> None:
    threads_n = 12
    rounds = 6
    barrier = threading.Barrier(threads_n)
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        rt = replicas[t % len(replicas)]
        try:
            for r in range(rounds):
                barrier.wait(60)
                _append(rt, SIZES[(t + r) % len(SIZES)], f"t{t}r{r}")
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(180)
    assert not errors, [repr(e)[:300] for e in errors[:3]]
    expected = sum(SIZES[(t + r) % len(SIZES)] for t in range(threads_n) for r in range(rounds))
    records = _chain(replicas[0])
    assert [r.seq for r in records] == list(range(1, expected + 1))
    # each transaction's records are consecutive and in the order appended
    by_tag: dict[str, list[AuditRecord]] = {}
    for r in records:
        by_tag.setdefault(r.payload["tag"], []).append(r)
    assert len(by_tag) == threads_n * rounds
    for tag, group in by_tag.items():
        seqs = [r.seq for r in group]
        assert seqs == list(range(seqs[0], seqs[0] + len(group))), tag
        assert [r.payload["i"] for r in group] == list(range(len(group))), tag
        assert len(group) == group[0].payload["n"], tag
    with replicas[0].db.read() as session:
        result = verify_chain(TEST_SECRET, session)
        assert result.ok, result
        assert head(session) == (expected, records[-1].hash)


@pytest.mark.parametrize("n", [1, 8, 9, 20])
def test_a_rollback_after_the_seal_leaves_no_record_and_no_head_move(
    replicas: list[Runtime], n: int
) -> None:
    rt = replicas[0]
    _append(rt, 3, "before")
    with rt.db.read() as session:
        before = head(session)

    class Boom(Exception):
        pass

    sealed: list[bool] = []

    def after_seal(session: Any) -> None:  # registered after the seal's own listener
        count = session.connection().scalar(text("SELECT count(*) FROM audit_records"))
        sealed.append(count == 3 + n)
        raise Boom()

    event.listen(OrmSession, "before_commit", after_seal)
    try:
        with pytest.raises(Boom):
            _append(rt, n, "rolled-back")
    finally:
        event.remove(OrmSession, "before_commit", after_seal)
    assert sealed == [True], "the records were not written before the commit failed"
    with rt.db.read() as session:
        assert head(session) == before
        assert session.scalar(select(func.count()).select_from(AuditRecord)) == 3
        assert verify_chain(TEST_SECRET, session).ok
    _append(rt, n, "after")
    with rt.db.read() as session:
        assert verify_chain(TEST_SECRET, session).ok
        assert head(session)[0] == 3 + n


def _superuser(rt: Runtime, sql: str, **params: Any) -> None:
    """As a superuser: the append-only triggers are bypassed for this transaction."""
    with rt.db.engine.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(text(sql), params)


def _cli_verify(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv("DATABASE_URL", pg_url)
    monkeypatch.setenv("REFUND_DESK_SECRET", TEST_SECRET)
    load_settings.cache_clear()
    try:
        return CliRunner().invoke(cli_app, ["audit", "verify"]).exit_code
    finally:
        load_settings.cache_clear()


@pytest.mark.parametrize(
    "tamper",
    [
        'UPDATE audit_records SET payload = CAST(\'{"tag": "x", "i": 0}\' AS json) WHERE seq = :s',
        "UPDATE audit_records SET hash = md5('x') || md5('y') WHERE seq = :s",
        "UPDATE audit_records SET prev_hash = md5('x') || md5('y') WHERE seq = :s",
        "DELETE FROM audit_records WHERE seq = :s",
        "DELETE FROM audit_records WHERE seq >= :s",
    ],
    ids=["payload", "hash", "prev_hash", "delete-one", "cut-the-tail"],
)
@pytest.mark.parametrize("where", [1, 5, 9, 10, 29])
def test_tampering_is_detected(
    replicas: list[Runtime],
    pg_url: str,
    monkeypatch: pytest.MonkeyPatch,
    tamper: str,
    where: int,
) -> None:
    rt = replicas[0]
    for n in (1, 8, 20):  # seq 1 | 2..9 | 10..29: one-statement and two-statement seals
        _append(rt, n, f"n{n}")
    with rt.db.read() as session:
        assert verify_chain(TEST_SECRET, session).ok
    assert _cli_verify(pg_url, monkeypatch) == 0
    _superuser(rt, tamper, s=where)
    with rt.db.read() as session:
        result = verify_chain(TEST_SECRET, session)
    assert not result.ok, (tamper, where)
    assert _cli_verify(pg_url, monkeypatch) != 0


def test_the_triggers_still_refuse_update_and_delete(replicas: list[Runtime]) -> None:
    rt = replicas[0]
    _append(rt, 2, "x")
    for sql in ("UPDATE audit_records SET action = 'y'", "DELETE FROM audit_records"):
        with pytest.raises(Exception, match="append-only"), rt.db.engine.begin() as conn:
            conn.execute(text(sql))
    with rt.db.read() as session:
        assert verify_chain(TEST_SECRET, session).ok
        assert session.get(AuditHead, 1).seq == 2


@pytest.mark.parametrize(("n", "statements"), [(1, 1), (8, 1), (9, 2), (20, 2)])
def test_the_seal_is_one_statement_up_to_eight_records(
    replicas: list[Runtime], n: int, statements: int
) -> None:
    """What the change promises: after the head's lock, the records and the head's move are
    one statement for 1..8 records, two beyond."""
    rt = replicas[0]
    seen: list[str] = []

    def listen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "audit_records" in statement or "audit_head" in statement:
            seen.append(" ".join(statement.split())[:60])

    event.listen(rt.db.engine, "before_cursor_execute", listen)
    try:
        _append(rt, n, "count")
    finally:
        event.remove(rt.db.engine, "before_cursor_execute", listen)
    writes = [s for s in seen if not s.upper().startswith("SELECT")]
    assert len(writes) == statements, seen
    with rt.db.read() as session:
        assert verify_chain(TEST_SECRET, session).ok and head(session)[0] == n
