"""Stopping a replica's sweeper waits for the jobs that run, not for those it cancelled."""

from __future__ import annotations

import time

from refund_desk.runtime import Runtime
from refund_desk.web.app import Sweeper


def test_stop_does_not_wait_for_a_cancelled_hand_off(runtime: Runtime) -> None:
    sweeper = Sweeper(runtime)  # SQLite: one worker thread
    ran: list[int] = []

    def run_now(job_id: int) -> bool:
        time.sleep(0.5)
        ran.append(job_id)
        return True

    sweeper.jobs.run_now = run_now  # type: ignore[method-assign]
    sweeper.start()
    sweeper.take(1)  # runs
    sweeper.take(2)  # waits behind it; stop() cancels it (its row stays for a sweep)
    time.sleep(0.1)
    start = time.monotonic()
    sweeper.stop(timeout=4)
    assert time.monotonic() - start < 2 and sweeper.busy == 0
    assert ran == [1]
