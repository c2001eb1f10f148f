"""Where `advance` asks the advisor: before the decision's transaction, whether it is a model
over the network or answers in this process (no lock is held for its answer)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import select

from refund_desk.advisor.offline import OfflineAdvisor
from refund_desk.cases.ports import Advice, AdviceRequest
from refund_desk.runtime import Runtime
from refund_desk.storage.db import Database
from refund_desk.storage.models import Job
from tests.helpers import Harness


class _Probe:
    """Answers as the offline advisor does and, while it is asked, tries to take the writer
    from another thread: `writer_free` says whether that succeeded within `patience`."""

    def __init__(self, db: Database, *, local: bool, patience: float) -> None:
        self.db, self.patience = db, patience
        self.name = "probe"
        if local:
            self.local = True
        self.writer_free: list[bool] = []
        self._offline = OfflineAdvisor()

    def advise(self, request: AdviceRequest) -> Advice:
        done = threading.Event()

        def write() -> None:
            with self.db.write():
                pass
            done.set()

        threading.Thread(target=write, daemon=True).start()
        self.writer_free.append(done.wait(self.patience))
        return self._offline.advise(request)


@pytest.fixture()
def desk(runtime: Runtime) -> Harness:
    harness = Harness(runtime)
    harness.publish()
    return harness


def test_a_model_over_the_network_is_asked_with_no_transaction_open(desk: Harness) -> None:
    probe = _Probe(desk.runtime.db, local=False, patience=10.0)
    desk.runtime.desk.advisor = probe
    body = desk.post(desk.request(desk.payment())).json()
    assert desk.get(body["id"])["status"] == "refunded"
    assert probe.writer_free == [True]


def test_on_sqlite_a_local_advisor_is_asked_before_the_writer_is_taken(desk: Harness) -> None:
    probe = _Probe(desk.runtime.db, local=True, patience=10.0)
    desk.runtime.desk.advisor = probe
    body = desk.post(desk.request(desk.payment())).json()
    case = desk.get(body["id"])
    assert case["status"] == "refunded"
    assert probe.writer_free == [True]  # another writer went while the advisor ran


def test_a_job_queued_without_the_payments_id_reads_the_case_first(desk: Harness) -> None:
    """An `advance` job queued by an earlier version carries only the case's id."""
    runtime = desk.runtime
    runtime.desk.jobs_elsewhere = True  # the job waits for a sweep
    body = desk.post(desk.request(desk.payment())).json()
    assert body["status"] == "received"
    with runtime.db.write() as session:
        [job] = session.scalars(select(Job).where(Job.kind == "advance")).all()
        payload: dict[str, Any] = dict(job.payload)
        assert payload.pop("payment_id")  # the capture puts it there
        job.payload = payload
    runtime.desk.jobs_elsewhere = False
    desk.sweep()
    assert desk.get(body["id"])["status"] == "refunded"
