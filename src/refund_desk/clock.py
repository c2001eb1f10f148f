"""The one clock. Everything in the core asks `now()` for the time, so a test
moves time for the whole system in one place (`travel`), and nothing reads the wall clock behind
its back. The edges that must use real time (the scheduler's timers, signature timestamps of
outside services) say so where they do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

Clock = Callable[[], datetime]


def system_time() -> datetime:
    return datetime.now(UTC)


_source: Clock = system_time


def now() -> datetime:
    """The current time, aware and in UTC."""
    return _source()


def set_source(source: Clock) -> Clock:
    """Replace the clock (tests, drills); returns the previous one to put back."""
    global _source
    previous, _source = _source, source
    return previous


@contextmanager
def travel(by: timedelta = timedelta(0), *, to: datetime | None = None) -> Iterator[None]:
    """Run a block with the whole system's time moved forward `by`, or fixed at `to`."""
    base = system_time()
    start = to if to is not None else base + by
    previous = set_source(lambda: start + (system_time() - base))
    try:
        yield
    finally:
        set_source(previous)
