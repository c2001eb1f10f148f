"""The audit seal on PostgreSQL under concurrent writers from several `Database` objects
(replicas), varying record counts and rollbacks, and one transaction with 6,000 records (a
one-statement seal, the head's UPDATE a CTE of the records' INSERT, could not take more than
about 5,950: the protocol's 65,535 parameters); verify after all of it."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from refund_desk.storage.audit import Actor, AuditLog, iter_records, verify_chain
from refund_desk.storage.db import Database
from refund_desk.storage.models import AuditHead
from tests.conftest import TEST_SECRET

pytestmark = pytest.mark.postgres

ACTOR = Actor("cli", "review")


class Boom(Exception):
    pass


@pytest.fixture()
def replicas(pg_url: str) -> Iterator[list[Database]]:
    dbs = [Database.from_url(pg_url) for _ in range(4)]
    yield dbs
    for db in dbs:
        db.dispose()


def _check(db: Database, expected: int) -> None:
    with db.read() as session:
        result = verify_chain(TEST_SECRET, session)
        assert result.ok, result
        seqs = [r.seq for r in iter_records(session)]
        head = session.get(AuditHead, 1)
        assert head is not None
        assert seqs == list(range(1, len(seqs) + 1))
        assert len(seqs) == expected, (len(seqs), expected)
        assert head.seq == expected


def test_concurrent_appends_of_varying_counts_with_rollbacks(replicas: list[Database]) -> None:
    audit = AuditLog(TEST_SECRET)
    committed = [0] * 16
    errors: list[BaseException] = []
    barrier = threading.Barrier(16)

    def worker(n: int) -> None:
        rnd = random.Random(n)
        db = replicas[n % len(replicas)]
        try:
            barrier.wait()
            for i in range(25):
                count = rnd.randint(1, 12)
                roll_back = rnd.random() < 0.3
                try:
                    with db.write() as session:
                        for k in range(count):
                            audit.append(
                                session,
                                action=f"review.{n}.{i}.{k}",
                                actor=ACTOR,
                                case_id=None if k % 2 else f"case-{n}-{i}",
                                payload={"n": n, "i": i, "k": k, "text": "ünï'\"%s:x"},
                            )
                        if roll_back:
                            raise Boom()
                except Boom:
                    continue
                committed[n] += count
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    _check(replicas[0], sum(committed))


def test_a_transaction_that_fails_after_the_seal_leaves_the_chain_whole(
    replicas: list[Database],
) -> None:
    """A deferred failure at COMMIT (after the seal ran): nothing of it stays, and the next
    writer links to the head as it was."""
    audit = AuditLog(TEST_SECRET)
    db = replicas[0]
    with db.write() as session:
        audit.append(session, action="review.first", actor=ACTOR)
    with db.write() as session:
        session.execute(
            text(
                "CREATE TEMP TABLE boom (x int UNIQUE DEFERRABLE INITIALLY DEFERRED) ON COMMIT DROP"
            )
        )
    with pytest.raises(IntegrityError), db.write() as session:
        session.execute(
            text("CREATE TEMP TABLE boom2 (x int UNIQUE DEFERRABLE INITIALLY DEFERRED)")
        )
        session.execute(text("INSERT INTO boom2 VALUES (1), (1)"))
        for k in range(3):
            audit.append(session, action=f"review.lost.{k}", actor=ACTOR)
    with db.write() as session:
        audit.append(session, action="review.after", actor=ACTOR)
    _check(db, 2)


def test_one_transaction_appending_many_records(replicas: list[Database]) -> None:
    """Before the change the records went as one executemany (batched by SQLAlchemy); now
    they are one multi-row VALUES: a PostgreSQL statement takes at most 65,535 parameters."""
    audit = AuditLog(TEST_SECRET)
    db = replicas[0]
    with db.write() as session:
        for k in range(6000):
            audit.append(session, action="review.bulk", actor=ACTOR, payload={"k": k})
    _check(db, 6000)
