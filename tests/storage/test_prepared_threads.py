"""One `Prepared` (module-level, shared by every request thread) run
for the first time by several threads at once returns rows to each of them."""

from __future__ import annotations

import sys
import threading
from typing import Any

import sqlalchemy as sa

from refund_desk.storage.db import Database
from refund_desk.storage.prepared import Prepared


def _race(db: Database, make: Any, rounds: int = 150, threads: int = 8) -> list[BaseException]:
    errors: list[BaseException] = []
    connections = [db._look_engine.connect() for _ in range(threads)]  # reads: DEFERRED
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: widen any window
    try:
        for _ in range(rounds):
            statement = make()
            barrier = threading.Barrier(threads)

            def run(
                c: sa.Connection, barrier: threading.Barrier = barrier, statement: Any = statement
            ) -> None:
                try:
                    barrier.wait()
                    rows = statement.run(c)
                    assert rows.one().one == 1
                except BaseException as exc:
                    errors.append(exc)

            workers = [threading.Thread(target=run, args=(c,)) for c in connections]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            if errors:
                break
    finally:
        sys.setswitchinterval(old)
        for c in connections:
            c.rollback()
            c.close()
    return errors


def test_a_text_statement_first_run_by_many_threads(db: Database) -> None:
    errors = _race(db, lambda: Prepared(sa.text("SELECT 1 AS one")))
    assert not errors, repr(errors[0])


def test_a_core_statement_first_run_by_many_threads(db: Database) -> None:
    errors = _race(db, lambda: Prepared(sa.select(sa.literal_column("1").label("one"))))
    assert not errors, repr(errors[0])
