"""For the tests of requests before jobs on SQLite (`Database.serving`, `Database.background`):
two `Database`s on one file stand for two processes (each opens its own lock files, and
`flock` locks of different open files conflict as between processes)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
from pathlib import Path

from sqlalchemy import text

from refund_desk.storage.db import Database


def two_databases(path: Path) -> tuple[Database, Database]:
    """A job process's handle and a server's on one new file with a table `t (who)`."""
    url = f"sqlite:///{path}"
    jobs, server = Database.from_url(url), Database.from_url(url)
    with server.write() as session:
        session.execute(text("CREATE TABLE t (who TEXT)"))
    return jobs, server


class Served:
    """`db.serving()` held on an event loop of its own, from `with` until `release()`."""

    def __init__(self, db: Database) -> None:
        self._entered, self._leave = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._hold(db),))

    async def _hold(self, db: Database) -> None:
        async with db.serving():
            self._entered.set()
            while not self._leave.is_set():
                await asyncio.sleep(0.002)

    def __enter__(self) -> Served:
        self._thread.start()
        assert self._entered.wait(5)
        return self

    def release(self) -> None:
        self._leave.set()
        self._thread.join(5)

    def __exit__(self, *exc: object) -> None:
        self.release()


def requests_free(db: Database) -> bool:
    """No process holds `.requests` (nobody is being served): its exclusive lock is free."""
    fd = os.open(f"{db.engine.url.database}.requests", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
