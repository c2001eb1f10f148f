"""Telling people: the core records *that* something must be said; adapters say it.

A notification is a job (kind `notify`) written in the same transaction as the change it
announces, so a crash or a Slack outage delays the message and never loses it. The Slack
surface registers the handler that renders and posts it; without Slack the handler records
nothing more and completes. The events are listed in docs/architecture.md.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from refund_desk.jobs.queue import queue
from refund_desk.text import Text

NOTIFY = "notify"
NOTIFY_ON = frozenset({"awaiting_approval", "approved", "parked", "refunded", "denied"})


def notify(session: Session, *, event: str, case_id: str | None = None, **data: Any) -> int:
    """Queue ``event``; a ``Text`` in ``data`` travels as JSON (``Text.from_json`` reads it)."""
    data = {k: v.to_json() if isinstance(v, Text) else v for k, v in data.items()}
    return queue(session, kind=NOTIFY, payload={"event": event, "case_id": case_id, "data": data})
