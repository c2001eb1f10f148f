"""Writers on one SQLite file take turns across processes, not in SQLite's busy handler."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event, text

from refund_desk.storage.db import Database, _Turns, make_engine


def test_writers_through_two_databases_on_one_file_wait_for_each_other(tmp_path: Path) -> None:
    """Two `Database`s on one file stand for two processes (each opens its own lock file).
    The second has no busy handler at all: it must wait before SQLite is asked, or fail."""
    url = f"sqlite:///{tmp_path / 'one.db'}"
    impatient = make_engine(url)

    @event.listens_for(impatient, "connect")
    def _no_busy_handler(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute("PRAGMA busy_timeout=0")

    first, second = Database.from_url(url), Database(impatient)
    with first.write() as session:
        session.execute(text("CREATE TABLE t (who TEXT, at REAL)"))
    order: list[str] = []
    holding = threading.Event()

    def hold() -> None:
        with first.write() as session:
            holding.set()
            time.sleep(0.5)
            session.execute(text("INSERT INTO t VALUES ('first', 0)"))
            order.append("first")

    thread = threading.Thread(target=hold)
    thread.start()
    holding.wait(5)
    began = time.monotonic()
    with second.write() as session:  # waits for the first writer's commit, then goes on
        order.append("second")
        session.execute(text("INSERT INTO t VALUES ('second', 0)"))
    waited = time.monotonic() - began
    thread.join()
    assert order == ["first", "second"]
    assert waited >= 0.3
    with second.read() as session:
        assert session.execute(text("SELECT who FROM t ORDER BY rowid")).scalars().all() == [
            "first",
            "second",
        ]
    assert (tmp_path / "one.db.writer").exists()
    first.dispose()
    second.dispose()


def test_an_urgent_writer_goes_before_the_writers_that_can_wait(tmp_path: Path) -> None:
    """A Slack listener's transaction (before ack()) does not queue behind intake and jobs."""
    db = Database.from_url(f"sqlite:///{tmp_path / 'turns.db'}")
    order: list[str] = []
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with db.write():
            holding.set()
            release.wait(5)

    def write(name: str, urgent: bool) -> None:
        if urgent:
            with db.urgent(), db.write():
                order.append(name)
        else:
            with db.write():
                order.append(name)

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait(5)
    waiting = [threading.Thread(target=write, args=(f"normal-{i}", False)) for i in range(5)]
    for thread in waiting:
        thread.start()
    time.sleep(0.3)  # the normal writers are queued
    urgent = threading.Thread(target=write, args=("urgent", True))
    urgent.start()
    time.sleep(0.3)
    release.set()
    for thread in [holder, urgent, *waiting]:
        thread.join(10)
    assert order[0] == "urgent", order
    assert sorted(order[1:]) == [f"normal-{i}" for i in range(5)]
    db.dispose()


def test_writers_that_can_wait_get_their_turns_in_order_of_arrival() -> None:
    """The turn is handed to the longest-waiting writer: none is passed over indefinitely."""
    turns = _Turns()
    order: list[int] = []
    turns.acquire(False)

    def write(i: int) -> None:
        turns.acquire(False)
        order.append(i)
        turns.release()

    threads = []
    for i in range(6):
        thread = threading.Thread(target=write, args=(i,))
        thread.start()
        threads.append(thread)
        time.sleep(0.05)  # queued one after the other
    turns.release()
    for thread in threads:
        thread.join(5)
    assert order == list(range(6))
    turns.acquire(True)  # free again: taken at once
    turns.release()


def test_an_urgent_writer_goes_before_another_process_writing_back_to_back(
    tmp_path: Path,
) -> None:
    """A job process commits one transaction after another; a server's Slack listener (urgent)
    waits for the one in progress at most, not for every one the job process starts next: a
    process that releases the writer and asks again at once would otherwise win each time."""
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    jobs, server = Database.from_url(url), Database.from_url(url)  # two processes' handles
    with jobs.write() as session:
        session.execute(text("CREATE TABLE t (who TEXT)"))
    stop, started = threading.Event(), threading.Event()

    def job_process() -> None:
        while not stop.is_set():
            with jobs.write() as session:
                session.execute(text("INSERT INTO t VALUES ('job')"))
                started.set()
                time.sleep(0.005)

    worker = threading.Thread(target=job_process)
    worker.start()
    try:
        started.wait(5)
        time.sleep(0.05)
        with server.read() as session:
            before = session.execute(text("SELECT count(*) FROM t")).scalar_one()
        with server.urgent(), server.write() as session:
            jobs_between = session.execute(text("SELECT count(*) FROM t")).scalar_one() - before
            session.execute(text("INSERT INTO t VALUES ('urgent')"))
    finally:
        stop.set()
        worker.join(10)
    assert jobs_between <= 1, f"{jobs_between} job transactions went first"
    assert (tmp_path / "busy.db.urgent").exists()
    jobs.dispose()
    server.dispose()
