"""The pool pings only a connection in doubt. Backends terminated while idle in the
pool (one, every one, of several replicas), then bursts of concurrent transactions: each must
get a live connection with no error."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from refund_desk.storage.db import Database
from tests.conftest import _pg_admin_engine

pytestmark = pytest.mark.postgres


@pytest.fixture()
def replicas(pg_url: str) -> Iterator[list[Database]]:
    dbs = [Database.from_url(pg_url) for _ in range(3)]
    yield dbs
    for db in dbs:
        db.dispose()


def _terminate_all(pg_url: str) -> int:
    """Every session on the test database (all idle in their pools), until they are gone."""
    name = make_url(pg_url).database
    admin = _pg_admin_engine()
    try:
        with admin.connect() as conn:
            pids = [
                int(p)
                for p in conn.execute(
                    text(
                        "SELECT pid FROM pg_stat_activity WHERE datname = :d"
                        " AND pid <> pg_backend_pid()"
                    ),
                    {"d": name},
                ).scalars()
            ]
            for pid in pids:
                conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
            for _ in range(400):
                left = conn.execute(
                    text("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(:p)"),
                    {"p": pids},
                ).scalar()
                if not left:
                    break
                time.sleep(0.005)
            assert not left
            return len(pids)
    finally:
        admin.dispose()


def _burst(dbs: list[Database], threads: int, hold: float = 0.0) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def one(n: int) -> None:
        db = dbs[n % len(dbs)]
        try:
            barrier.wait(10)
            if n % 2:
                with db.write() as session:
                    session.execute(text("SELECT pg_sleep(:s)"), {"s": hold})
                    assert session.execute(text("SELECT 1")).scalar() == 1
            else:
                with db.look() as conn:
                    conn.execute(text("SELECT pg_sleep(:s)"), {"s": hold})
        except BaseException as exc:
            errors.append(exc)

    ts = [threading.Thread(target=one, args=(n,)) for n in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    return errors


def test_every_pooled_connection_killed_then_a_burst(pg_url: str, replicas: list[Database]) -> None:
    for _ in range(3):
        assert not _burst(replicas, 30, hold=0.2)  # each replica's pool fills with 10
        assert _terminate_all(pg_url) >= 20
        errors = _burst(replicas, 45)  # more than the pools held: overflow too
        assert not errors, (len(errors), repr(errors[0])[:300])


def test_killed_between_every_transaction(pg_url: str, replicas: list[Database]) -> None:
    db = replicas[0]
    for i in range(25):
        with db.write() as session:
            session.execute(text("SELECT 1"))
        _terminate_all(pg_url)
        with db.write() as session:  # within the window that skips a ping
            assert session.execute(text("SELECT :i"), {"i": i}).scalar() == i


def test_killed_twice_before_the_next_use(pg_url: str, replicas: list[Database]) -> None:
    """Terminated, the replacement made by a checkout and terminated again at once."""
    db = replicas[0]
    with db.look() as conn:
        conn.execute(text("SELECT 1"))
    for _ in range(5):
        _terminate_all(pg_url)
        with db.look() as conn:
            conn.execute(text("SELECT 1"))
        _terminate_all(pg_url)
        with db.write() as session:
            session.execute(text("SELECT 1"))
