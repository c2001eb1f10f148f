"""The in-process queue (`_Turns`) with background writers, many background threads looking
at `.requests` at once, urgent and background nested, and lease renewals while requests are
served."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from sqlalchemy import text

from refund_desk.storage import db as db_module
from refund_desk.storage.db import Database, SqliteWriters, _Turns
from refund_desk.storage.leases import LeaseKeeper
from tests.requests_first_helpers import Served


class _Interrupt(Exception):
    pass


def _queues_empty(turns: _Turns) -> bool:
    return not (turns._urgent or turns._waiting or turns._background)


def test_an_interrupted_background_waiter_leaves_the_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The main thread waits as a background writer; a signal interrupts it. It must leave
    `_background`, and the next release must go to the remaining waiter, not to a ghost."""
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 0.0)  # a ghost would be picked first
    turns = _Turns()
    turns.acquire(False)  # someone holds the writer
    got: list[str] = []

    def other() -> None:
        turns.acquire(False)
        got.append("intake")
        turns.release()

    def raise_(*_: object) -> None:
        raise _Interrupt

    previous = signal.signal(signal.SIGUSR1, raise_)
    try:
        main = threading.main_thread().ident
        assert main is not None
        timer = threading.Timer(0.1, signal.pthread_kill, args=(main, signal.SIGUSR1))
        timer.start()
        with pytest.raises(_Interrupt):
            turns.acquire(False, True)
        timer.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert not turns._background
    t = threading.Thread(target=other)
    t.start()
    time.sleep(0.05)
    turns.release()
    t.join(5)
    assert got == ["intake"]
    assert _queues_empty(turns) and not turns._busy


def test_a_background_waiter_is_not_starved_by_a_stream_of_writers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four threads write back to back without pause; a background writer queued among them
    gets the turn within about its patience."""
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 0.1)
    turns = _Turns()
    stop = threading.Event()

    def stream() -> None:
        while not stop.is_set():
            turns.acquire(False)
            time.sleep(0.002)
            turns.release()

    threads = [threading.Thread(target=stream) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    began = time.monotonic()
    turns.acquire(False, True)
    waited = time.monotonic() - began
    turns.release()
    stop.set()
    for t in threads:
        t.join(5)
    assert waited < 0.1 + 0.1, f"the background writer waited {waited:.3f} s"
    assert _queues_empty(turns)


def test_many_background_threads_probing_at_once_each_wait_about_the_patience(
    two_processes: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`_probing` lets one look at a time; each thread's deadline is taken before it queues
    for `_probing`, so no thread's look lasts much more than the patience."""
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 0.2)
    jobs, server = two_processes
    writers = jobs._write_lock
    assert isinstance(writers, SqliteWriters)
    looks: list[float] = []
    original = SqliteWriters._wait_for_requests

    def timed(self: SqliteWriters, deadline: float) -> None:
        began = time.monotonic()
        try:
            original(self, deadline)
        finally:
            looks.append(time.monotonic() - began)

    monkeypatch.setattr(SqliteWriters, "_wait_for_requests", timed)

    def job() -> None:
        with jobs.background(), jobs.write() as session:
            session.execute(text("INSERT INTO t VALUES ('job')"))

    with Served(server):
        began = time.monotonic()
        threads = [threading.Thread(target=job) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        total = time.monotonic() - began
    assert len(looks) == 16
    assert max(looks) < 0.2 + 0.1, f"longest look {max(looks):.3f} s"
    assert total < 2.0, total


def test_urgent_inside_background_and_background_inside_urgent_are_not_held_back(
    two_processes: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 2.0)
    jobs, server = two_processes
    with Served(server):
        for outer, inner in ((jobs.background, jobs.urgent), (jobs.urgent, jobs.background)):
            began = time.monotonic()
            with outer(), inner(), jobs.write() as session:
                session.execute(text("INSERT INTO t VALUES ('urgent')"))
            assert time.monotonic() - began < 0.5
        # and the flag is back to normal after: a plain write is not background
        began = time.monotonic()
        with jobs.write() as session:
            session.execute(text("INSERT INTO t VALUES ('plain')"))
        assert time.monotonic() - began < 0.5
        # background after urgent was left: held back again (up to the patience)
        with jobs.urgent():
            pass
        began = time.monotonic()
        with jobs.background(), jobs.write() as session:
            session.execute(text("INSERT INTO t VALUES ('job')"))
        assert time.monotonic() - began >= 1.5


def test_lease_renewals_of_a_job_are_not_held_back_by_requests(
    two_processes: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keeper's thread renews from outside the job's context: not a background writer, so
    requests served elsewhere do not delay a renewal (the lease is not starved)."""
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 5.0)
    jobs, server = two_processes
    renewed: list[float] = []

    def renew(_job: object) -> bool:
        with jobs.write() as session:
            session.execute(text("INSERT INTO t VALUES ('renewal')"))
        renewed.append(time.monotonic())
        return True

    keeper: LeaseKeeper[object] = LeaseKeeper(renew, idle=0.1)
    with Served(server), jobs.background():  # the job holds its lease from inside its run
        began = time.monotonic()
        keeper.hold((1, 1), object(), every=0.05)
        time.sleep(0.5)
        keeper.release((1, 1))
    assert renewed, "no renewal ran"
    assert renewed[0] - began < 0.5
    assert len(renewed) >= 4
