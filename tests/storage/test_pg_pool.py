"""PostgreSQL: a pooled connection is pinged before use only when it may be dead.

A connection back in use within `PING_AFTER_IDLE_SECONDS`, with a quiet socket, goes without
the round trip of a ping; one idle longer is pinged; one the server ended (a restart, an
administrator) is replaced before use however recently it was used, because the server's
goodbye is waiting on its socket.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import text

from refund_desk.storage import db as db_module
from refund_desk.storage.db import Database
from tests.conftest import _pg_admin_engine

pytestmark = pytest.mark.postgres


@pytest.fixture()
def pings(pg_db: Database, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    seen: list[Any] = []
    real = pg_db.engine.dialect.do_ping

    def counted(dbapi_connection: Any) -> bool:
        seen.append(dbapi_connection)
        return bool(real(dbapi_connection))

    monkeypatch.setattr(pg_db.engine.dialect, "do_ping", counted)
    return seen


def _backend_pid(pg_db: Database) -> int:
    with pg_db.read() as session:
        return int(session.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_a_connection_used_a_moment_ago_is_not_pinged(pg_db: Database, pings: list[Any]) -> None:
    first = _backend_pid(pg_db)
    for _ in range(5):
        assert _backend_pid(pg_db) == first  # the same pooled connection each time
    assert pings == []


def test_a_connection_idle_past_the_window_is_pinged(
    pg_db: Database, pings: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _backend_pid(pg_db)
    monkeypatch.setattr(db_module, "PING_AFTER_IDLE_SECONDS", 0.05)
    time.sleep(0.1)
    _backend_pid(pg_db)
    assert len(pings) == 1


def test_a_connection_the_server_ended_is_replaced_before_use(
    pg_db: Database, pings: list[Any]
) -> None:
    """Ended by the server right after it went back to the pool: the next transaction gets a
    live connection and no error, well within the window that skips the ping."""
    ended = _backend_pid(pg_db)
    admin = _pg_admin_engine()
    try:
        with admin.connect() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": ended}).scalar()
            for _ in range(200):  # until the backend is gone (its goodbye is on the socket)
                gone = not conn.execute(
                    text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": ended}
                ).scalar()
                if gone:
                    break
                time.sleep(0.005)
    finally:
        admin.dispose()
    with pg_db.write() as session:  # a write, as an intake's capture would be
        assert session.execute(text("SELECT 1")).scalar() == 1
    assert _backend_pid(pg_db) != ended
    assert len(pings) == 1  # the doubtful connection was pinged, the replacement was not
