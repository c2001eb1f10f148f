"""Jobs in processes of their own (`serve --job-processes N`): the server only takes requests.

In-process tests run the web app as a server with job processes elsewhere, and a job process's
loop (`job_process.run`) on another runtime over the same database, as `refund-desk worker`
does; the slow tests run the real processes.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from refund_desk import clock
from refund_desk.cases.intake import ADVANCE
from refund_desk.runtime import Runtime
from refund_desk.storage.models import Job
from refund_desk.web import job_process
from refund_desk.web.app import create_app
from tests.conftest import make_runtime
from tests.helpers import ACME, Harness
from tests.process_helpers import Env


@pytest.fixture()
def apart(any_db_url: str) -> Iterator[tuple[Harness, TestClient, Runtime]]:
    """A server whose jobs run elsewhere, and a second runtime (the job process's)."""
    web = make_runtime(any_db_url)
    web.settings = web.settings.model_copy(update={"job_processes": 1})
    desk = Harness(web)
    desk.publish()
    jobs = make_runtime(any_db_url)
    try:
        with TestClient(create_app(web)) as client:
            yield desk, client, jobs
    finally:
        jobs.db.dispose()
        web.db.dispose()


def _advance_job(runtime: Runtime, case_id: str) -> Job:
    with runtime.db.read() as session:
        return session.scalars(
            select(Job).where(Job.kind == ADVANCE, Job.payload["case_id"].as_string() == case_id)  # type: ignore[attr-defined]
        ).one()


def test_the_server_runs_no_job_and_a_job_process_takes_the_work_at_once(
    apart: tuple[Harness, TestClient, Runtime],
) -> None:
    desk, client, jobs = apart
    response = client.post(
        "/api/v1/refund-requests",
        json=desk.request(desk.payment()),
        headers={"Authorization": f"Bearer {desk.key}"},
    )
    assert response.status_code == 201, response.text
    case_id = response.json()["id"]
    assert response.json()["status"] == "received"
    time.sleep(0.5)
    job = _advance_job(desk.runtime, case_id)
    # Nobody in the server took it, and it is due at once (no grace for a worker here).
    assert job.status == "pending" and job.lease_owner is None and job.attempt == 0
    assert job.due_at <= clock.now()
    assert desk.get(case_id)["status"] == "received"

    stop = threading.Event()
    worker = threading.Thread(target=job_process.run, args=(jobs, stop))
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while desk.get(case_id)["status"] != "refunded" and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        worker.join(timeout=30)
    assert not worker.is_alive()
    assert desk.get(case_id)["status"] == "refunded"
    assert _advance_job(desk.runtime, case_id).lease_owner == jobs.desk.jobs.owner
    assert len(desk.refunds_at_processor(response.json()["payment"])) == 1


def test_readiness_of_a_server_with_job_processes_reads_their_sweeps(
    apart: tuple[Harness, TestClient, Runtime],
) -> None:
    _, client, jobs = apart
    before = client.get("/readyz")
    assert before.status_code == 503
    assert before.json()["checks"]["scheduler"]["error"] == "no replica has run"
    stop = threading.Event()
    worker = threading.Thread(target=job_process.run, args=(jobs, stop))
    worker.start()
    try:
        deadline = time.monotonic() + 15
        while client.get("/readyz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        ready = client.get("/readyz")
    finally:
        stop.set()
        worker.join(timeout=30)
    assert ready.status_code == 200, ready.text
    replicas = ready.json()["checks"]["scheduler"]["detail"]["replicas"]
    assert [r["replica"] for r in replicas] == [jobs.desk.jobs.owner]


@pytest.mark.slow
def test_a_job_process_that_dies_mid_refund_is_replaced_and_its_job_recovered(
    tmp_path: Path,
) -> None:
    """The power goes in the job process after the processor refunded: the server keeps
    answering, starts another job process, and the job's lease runs out and is taken over:
    one refund, recorded."""
    env = Env(tmp_path)
    env.cli("db", "upgrade")
    env.cli("policy", "publish", str(ACME))
    key = env.api_key()
    payment = env.payment("30.00", "ada@example.com", age_days=2)
    env.cli("sandbox", "fault", "crash-after-success", "--times", "1")
    headers = {"Authorization": f"Bearer {key}"}
    body: dict[str, Any] = {
        "payment": payment,
        "email": "ada@example.com",
        "currency": "USD",
        "amount": "20.00",
        "message": "The mug arrived broken.",
    }
    proc, url = env.serve("--job-processes", "1")
    try:
        answer = httpx.post(f"{url}/api/v1/refund-requests", json=body, headers=headers)
        assert answer.status_code == 201 and answer.json()["status"] == "received"
        case_id = answer.json()["id"]
        deadline = time.monotonic() + 90
        case: dict[str, Any] = {}
        while time.monotonic() < deadline:
            case = httpx.get(f"{url}/api/v1/cases/{case_id}", headers=headers).json()
            if case["status"] == "refunded":
                break
            time.sleep(0.2)
        assert case["status"] == "refunded", case
        assert [r["amount"] for r in case["refunds"]] == ["20.00"]
        assert proc.poll() is None  # the server itself never went down
    finally:
        output = env.stop(proc)
    assert "exited with 86; starting another" in output  # the sandbox's power cut
    shown = json.loads(env.cli("sandbox", "payment", "show", payment).stdout)
    assert len(shown["refunds"]) == 1
    assert "ok:" in env.cli("audit", "verify").stdout


@pytest.mark.slow
def test_stopping_the_server_stops_its_job_processes(tmp_path: Path) -> None:
    env = Env(tmp_path)
    proc, url = env.serve("--job-processes", "2")
    try:
        deadline = time.monotonic() + 60
        while httpx.get(f"{url}/readyz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        replicas = httpx.get(f"{url}/readyz").json()["checks"]["scheduler"]["detail"]["replicas"]
    finally:
        env.stop(proc)
    pids = {int(r["replica"].split(":")[1]) for r in replicas}
    assert pids and proc.pid not in pids
    deadline = time.monotonic() + 20
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)


def test_a_stop_signal_stops_the_loop_whatever_lock_its_thread_holds() -> None:
    """A worker was found stuck after its server stopped: its SIGTERM handler called
    `stop.set()` in the main thread while that thread held the event's lock (inside `wait`,
    or inside a first handler interrupted by a second SIGTERM). The handler takes no lock:
    here it runs while its thread holds the event's lock and the lock that starting a thread
    takes."""
    stop = job_process.SignalledStop()

    def the_main_thread_interrupted() -> None:
        with stop._cond, threading._active_limbo_lock:  # type: ignore[attr-defined]
            stop.handler(signal.SIGTERM, None)

    main = threading.Thread(target=the_main_thread_interrupted, daemon=True)
    main.start()
    main.join(5)
    assert not main.is_alive(), "the handler waits for a lock its own thread holds"
    assert stop.is_set() and stop.wait(job_process.POLL_SECONDS)  # `run`'s loop ends
