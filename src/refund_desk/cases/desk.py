"""The workflow core wired together: capture → advise → decide → route → execute.

`Desk` is plain data: the ports and storage. The steps live in their own modules and take the
desk; every step that must survive a crash runs as a job (the table of job kinds is
`runtime.job_table`), so a restart simply resumes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from refund_desk import clock
from refund_desk.cases.people import Directory
from refund_desk.cases.ports import Advisor, Processor
from refund_desk.storage.audit import AuditLog
from refund_desk.storage.crypto import Vault
from refund_desk.storage.db import Database
from refund_desk.storage.jobs import ClaimedJob, Handler, JobQueue

# Work a process hands to itself is due only after this grace: a sweep elsewhere takes it over
# only if this process died before running it.
INLINE_GRACE = timedelta(seconds=5)


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
    # Set in a server whose jobs run in processes of their own (`serve --job-processes N`):
    # nothing runs here, and work created here is due at once, for them to take.
    jobs_elsewhere: bool = False

    def now(self) -> datetime:
        return self.clock()

    def due_for_hand_off(self) -> datetime:
        """When work this process creates and means to run itself becomes due for the sweeps:
        after a grace, or at once when the jobs run in other processes."""
        return self.now() + (timedelta(0) if self.jobs_elsewhere else INLINE_GRACE)

    def kick(self, job_id: int | None) -> None:
        """Run a job just created, instead of waiting for the next sweep; a crash loses nothing."""
        if self.jobs_elsewhere:
            return  # a job process takes it (it is due at once)
        if job_id is not None and self.run_inline:
            self.jobs.run_now(job_id)
        if self.wake is not None:
            self.wake()  # what that job queued (messages, the refund) runs without waiting

    def hand_off(self, job_id: int | None) -> bool:
        """Work created by a request: the worker of this process takes it at once and the
        request answers without waiting for it. Without a worker (a CLI, tests that drive the
        sweeps themselves) it runs here, as `kick` does. The job is committed either way, so
        a crash loses nothing: a sweep takes it over after its grace. True if the worker
        (or a job process) took it, False if it ran here (or nothing was to run)."""
        if self.jobs_elsewhere:
            return job_id is not None
        if job_id is not None and self.worker is not None and self.run_inline:
            self.worker(job_id)
            return True
        self.kick(job_id)
        return False

    def run_claimed(self, job: ClaimedJob | None, handler: Handler | None = None) -> None:
        """Run a job claimed in the transaction that created it (see `JobQueue.claim_in`),
        by `handler` if given (the step that transaction left it at), else its kind's."""
        if job is not None:
            self.jobs.run(job, handler)
        if self.wake is not None:
            self.wake()
