"""SLA deadlines in business hours (the policy's time zone and open days) or wall-clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import yaml

from refund_desk.policy import parse_policy
from refund_desk.policy.durations import add_business_time, sla_deadline
from refund_desk.policy.schema import BusinessHours
from tests.helpers import ACME

BERLIN = ZoneInfo("Europe/Berlin")
HOURS = BusinessHours(
    tz="Europe/Berlin", days=["mon", "tue", "wed", "thu", "fri"], start="09:00", end="17:00"
)


def berlin(*args: int) -> datetime:
    return datetime(*args, tzinfo=BERLIN)  # type: ignore[misc]


def test_friday_afternoon_plus_four_hours_is_monday_noon() -> None:
    due = add_business_time(HOURS, berlin(2026, 11, 27, 16, 0), timedelta(hours=4))
    assert due == berlin(2026, 11, 30, 12, 0)
    assert due.tzinfo is UTC


@pytest.mark.parametrize(
    ("start", "period", "due"),
    [
        (berlin(2026, 11, 30, 10, 0), timedelta(hours=2), berlin(2026, 11, 30, 12, 0)),
        (berlin(2026, 11, 30, 7, 0), timedelta(minutes=30), berlin(2026, 11, 30, 9, 30)),
        (berlin(2026, 11, 30, 18, 0), timedelta(hours=1), berlin(2026, 12, 1, 10, 0)),
        (berlin(2026, 11, 28, 12, 0), timedelta(hours=8), berlin(2026, 11, 30, 17, 0)),
        (berlin(2026, 11, 30, 9, 0), timedelta(hours=16), berlin(2026, 12, 1, 17, 0)),
        (berlin(2026, 11, 30, 16, 59), timedelta(seconds=90), berlin(2026, 12, 1, 9, 0, 30)),
    ],
)
def test_business_time_skips_nights_and_weekends(
    start: datetime, period: timedelta, due: datetime
) -> None:
    assert add_business_time(HOURS, start, period) == due


def test_business_time_across_the_dst_change() -> None:
    # Sunday 29 March 2026 clocks go forward in Berlin; Friday 16:00 + 2h = Monday 10:00 CEST.
    due = add_business_time(HOURS, berlin(2026, 3, 27, 16, 0), timedelta(hours=2))
    assert due == berlin(2026, 3, 30, 10, 0)
    assert due.astimezone(UTC).hour == 8


def test_policy_deadline_is_wall_clock_without_business_hours() -> None:
    raw = yaml.safe_load(ACME.read_text())
    del raw["business_hours"]
    doc = parse_policy(yaml.safe_dump(raw))
    start = datetime(2026, 11, 27, 15, 0, tzinfo=UTC)
    assert sla_deadline(doc, 3, start) == start + timedelta(hours=4)
    assert sla_deadline(doc, 2, start) is None


def test_policy_deadline_uses_business_hours_when_set() -> None:
    doc = parse_policy(ACME.read_text())
    assert sla_deadline(doc, 3, berlin(2026, 11, 27, 16, 0)) == berlin(2026, 11, 30, 12, 0)
    # 24h is 24 open hours (three business days); 2d is two business days.
    assert sla_deadline(doc, 4, berlin(2026, 11, 30, 9, 0)) == berlin(2026, 12, 2, 17, 0)
    two_days = parse_policy(ACME.read_text().replace("4: 24h", "4: 2d"))
    assert sla_deadline(two_days, 4, berlin(2026, 11, 30, 9, 0)) == berlin(2026, 12, 1, 17, 0)
