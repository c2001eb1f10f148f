"""The audit head, anchored outside the database on a schedule.

Every hour the head (count and hash) is logged and announced to the policy's `audit` channel,
if it names one. `refund-desk audit verify --anchor HASH` later proves nothing before it was cut
or changed, even by someone with database access.
"""

from __future__ import annotations

import logging
from contextlib import suppress
from datetime import timedelta
from typing import TYPE_CHECKING

from sqlalchemy.exc import IntegrityError

from refund_desk.cases.notify import notify
from refund_desk.jobs.queue import ClaimedJob, RetryLater, enqueue
from refund_desk.storage.audit import head
from refund_desk.text import Code, text

if TYPE_CHECKING:
    from refund_desk.cases.desk import Desk

log = logging.getLogger(__name__)

JOB = "audit.anchor"
EVERY = timedelta(hours=1)


def run(desk: Desk, job: ClaimedJob) -> None:
    with desk.db.write() as session:
        count, hash_ = head(session)
        log.info("audit anchor: %s records, head %s", count, hash_)
        notify(
            session,
            event="audit.anchor",
            channel="audit",
            count=count,
            hash=hash_,
            text=text(
                f"Audit anchor: {count} records, head ",
                Code(hash_),
                ". Keep it; ",
                Code(f"refund-desk audit verify --anchor {hash_}"),
                " proves nothing before it changed.",
            ),
        )
    raise RetryLater(EVERY.total_seconds(), "next anchor", failed=False)


def ensure_scheduled(desk: Desk) -> None:
    """Put the recurring anchor job in the jobs table once (replicas race harmlessly)."""
    with suppress(IntegrityError), desk.db.write() as session:
        enqueue(session, kind=JOB, payload={}, dedupe_key="audit.anchor:scheduled")
