"""SLA durations as written in policies (``90s``, ``15m``, ``4h``, ``2d``) and deadlines."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

if TYPE_CHECKING:
    from refund_desk.policy.schema import BusinessHours, PolicyDocument

_WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")

_DURATION = re.compile(r"(\d+)\s*([smhd])")
_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
_TEN_YEARS = 3650 * 24 * 3600
_MAX_COUNT = {"s": _TEN_YEARS, "m": _TEN_YEARS // 60, "h": _TEN_YEARS // 3600, "d": 3650}
"""Nothing here waits longer than ten years; a longer duration is a typo, and would
overflow a date once added to now."""


def parse_duration(text: str) -> timedelta:
    """``"4h"`` -> 4 hours. One positive integer and one unit (s, m, h, d); else ValueError.

    Deliberately tiny: a policy author should not wonder whether ``1h30m`` or ``PT4H`` works.
    """
    if not isinstance(text, str):
        raise ValueError(f"duration must be a string like 4h, got {text!r}")
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise ValueError(f"duration {text!r} is not like 90s, 15m, 4h or 2d")
    count = int(match.group(1))
    if count <= 0:
        raise ValueError(f"duration {text!r} must be positive")
    if count > _MAX_COUNT[match.group(2)]:
        raise ValueError(f"duration {text!r} is longer than ten years")
    return timedelta(**{_UNIT[match.group(2)]: count})


def sla_period(doc: PolicyDocument, tier: int) -> timedelta | None:
    """How long a case of ``tier`` may wait, in the time the SLA clock runs in.

    With business hours a day (``2d``) is a business day's worth of open time, so Monday
    09:00 + 2d is Tuesday 17:00; hours and minutes are open hours and minutes.
    """
    text = doc.sla.get(tier)
    if text is None:
        return None
    period = parse_duration(text)
    hours = doc.business_hours
    if hours is None or not text.strip().endswith("d"):
        return period
    day = date(2000, 1, 3)
    workday = datetime.combine(day, time.fromisoformat(hours.end)) - datetime.combine(
        day, time.fromisoformat(hours.start)
    )
    return period.days * workday


def add_time(doc: PolicyDocument, start: datetime, period: timedelta) -> datetime:
    """``start + period``, counted in the policy's business hours when it sets them."""
    if doc.business_hours is None:
        return start + period
    return add_business_time(doc.business_hours, start, period)


def sla_deadline(doc: PolicyDocument, tier: int, start: datetime) -> datetime | None:
    """When a case of ``tier`` that started waiting at ``start`` breaches its SLA.

    Business hours when the policy sets them, wall-clock otherwise; ``None`` when the policy
    sets no SLA for the tier.
    """
    period = sla_period(doc, tier)
    return None if period is None else add_time(doc, start, period)


def add_business_time(hours: BusinessHours, start: datetime, period: timedelta) -> datetime:
    """Walk forward through open hours only (e.g. Mon-Fri 09:00-17:00 Europe/Berlin).

    Friday 16:00 + 4h is Monday 12:00: one hour on Friday, three on Monday morning.
    """
    zone = ZoneInfo(hours.tz)
    opens, closes = time.fromisoformat(hours.start), time.fromisoformat(hours.end)
    open_days = {_WEEKDAYS.index(d) for d in hours.days}
    cursor = start.astimezone(zone)
    remaining = period
    for _ in range(3700):  # ten years of days: a bound, never reached for real SLAs
        day = cursor.date()
        if day.weekday() in open_days:
            day_open = datetime.combine(day, opens, zone)
            day_close = datetime.combine(day, closes, zone)
            begin = max(cursor, day_open)
            if begin < day_close:
                available = day_close - begin
                if remaining <= available:
                    return (begin + remaining).astimezone(UTC)
                remaining -= available
        cursor = datetime.combine(day + timedelta(days=1), time(0), zone)
    raise ValueError("business hours never open long enough for this period")
