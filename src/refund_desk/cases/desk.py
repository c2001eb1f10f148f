"""The workflow core wired together: capture → advise → decide → route → execute.

`Desk` is plain data: the ports and storage. The steps live in their own modules and take the
desk; every step that must survive a crash runs as a job (the table of job kinds is
`runtime.job_table`), so a restart simply resumes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from refund_desk import clock
from refund_desk.cases.people import Directory
from refund_desk.cases.ports import Advisor, Processor
from refund_desk.storage.audit import AuditLog
from refund_desk.storage.crypto import Vault
from refund_desk.storage.db import Database
from refund_desk.storage.jobs import ClaimedJob, JobQueue


@dataclass
class Desk:
    db: Database
    audit: AuditLog
    vault: Vault
    processor: Processor
    advisor: Advisor
    jobs: JobQueue
    secret: str  # signs action tokens
    clock: Callable[[], datetime] = field(default=clock.now)
    run_inline: bool = True  # run follow-up jobs at once in the process that created them
    wake: Callable[[], None] | None = None  # set by the scheduler: sweep soon, work is waiting
    directory: Directory | None = None  # who is in a Slack user group (set with Slack)
    # Set by the scheduler: take this job now, in the background (see `hand_off`).
    worker: Callable[[int], None] | None = None

    def now(self) -> datetime:
        return self.clock()

    def kick(self, job_id: int | None) -> None:
        """Run a job just created, instead of waiting for the next sweep; a crash loses nothing."""
        if job_id is not None and self.run_inline:
            self.jobs.run_now(job_id)
        if self.wake is not None:
            self.wake()  # what that job queued (messages, the refund) runs without waiting

    def hand_off(self, job_id: int | None) -> bool:
        """Work created by a request: the worker of this process takes it at once and the
        request answers without waiting for it. Without a worker (a CLI, tests that drive the
        sweeps themselves) it runs here, as `kick` does. The job is committed either way, so
        a crash loses nothing: a sweep takes it over after its grace. True if the worker
        took it, False if it ran here (or nothing was to run)."""
        if job_id is not None and self.worker is not None and self.run_inline:
            self.worker(job_id)
            return True
        self.kick(job_id)
        return False

    def run_claimed(self, job: ClaimedJob | None) -> None:
        """Run a job claimed in the transaction that created it (see `JobQueue.claim_in`)."""
        if job is not None:
            self.jobs.run(job)
        if self.wake is not None:
            self.wake()
