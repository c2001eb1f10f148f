"""The audit chain: append-only records linked by HMAC hashes over canonical JSON.

Records are linked into the chain as their transaction commits: the head row is locked then,
for the length of the commit, so concurrent transactions queue briefly instead of forking the
chain; the record commits with the state change it describes. The HMAC key comes from the deployment
secret: someone with database access but not the secret cannot rewrite the chain consistently.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any

from sqlalchemy import bindparam, event, insert, orm, select, update
from sqlmodel import Session, col

from refund_desk import clock
from refund_desk.crypto import keyed_hash, same
from refund_desk.storage.models import AuditHead, AuditRecord
from refund_desk.text import Person

GENESIS = "0" * 64


@dataclass(frozen=True)
class Actor:
    kind: str  # policy | model | human | cli | system | api
    id: str | None = None

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}" if self.id else self.kind

    @property
    def who(self) -> Person | str:
        """For a message: a person (Slack mentions them), or what acted (``cli:ana``)."""
        return Person(self.id) if self.kind == "human" and self.id else str(self)


SYSTEM = Actor("system")
POLICY = Actor("policy")
MODEL = Actor("model")


# What `json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)` writes,
# from one encoder made once instead of one per call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical(obj: Any) -> str:
    return _CANONICAL.encode(obj)


@dataclass(slots=True)
class Appended:
    """A record appended in a transaction, as its row will be written at the commit (`_seal`
    numbers, links and hashes it then). A plain object: building an `AuditRecord` (a SQLModel
    table object) for each of a refund's appends cost more than the INSERT that writes them."""

    at: datetime
    case_id: str | None
    correlation_id: str | None
    actor_kind: str
    actor_id: str | None
    action: str
    policy_version: int | None
    payload: dict[str, Any]
    seq: int = 0
    prev_hash: str = ""
    hash: str = ""


def _body(record: AuditRecord | Appended) -> dict[str, Any]:
    return {
        "seq": record.seq,
        "at": record.at.isoformat(),
        "case_id": record.case_id,
        "correlation_id": record.correlation_id,
        "actor_kind": record.actor_kind,
        "actor_id": record.actor_id,
        "action": record.action,
        "policy_version": record.policy_version,
        "payload": record.payload,
        "prev_hash": record.prev_hash,
    }


def record_hash(secret: str, record: AuditRecord | Appended) -> str:
    return keyed_hash(secret, "audit-chain", canonical(_body(record)))


PENDING = "audit.pending"  # session.info key: (the log, its records appended), sealed at commit


class AuditLog:
    def __init__(self, secret: str) -> None:
        self._secret = secret

    def append(
        self,
        session: Session,
        *,
        action: str,
        actor: Actor,
        case_id: str | None = None,
        correlation_id: str | None = None,
        policy_version: int | None = None,
        payload: dict[str, Any] | None = None,
        at: datetime | None = None,
    ) -> Appended:
        """Append inside the caller's transaction; it commits or rolls back with the change.

        The record is linked into the chain (its number, the previous hash, its own hash) as
        the transaction commits, with the head row locked only from then until the commit,
        not from the append on: transactions queue on the head for the length of a commit
        instead of the length of their work, and the head is always the last lock taken.
        """
        if session.in_nested_transaction():
            # A savepoint's rollback would not take back a record kept for the commit.
            raise RuntimeError("audit records are appended outside savepoints")
        # Round-trip the payload through JSON so the hash covers exactly what is stored.
        stored_payload = json.loads(canonical(payload or {}))
        record = Appended(  # numbered, linked and hashed at commit (`_seal`)
            at=(at or clock.now()).astimezone(UTC),  # hashed as stored: in UTC
            case_id=case_id,
            correlation_id=correlation_id,
            actor_kind=actor.kind,
            actor_id=actor.id,
            action=action,
            policy_version=policy_version,
            payload=stored_payload,
        )
        pending: tuple[AuditLog, list[Appended]] | None = session.info.get(PENDING)
        if pending is None:
            pending = session.info[PENDING] = (self, [])
        pending[1].append(record)
        return record

    def _seal(self, session: Session, pending: list[Appended]) -> None:
        """Link this transaction's records into the chain, in the order they were appended.

        The transaction's other changes are written first, so the head is locked (PostgreSQL)
        only for the records' own INSERT and the commit."""
        session.flush()
        connection = session.connection()
        seq, prev = connection.execute(_LOCK_HEAD).one()
        for record in pending:
            seq += 1
            record.seq, record.prev_hash = seq, prev
            record.hash = prev = record_hash(self._secret, record)
        rows = [{c: getattr(r, c) for c in _RECORD_COLUMNS} for r in pending]
        connection.execute(_ADD_RECORDS, rows)
        connection.execute(_MOVE_HEAD, {"new_seq": seq, "new_hash": prev})


