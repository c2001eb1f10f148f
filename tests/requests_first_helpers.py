"""For the tests of requests before jobs (`Database.serving`, `Database.background`): two
`Database`s on one database stand for two processes (each opens its own lock files, and
`flock` locks of different open files conflict as between processes); `ServingProcess` is a
real second process serving a request."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from sqlalchemy import text

from refund_desk.storage.db import Database, requests_first_path


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
        self._thread = threading.Thread(target=asyncio.run, args=(self._hold(db),), daemon=True)

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


def write_time(db: Database, *, background: bool = True) -> float:
    """Seconds a write transaction took to run `SELECT 1`: a job's (`background`), or not."""
    began = time.monotonic()
    with db.background() if background else contextlib.nullcontext(), db.write() as session:
        session.execute(text("SELECT 1"))
    return time.monotonic() - began


def job_waited(jobs_url: str, server_url: str) -> float:
    """Seconds a job's write on `jobs_url` took while a request was served on `server_url`
    (two processes' handles): about the patience if it let the request go first."""
    jobs, server = Database.from_url(jobs_url), Database.from_url(server_url)
    try:
        with Served(server):
            return write_time(jobs)
    finally:
        jobs.dispose()
        server.dispose()
        Path(requests_file(jobs)).unlink(missing_ok=True)


def requests_file(db: Database) -> str:
    """The file the database's processes share to let requests go first."""
    if db.is_sqlite:
        return f"{db.engine.url.database}.requests"
    return requests_first_path(db.engine.url)


def requests_free(db: Database) -> bool:
    """No process holds the database's requests file (nobody is being served)."""
    return file_free(requests_file(db))


def file_free(path: str) -> bool:
    """Nobody holds `path`'s lock: its exclusive lock is free."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


class ServingProcess:
    """A real second process that serves a request on `url` (holds `Database.serving()`) from
    `with` until `release()` (it then exits) or `kill()` (SIGKILL: it never lets go itself)."""

    def __init__(self, url: str) -> None:
        program = textwrap.dedent(
            f"""
            import asyncio, sys
            from refund_desk.storage.db import Database

            async def main():
                db = Database.from_url({url!r})
                async with db.serving():
                    print("serving", flush=True)
                    sys.stdin.readline()

            asyncio.run(main())
            """
        )
        self._child = subprocess.Popen(
            [sys.executable, "-c", program],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )

    def __enter__(self) -> ServingProcess:
        assert self._child.stdout is not None
        assert self._child.stdout.readline().strip() == "serving"
        return self

    def release(self) -> None:
        assert self._child.stdin is not None
        self._child.stdin.write("done\n")
        self._child.stdin.flush()
        assert self._child.wait(10) == 0

    def kill(self) -> None:
        os.kill(self._child.pid, signal.SIGKILL)
        self._child.wait(10)

    def __exit__(self, *exc: object) -> None:
        if self._child.poll() is None:
            self._child.kill()
            self._child.wait(10)
