"""Build the running system from settings: database, audit, processor, advisor, desk."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass

from refund_desk.advisor.offline import OfflineAdvisor
from refund_desk.cases.desk import Desk
from refund_desk.cases.ports import Advisor, Processor
from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.settings import ConfigError, Settings
from refund_desk.storage.audit import AuditLog
from refund_desk.storage.crypto import Vault
from refund_desk.storage.db import Database
from refund_desk.storage.jobs import JobQueue
from refund_desk.storage.migrate import upgrade


@dataclass
class Runtime:
    settings: Settings
    db: Database
    desk: Desk
    sandbox: SandboxProcessor | None


def replica_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def make_processor(settings: Settings, db: Database) -> Processor:
    if settings.processor == "sandbox":
        return SandboxProcessor(db)
    raise ConfigError("REFUND_DESK_PROCESSOR=stripe is not available in this build yet")


def make_advisor(settings: Settings) -> Advisor:
    return OfflineAdvisor()


def build(
    settings: Settings,
    *,
    migrate: bool = False,
    db: Database | None = None,
    processor: Processor | None = None,
) -> Runtime:
    db = db or Database.from_url(settings.database_url)
    if migrate:
        upgrade(db.engine)
    processor = processor or make_processor(settings, db)
    # A lease must outlive the processor's timeout, or a slow call could be run twice.
    lease = settings.lease_seconds or max(10.0, processor.timeout_seconds * 2)
    jobs = JobQueue(db, owner=replica_id(), lease_seconds=lease)
    secret = settings.secret_value()
    desk = Desk(
        db=db,
        audit=AuditLog(secret),
        vault=Vault(secret),
        processor=processor,
        advisor=make_advisor(settings),
        jobs=jobs,
    )
    sandbox = processor if isinstance(processor, SandboxProcessor) else None
    return Runtime(settings=settings, db=db, desk=desk, sandbox=sandbox)
