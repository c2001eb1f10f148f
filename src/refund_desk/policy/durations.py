"""SLA durations as written in policies (``90s``, ``15m``, ``4h``, ``2d``) and deadlines."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from refund_desk.policy.schema import PolicyDocument

_DURATION = re.compile(r"(\d+)\s*([smhd])")
_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


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
    return timedelta(**{_UNIT[match.group(2)]: count})


def sla_deadline(doc: PolicyDocument, tier: int, start: datetime) -> datetime | None:
    """When a case of ``tier`` that started waiting at ``start`` breaches its SLA.

    Wall-clock time (business hours are applied by the scheduler, not here); ``None`` when
    the policy sets no SLA for the tier.
    """
    text = doc.sla.get(tier)
    if text is None:
        return None
    return start + parse_duration(text)
