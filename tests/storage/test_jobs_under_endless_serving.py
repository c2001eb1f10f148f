"""Requests served without a break (a stand-in for a steady intake stream: `serving()` held
the whole time by the server's `Database`) slow a job process down but never stop it: its
loop (`job_process.run` on a second runtime of the same file) still refunds the case, each
write waiting at most the patience, with no job claimed twice (no lease lost to the wait)
and one refund at the processor."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from refund_desk.runtime import Runtime
from refund_desk.storage.models import Job
from refund_desk.web import job_process
from refund_desk.web.app import create_app
from tests.conftest import make_runtime
from tests.helpers import Harness
from tests.requests_first_helpers import Served


@pytest.fixture()
def apart(sqlite_url: str) -> Iterator[tuple[Harness, TestClient, Runtime]]:
    web = make_runtime(sqlite_url)
    web.settings = web.settings.model_copy(update={"job_processes": 1})
    desk = Harness(web)
    desk.publish()
    jobs = make_runtime(sqlite_url)
    jobs.desk.jobs.lease = type(jobs.desk.jobs.lease)(seconds=2)  # short: a starved job loses it
    try:
        with TestClient(create_app(web)) as client:
            yield desk, client, jobs
    finally:
        jobs.db.dispose()
        web.db.dispose()


def test_jobs_finish_while_requests_are_served_without_a_break(
    apart: tuple[Harness, TestClient, Runtime],
) -> None:
    desk, client, jobs = apart
    served = Served(desk.runtime.db).__enter__()  # until the end: requests without a break
    worker_stop = threading.Event()
    worker = threading.Thread(target=job_process.run, args=(jobs, worker_stop))
    try:
        payment = desk.payment()
        response = client.post(
            "/api/v1/refund-requests",
            json=desk.request(payment),
            headers={"Authorization": f"Bearer {desk.key}"},
        )
        assert response.status_code == 201, response.text
        case_id = response.json()["id"]
        began = time.monotonic()
        worker.start()
        deadline = began + 30
        while desk.get(case_id)["status"] != "refunded" and time.monotonic() < deadline:
            time.sleep(0.05)
        took = time.monotonic() - began
        assert desk.get(case_id)["status"] == "refunded"
    finally:
        worker_stop.set()
        if worker.is_alive():
            worker.join(30)
        served.release()
    assert len(desk.refunds_at_processor(payment)) == 1
    with desk.runtime.db.read() as session:
        attempts = {j.kind: j.attempt for j in session.scalars(select(Job))}
    assert all(a <= 1 for a in attempts.values()), attempts
    assert took < 15, took