_HEAD = AuditHead.__table__  # type: ignore[attr-defined]
_RECORDS = AuditRecord.__table__  # type: ignore[attr-defined]
_RECORD_COLUMNS = tuple(c.name for c in _RECORDS.columns)
# The head is read `FOR UPDATE` on PostgreSQL; SQLite renders no `FOR UPDATE`: it has one writer.
_LOCK_HEAD = select(_HEAD.c.seq, _HEAD.c.hash).where(_HEAD.c.id == 1).with_for_update()
_ADD_RECORDS = insert(_RECORDS)  # executemany: the transaction's records in one call
_MOVE_HEAD = (
    update(_HEAD)
    .where(_HEAD.c.id == 1)
    .values(seq=bindparam("new_seq"), hash=bindparam("new_hash"))
)


# Listened to on every session (a dict look-up where nothing was appended) rather than
# registered on each session that appends, which cost more than the look-up. SQLAlchemy sends
# these for a savepoint's release and rollback too: those are not the transaction's end (the
# head is locked only at the commit, and a savepoint's rollback undoes no record appended
# before it).
@event.listens_for(orm.Session, "before_commit")
def _seal_pending(session: Session) -> None:
    if session.in_nested_transaction():
        return
    pending: tuple[AuditLog, list[Appended]] | None = session.info.pop(PENDING, None)
    if pending is not None:
        log, records = pending
        log._seal(session, records)


@event.listens_for(orm.Session, "after_rollback")
def _forget(session: Session, *_: Any) -> None:
    if not session.in_nested_transaction():
        session.info.pop(PENDING, None)


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    count: int
    head_hash: str
    first_bad_seq: int | None = None
    problem: str | None = None


def verify_chain(
    secret: str, session: Session, *, batch: int = 5000, anchor: str | None = None
) -> VerifyResult:
    """Recompute every hash in order, from the first record there is (whatever its number);
    name the first record that does not fit.

    `anchor` is a head hash kept outside the database (`audit export`, the scheduled anchor):
    the chain must contain it, which proves nothing up to that point was cut or changed.
    """
    prev = GENESIS
    expected_seq = 1
    count = 0
    anchored = anchor is None
    for record in iter_records(session, batch=batch):
        if record.seq < expected_seq:
            return VerifyResult(
                False, count, prev, record.seq, f"record {record.seq} is not part of the chain"
            )
        if record.seq != expected_seq:
            return VerifyResult(False, count, prev, expected_seq, f"record {expected_seq} missing")
        if record.prev_hash != prev:
            return VerifyResult(
                False,
                count,
                prev,
                record.seq,
                f"record {record.seq} does not link to its predecessor",
            )
        if not same(record_hash(secret, record), record.hash):
            return VerifyResult(
                False, count, prev, record.seq, f"record {record.seq} was altered (hash mismatch)"
            )
        prev = record.hash
        expected_seq += 1
        count += 1
        anchored = anchored or same(record.hash, anchor or "")
    if not anchored:
        return VerifyResult(
            False,
            count,
            prev,
            count + 1,
            f"the anchor {anchor} is not in the chain: records up to it were cut or changed",
        )
    head = session.get(AuditHead, 1)
    if head is not None and (head.seq != count or head.hash != prev):
        return VerifyResult(
            False,
            count,
            prev,
            count + 1,
            f"the chain ends at record {count} but its head says {head.seq}: records were cut",
        )
    return VerifyResult(True, count, prev)


def iter_records(session: Session, *, batch: int = 5000) -> Iterator[AuditRecord]:
    """Every record in order, from the lowest number there is (a record slipped in before
    the first one is read too, and then fails verification)."""
    last: int | None = None
    while True:
        stmt = select(AuditRecord).order_by(col(AuditRecord.seq)).limit(batch)
        if last is not None:
            stmt = stmt.where(col(AuditRecord.seq) > last)
        rows = session.scalars(stmt).all()
        if not rows:
            return
        yield from rows
        last = rows[-1].seq


def head(session: Session) -> tuple[int, str]:
    """The chain's head: how many records and the last one's hash (what an anchor keeps)."""
    row = session.get(AuditHead, 1)
    return (row.seq, row.hash) if row is not None else (0, GENESIS)


def record_json(record: AuditRecord) -> dict[str, Any]:
    return {**_body(record), "hash": record.hash}


def export_jsonl(records: Iterable[AuditRecord], out: IO[str]) -> str:
    """Write JSON Lines and a closing line with the head hash, to be kept elsewhere."""
    head = GENESIS
    count = 0
    for record in records:
        out.write(canonical(record_json(record)) + "\n")
        head = record.hash
        count += 1
    out.write(canonical({"head_hash": head, "count": count}) + "\n")
    return head
