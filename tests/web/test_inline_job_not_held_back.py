"""A capture that runs its own job (no worker in the process: `Desk.hand_off` falls back to
`kick` -> `JobQueue.run_now`) does so inside the intake gate, while its own process serves it
(`Database.serving`). The job's writes are the request's own (`_SERVING` is set in the
request's context, which its thread copies), so they do not wait for the very request that
runs them: a lone request is as fast with the patience as without it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from refund_desk.runtime import Runtime
from refund_desk.storage import db as db_module
from tests.helpers import Harness


@pytest.fixture()
def harness(runtime: Runtime) -> Iterator[Harness]:
    h = Harness(runtime)  # create_app(scheduler=False): no worker, jobs run inline
    h.publish()
    yield h


def _timed_posts(h: Harness, n: int) -> tuple[float, list[dict]]:
    bodies = []
    began = time.monotonic()
    for _ in range(n):
        response = h.post(h.request(h.payment()))
        assert response.status_code == 201, response.text
        bodies.append(response.json())
    return (time.monotonic() - began) / n, bodies


def test_a_request_running_its_job_inline_is_not_held_back_by_its_own_serving(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nothing else going on, a lone request must not wait `BACKGROUND_PATIENCE` per
    job transaction for itself. Measured against the same requests with patience 0."""
    _timed_posts(harness, 2)  # warm-up
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 0.0)
    without, _ = _timed_posts(harness, 4)
    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 0.1)
    with_patience, bodies = _timed_posts(harness, 4)
    # The inline job did run (the case moved on from `received` within the request).
    assert all(b["status"] != "received" for b in bodies), [b["status"] for b in bodies]
    assert with_patience - without < 0.1, (
        f"each request took {with_patience * 1000:.0f} ms with the 100 ms patience, "
        f"{without * 1000:.0f} ms without: the inline job waited for its own request"
    )


def test_an_inline_job_write_inside_serving_waits_the_patience(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mechanism, directly: the background write of a job run from within the request's
    own `serving()` block (the same process, nothing else served) waits the whole patience."""
    import asyncio

    from sqlalchemy import text

    monkeypatch.setattr(db_module, "BACKGROUND_PATIENCE", 0.5)
    db = harness.runtime.db

    def inline_job_write() -> float:
        began = time.monotonic()
        with db.background(), db.write() as session:
            session.execute(text("SELECT 1"))
        return time.monotonic() - began

    async def request() -> float:
        async with db.serving():  # the gate's, around the capture
            return await asyncio.to_thread(inline_job_write)

    waited = asyncio.run(request())
    assert waited < 0.25, f"the job's write in its own request waited {waited:.2f} s"
