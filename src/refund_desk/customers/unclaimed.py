"""Evidence files written for a request that never became a case are deleted.

Files are sealed and written before the case's transaction (`evidence.store_files`: no
transaction waits on the disk), so a request refused after that (nothing left to refund, a
delivery answered by the case it already made, a crash) would leave them in the folder with
nothing referring to them. The short transaction that fetches the customer's key before the
write also commits a job (`evidence.unclaimed`, due an hour later) naming the files; a refusal
seen in this process lets go of them at once (`release`), the job catches a process that died.

Both delete through `evidence.discard`, which never deletes a file a committed case refers to.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from refund_desk.cases.evidence import EvidenceStore, Stored, discard
from refund_desk.jobs.queue import ClaimedJob

if TYPE_CHECKING:
    from refund_desk.cases.desk import Desk

log = logging.getLogger(__name__)


def release(desk: Desk, files: Stored) -> None:
    """The request's case was not made (refused, or answered by an earlier case): its files
    go now unless a case refers to them. A failure here is left to the job."""
    if not files.written:
        return
    try:
        discard(desk, files.store, files.email_hash, files.written)
    except Exception:
        log.warning("unclaimed evidence files are left to their job", exc_info=True)


@dataclass
class Claim:
    kept: bool = False  # set once the request's case (or reply) holds its files


@contextmanager
def claiming(desk: Desk, files: Stored) -> Iterator[Claim]:
    """Around a capture: unless it sets `kept`, or if it raises, its files are let go."""
    claim = Claim()
    try:
        yield claim
    finally:
        if not claim.kept:
            release(desk, files)


def run(desk: Desk, job: ClaimedJob, *, store: EvidenceStore) -> None:
    """The job: an hour after the files were written, those no case took are deleted."""
    customer = str(job.payload.get("customer") or "")
    if customer:
        discard(desk, store, customer, [str(n) for n in job.payload.get("files", [])])
