"""The intake API answers after intake; `Prefer: wait=N` waits for the outcome (RFC 7240).

These run the app with its lifespan, so the replica's worker and sweeper run as in `serve`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from refund_desk import clock
from refund_desk.cases.intake import ADVANCE
from refund_desk.jobs.queue import JobQueue
from refund_desk.runtime import Runtime
from refund_desk.storage.models import Job
from refund_desk.web.app import create_app
from refund_desk.web.waiting import preferred_wait
from tests.helpers import Harness


@pytest.fixture()
def served(any_runtime: Runtime) -> Iterator[tuple[Harness, TestClient]]:
    desk = Harness(any_runtime)
    desk.publish()
    with TestClient(create_app(any_runtime)) as client:  # lifespan: worker and sweeper run
        yield desk, client


def _post(desk: Harness, client: TestClient, body: Any, **headers: str) -> Any:
    return client.post(
        "/api/v1/refund-requests",
        json=body,
        headers={"Authorization": f"Bearer {desk.key}", **headers},
    )


def _until(desk: Harness, case_id: str, status: str, seconds: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    case = desk.get(case_id)
    while case["status"] != status and time.monotonic() < deadline:
        time.sleep(0.05)
        case = desk.get(case_id)
    return case


def test_the_answer_comes_after_intake_and_the_worker_takes_the_job_at_once(
    served: tuple[Harness, TestClient],
) -> None:
    desk, client = served
    response = _post(desk, client, desk.request(desk.payment()))
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["status"] == "received" and body["amount"] == "20.00"
    assert "Preference-Applied" not in response.headers
    case = _until(desk, body["id"], "refunded")
    assert case["status"] == "refunded"
    with desk.runtime.db.read() as session:
        job = session.scalars(
            select(Job).where(Job.kind == ADVANCE, Job.payload["case_id"].as_string() == body["id"])  # type: ignore[attr-defined]
        ).one()
    # Done at once: the worker took it from the request, not the next periodic sweep (30 s).
    assert job.status == "done" and job.finished_at is not None
    assert job.finished_at - job.created_at < timedelta(seconds=10)


def test_prefer_wait_answers_with_the_outcome(served: tuple[Harness, TestClient]) -> None:
    desk, client = served
    began = time.monotonic()
    response = _post(desk, client, desk.request(desk.payment()), Prefer="wait=10")
    assert response.status_code == 201
    assert response.headers["Preference-Applied"] == "wait=10"
    assert response.json()["status"] == "refunded"
    assert [r["amount"] for r in response.json()["refunds"]] == ["20.00"]
    assert time.monotonic() - began < 10
    assert len(desk.refunds_at_processor(response.json()["payment"])) == 1


def test_prefer_wait_ends_when_a_person_must_decide(served: tuple[Harness, TestClient]) -> None:
    desk, client = served
    body = desk.request(desk.payment("900.00"), amount="600.00", message="Please refund.")
    began = time.monotonic()
    response = _post(desk, client, body, Prefer="respond-async, wait=10")
    assert response.json()["status"] == "awaiting_approval"
    assert time.monotonic() - began < 10  # answered when the case stopped moving


def test_prefer_wait_gives_up_after_its_time_with_the_case_as_it_is(runtime: Runtime) -> None:
    desk = Harness(runtime)
    desk.publish()
    runtime.desk.jobs_elsewhere = True  # nobody here runs the job
    began = time.monotonic()
    response = _post(desk, desk.client, desk.request(desk.payment()), Prefer="wait=1")
    assert 1 <= time.monotonic() - began < 5
    assert response.status_code == 201 and response.json()["status"] == "received"
    assert response.headers["Preference-Applied"] == "wait=1"


def test_prefer_wait_sees_work_done_by_another_replica(runtime: Runtime) -> None:
    """No wake-up reaches this process when another replica runs the job: it polls."""
    desk = Harness(runtime)
    desk.publish()
    runtime.desk.jobs_elsewhere = True  # this replica leaves the job alone
    other = JobQueue(runtime.db, owner="other-replica", lease_seconds=30)
    other.install(runtime.desk.jobs.handlers)
    assert not other.listeners

    answered = threading.Event()

    def elsewhere() -> None:  # the other replica's worker, sweeping until the answer is out
        while not answered.wait(0.2):
            other.sweep(now=clock.now() + timedelta(seconds=10))

    thread = threading.Thread(target=elsewhere)
    thread.start()
    try:
        response = _post(desk, desk.client, desk.request(desk.payment()), Prefer="wait=10")
    finally:
        answered.set()
        thread.join()
    assert response.json()["status"] == "refunded"


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("wait=5", 5.0),
        ("WAIT = 3", 3.0),  # names are case-insensitive; BWS around "="
        ("respond-async, wait=100", 10.0),  # at most ten seconds
        ('wait="2"', 2.0),
        ("wait=abc", None),
        ("wait=-1", None),
        ("handling=lenient", None),
        ("wait=0", 0.0),
    ],
)
def test_the_wait_preference_is_read_as_rfc_7240_says(
    header: str | None, seconds: float | None
) -> None:
    assert preferred_wait(header) == seconds
