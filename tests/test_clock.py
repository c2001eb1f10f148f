"""One clock: moving it moves the time every part of the core reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from refund_desk import clock
from refund_desk.runtime import Runtime


def test_travel_moves_the_clock_and_puts_it_back() -> None:
    before = clock.now()
    with clock.travel(timedelta(days=3)):
        moved = clock.now()
        assert timedelta(days=3) <= moved - before < timedelta(days=3, minutes=1)
    assert clock.now() - before < timedelta(minutes=1)


def test_travel_to_a_fixed_moment_keeps_running() -> None:
    start = datetime(2031, 5, 17, 9, 0, tzinfo=UTC)
    with clock.travel(to=start):
        first = clock.now()
        second = clock.now()
    assert start <= first <= second < start + timedelta(minutes=1)
    assert first.tzinfo is not None


def test_the_desk_reads_the_one_clock(runtime: Runtime) -> None:
    with clock.travel(to=datetime(2031, 5, 17, 9, 0, tzinfo=UTC)):
        assert runtime.desk.now().year == 2031
