"""SLA durations and deadlines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from refund_desk.policy import PolicyDocument, parse_duration, sla_deadline


@pytest.mark.parametrize(
    ("text", "delta"),
    [
        ("90s", timedelta(seconds=90)),
        ("15m", timedelta(minutes=15)),
        ("4h", timedelta(hours=4)),
        ("2d", timedelta(days=2)),
        (" 24h ", timedelta(hours=24)),
    ],
)
def test_parse_duration(text: str, delta: timedelta) -> None:
    assert parse_duration(text) == delta


@pytest.mark.parametrize("text", ["", "4", "h", "4 hours", "1h30m", "PT4H", "-4h", "0s", "4w"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_not_a_string() -> None:
    with pytest.raises(ValueError):
        parse_duration(4)  # type: ignore[arg-type]


def test_sla_deadline(acme: PolicyDocument) -> None:
    # acme counts in business hours (Mon-Fri 09-17 Berlin): Friday 17:00 Berlin is closed.
    start = datetime(2024, 3, 1, 16, 0, tzinfo=UTC)
    assert sla_deadline(acme, 3, start) == datetime(2024, 3, 4, 12, 0, tzinfo=UTC)
    assert sla_deadline(acme, 4, start) == datetime(2024, 3, 6, 16, 0, tzinfo=UTC)
    assert sla_deadline(acme, 2, start) is None
