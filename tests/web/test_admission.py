"""The intake gate: at most N captures at once, the others wait on the event loop holding no
thread; a failing capture gives its turn back; every request admitted is answered."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.concurrency import run_in_threadpool
from fastapi.testclient import TestClient

from refund_desk.runtime import Runtime
from refund_desk.web.admission import IntakeGate, intake_limit
from refund_desk.web.app import create_app
from tests.helpers import Harness


def test_at_most_the_limit_run_and_the_waiting_hold_no_thread() -> None:
    gate = IntakeGate(2)
    lock = threading.Lock()
    threads_busy = [0, 0]  # now, most

    def capture(n: int) -> int:
        with lock:
            threads_busy[0] += 1
            threads_busy[1] = max(threads_busy[1], threads_busy[0])
        time.sleep(0.03)
        with lock:
            threads_busy[0] -= 1
        return n

    async def main() -> list[int]:
        return await asyncio.gather(
            *(gate.run(lambda n=n: run_in_threadpool(capture, n)) for n in range(10))
        )

    assert asyncio.run(main()) == list(range(10))
    assert gate.most_inside == 2
    assert threads_busy[1] == 2  # the eight waiting never took a thread
    assert gate.inside == 0


def test_a_failing_capture_gives_its_turn_back() -> None:
    gate = IntakeGate(1)

    def capture(n: int) -> int:
        if n % 2:
            raise ValueError(n)
        return n

    async def main() -> list[Any]:
        return await asyncio.gather(
            *(gate.run(lambda n=n: run_in_threadpool(capture, n)) for n in range(6)),
            return_exceptions=True,
        )

    results = asyncio.run(asyncio.wait_for(main(), 10))
    assert [r for r in results if isinstance(r, int)] == [0, 2, 4]
    assert sum(isinstance(r, ValueError) for r in results) == 3
    assert gate.inside == 0


def test_no_limit_runs_everything_at_once() -> None:
    gate = IntakeGate(None)
    started = 0
    release = asyncio.Event()

    async def capture() -> None:
        nonlocal started
        started += 1
        await release.wait()

    async def main() -> None:
        tasks = [asyncio.ensure_future(gate.run(capture)) for _ in range(5)]
        while started < 5:
            await asyncio.sleep(0.001)
        release.set()
        await asyncio.gather(*tasks)

    asyncio.run(asyncio.wait_for(main(), 10))
    assert gate.most_inside == 5


def test_the_default_limit_depends_on_where_the_jobs_run() -> None:
    assert intake_limit(None, jobs_elsewhere=False, processor_is_remote=False) is None
    assert intake_limit(None, jobs_elsewhere=True, processor_is_remote=False) == 1
    # On PostgreSQL a capture waits on its round trips: two overlap.
    assert intake_limit(None, jobs_elsewhere=True, processor_is_remote=False, one_writer=False) == 2
    assert (
        intake_limit(None, jobs_elsewhere=False, processor_is_remote=False, one_writer=False)
        is None
    )
    # A capture that waits on the processor's network answer is not limited by default.
    assert intake_limit(None, jobs_elsewhere=True, processor_is_remote=True) is None
    assert intake_limit(0, jobs_elsewhere=True, processor_is_remote=False) is None
    assert intake_limit(3, jobs_elsewhere=False, processor_is_remote=True) == 3
    with pytest.raises(ValueError):
        IntakeGate(0)


def test_concurrent_requests_through_a_gate_of_one_are_all_captured(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime.settings, "intake_concurrency", 1)
    desk = Harness(runtime)
    desk.publish()
    payments = [desk.payment() for _ in range(6)]
    app = create_app(runtime, scheduler=False)
    gate: IntakeGate = app.state.intake_gate
    assert gate.limit == 1
    headers = {"Authorization": f"Bearer {desk.key}"}
    with TestClient(app) as client, ThreadPoolExecutor(6) as pool:  # one event loop
        answers = list(
            pool.map(
                lambda p: client.post(
                    "/api/v1/refund-requests", json=desk.request(p), headers=headers
                ),
                payments,
            )
        )
    assert [a.status_code for a in answers] == [201] * 6, [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 6
    assert gate.most_inside == 1 and gate.inside == 0
    assert desk.counts()[0] == 6
