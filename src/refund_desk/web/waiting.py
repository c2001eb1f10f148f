"""`Prefer: wait=N` (RFC 7240): answer when the case has stopped moving, or after N seconds.

The wait holds neither a database connection nor a worker thread: the request awaits an
asyncio event, which this replica's job runs set (`JobQueue.listeners`) when they finish a job
for the case, and it looks at the case again on each wake-up and at least every
`POLL_SECONDS` (the job may run in another replica, whose wake-ups never reach us).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from refund_desk.cases.lifecycle import Status
from refund_desk.jobs.queue import ClaimedJob

MAX_WAIT_SECONDS = 10.0
POLL_SECONDS = 0.5
# Statuses the pipeline leaves by itself; any other is an outcome, or waits for a person.
MOVING = frozenset(
    {
        Status.received,
        Status.advised,
        Status.decided,
        Status.approved,
        Status.executing,
        Status.failed,
    }
)


def preferred_wait(header: str | None) -> float | None:
    """The `wait` preference in seconds (at most MAX_WAIT_SECONDS), or None if not asked.

    A preference that cannot be read is ignored, as RFC 7240 says."""
    if not header:
        return None
    for item in header.split(","):
        name, _, value = item.split(";", 1)[0].partition("=")
        if name.strip().lower() != "wait":
            continue
        value = value.strip().strip('"')
        if not (value.isascii() and value.isdigit()):  # "²" is a digit to isdigit, not to float
            return None
        return min(float(value), MAX_WAIT_SECONDS)
    return None


def settled(view: dict[str, Any]) -> bool:
    return view.get("status") not in MOVING


class CaseWaiters:
    """Requests waiting for a case, woken from the threads that run jobs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    def job_finished(self, job: ClaimedJob) -> None:
        case_id = job.payload.get("case_id") if isinstance(job.payload, dict) else None
        if not isinstance(case_id, str):
            return
        with self._lock:
            waiting = list(self._waiting.get(case_id, ()))
        for loop, event in waiting:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(event.set)

    async def wait(
        self,
        case_id: str,
        seconds: float,
        look: Callable[[], Awaitable[dict[str, Any]]],
        first: dict[str, Any],
    ) -> dict[str, Any]:
        """Look again on each wake-up and every POLL_SECONDS until settled or out of time."""
        view = first
        if settled(view) or seconds <= 0:
            return view
        event = asyncio.Event()
        entry = (asyncio.get_running_loop(), event)
        with self._lock:
            self._waiting.setdefault(case_id, []).append(entry)
        deadline = time.monotonic() + seconds
        try:
            view = await look()  # a job may have finished before we were listening
            while not settled(view):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), timeout=min(left, POLL_SECONDS))
                event.clear()
                view = await look()
        finally:
            with self._lock:
                entries = self._waiting.get(case_id, [])
                entries.remove(entry)
                if not entries:
                    self._waiting.pop(case_id, None)
        return view
