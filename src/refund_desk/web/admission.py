"""At most a few intake captures run at once in a replica; the others wait on the event loop.

Each capture is a write transaction (on SQLite: one writer at a time) run in a thread of the
pool. With 16 requests in 16 threads, the thread that holds the writer shares the interpreter
with 15 that only wait for it, so the writer's hold time stretches with the number of
requests. Admitted here first, a waiting request holds no thread and no connection: it is a
coroutine suspended on a semaphore, and the few threads that run compete with the jobs only.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

T = TypeVar("T")


def intake_limit(
    configured: int | None,
    *,
    jobs_elsewhere: bool,
    processor_is_remote: bool,
    one_writer: bool = True,
) -> int | None:
    """How many captures a replica runs at once (None: no limit; `REFUND_DESK_INTAKE_CONCURRENCY`
    sets it, 0: no limit). Measured (docs/performance.md): with job processes, one at a time on
    one writer (SQLite), two where captures wait on round trips (PostgreSQL); none where the
    replica's own threads run the jobs, or where a capture waits on a processor's answer."""
    if configured is None:
        if not jobs_elsewhere or processor_is_remote:
            return None
        return 1 if one_writer else 2
    return configured or None


class IntakeGate:
    """`await gate.run(fn)`: runs `fn` (a coroutine factory) once fewer than `limit` run;
    without a limit, at once. While a request waits here or runs, `serving()` (the database's)
    is held: the jobs' writes let it go first (`Database.serving`)."""

    def __init__(
        self, limit: int | None, serving: Callable[[], AbstractContextManager[None]] = nullcontext
    ) -> None:
        if limit is not None and limit < 1:
            raise ValueError("the intake gate admits at least one request at a time")
        self.limit = limit
        self._serving = serving
        # One semaphore per event loop (a server has one; a test client may make several).
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self.inside = 0  # running now
        self.most_inside = 0  # the most that ever ran at once (tests)

    async def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        with self._serving():
            if self.limit is None:
                return await self._enter(fn)
            loop = asyncio.get_running_loop()
            slots = self._slots.get(loop)
            if slots is None:
                slots = self._slots[loop] = asyncio.Semaphore(self.limit)
            async with slots:
                return await self._enter(fn)

    async def _enter(self, fn: Callable[[], Awaitable[T]]) -> T:
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        try:
            return await fn()
        finally:
            self.inside -= 1


async def admitted(request: Request, fn: Callable[..., T], *args: Any) -> T:
    """Run a capture (`fn(*args)`, blocking) in the thread pool once the replica's intake gate
    admits it: the API, the web form, email and the storefront and helpdesk webhooks share
    one gate, so no channel's burst takes every thread from the others."""
    gate: IntakeGate = request.app.state.intake_gate
    return await gate.run(lambda: run_in_threadpool(fn, *args))
