"""The SQLite write lock's urgent turnstile (`<db>.urgent`, `WriteLock`)."""

from __future__ import annotations

import fcntl
import threading
from types import SimpleNamespace

import pytest
from sqlalchemy import text

from refund_desk.storage import db as db_module
from refund_desk.storage.db import Database


def test_an_exception_just_after_the_turnstile_is_passed_does_not_keep_it_closed(
    sqlite_jobs_and_server: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that can wait takes the `.urgent` file's exclusive lock and drops it at once.
    If an exception arrives between the two calls (Ctrl-C in a CLI command that waited at
    the turnstile while the server's Slack listener wrote: Python runs the signal handler as
    soon as `flock` returns), `__enter__`'s `except BaseException` only drops a *shared* lock
    it knows it holds (`_held_urgent`), so the exclusive lock stays on the file for as long
    as the process lives (a CLI in a REPL, a worker that catches and retries). Every urgent
    writer of every other process, i.e. every Slack listener's transaction before ack(),
    then blocks in `flock(LOCK_SH)` forever, holding its process's writer turn: the server
    stops writing at all. Here the exception is raised as the real `flock` returns."""
    cli, server = sqlite_jobs_and_server

    real_flock = fcntl.flock
    cli_urgent_fd = cli._write_lock._fds["urgent"]  # type: ignore[union-attr]
    interrupted: list[bool] = []

    def flock(fd: int, op: int) -> None:
        real_flock(fd, op)
        if fd == cli_urgent_fd and op == fcntl.LOCK_EX and not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt  # the handler of a signal that came as flock returned

    monkeypatch.setattr(db_module, "fcntl", SimpleNamespace(**{**vars(fcntl), "flock": flock}))
    with pytest.raises(KeyboardInterrupt), cli.write():
        pass
    monkeypatch.setattr(db_module, "fcntl", fcntl)
    assert interrupted

    done = threading.Event()
    failure: list[BaseException] = []

    def slack_listener() -> None:
        try:
            with server.write(urgent=True) as session:
                session.execute(text("INSERT INTO t VALUES ('click')"))
            done.set()
        except BaseException as exc:  # pragma: no cover - reported below
            failure.append(exc)

    listener = threading.Thread(target=slack_listener, daemon=True)
    listener.start()
    finished = done.wait(3)
    if not finished:  # unblock the listener so the test process can end
        real_flock(cli_urgent_fd, fcntl.LOCK_UN)
        listener.join(5)
    assert not failure, failure
    assert finished, "an urgent writer of another process waits forever: the turnstile stayed shut"
