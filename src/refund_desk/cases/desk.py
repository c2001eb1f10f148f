"""The workflow core wired together: capture → advise → decide → route → execute.

`Desk` is plain data: the ports and storage. Every step that must survive a crash runs as a
job (`runtime.job_table`), so a restart simply resumes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from refund_desk import clock
from refund_desk.cases.people import Directory
from refund_desk.cases.ports import Advisor, Processor
from refund_desk.crypto import Vault
from refund_desk.jobs.queue import ClaimedJob, Handler, JobQueue
from refund_desk.storage.audit import AuditLog
from refund_desk.storage.db import Database


@dataclass
class Desk:
    db: Database
    audit: AuditLog
    vault: Vault
    processor: Processor
    advisor: Advisor
    jobs: JobQueue
    secret: str  # signs action tokens
    wake: Callable[[], None] | None = None  # set by the scheduler: sweep soon, work is waiting
    directory: Directory | None = None  # who is in a Slack user group (set with Slack)
    # Set by the scheduler: take this job now, in the background (see `start`).
    worker: Callable[[int], None] | None = None
    # Jobs run in processes of their own (or a test drives the sweeps): work committed here is
    # left to them, and a decision leaves its refund to the execute job.
    jobs_elsewhere: bool = False

    def now(self) -> datetime:
        return clock.now()

    def start(self, job_id: int | None) -> bool:
        """Work this process just committed: left to the job processes, to this process's
        worker, or else (a CLI, a test, a job's own follow-up) run here, now. A crash loses
        nothing: the job is a committed row. True if it was left to a worker."""
        if self.jobs_elsewhere:
            return job_id is not None
        if job_id is not None:
            if self.worker is not None:
                self.worker(job_id)
                return True
            self.jobs.run_now(job_id)
        if self.wake is not None:
            self.wake()  # what that job queued (messages, the refund) runs without waiting
        return False

    def run_claimed(self, job: ClaimedJob | None, handler: Handler | None = None) -> None:
        """Run a job claimed in the transaction that created it (see `JobQueue.claim_in`),
        by `handler` if given (the step that transaction left it at), else its kind's."""
        if job is not None:
            self.jobs.run(job, handler)
        if self.wake is not None:
            self.wake()
