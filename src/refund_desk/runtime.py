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
from refund_desk.web.metrics import TimedProcessor


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
    if settings.stripe_api_key is None:
        raise ConfigError("REFUND_DESK_PROCESSOR=stripe needs STRIPE_API_KEY")
    from refund_desk.payments.stripe_api import StripeProcessor

    return StripeProcessor.connect(
        settings.stripe_api_key.get_secret_value(), api_base=settings.stripe_api_base
    )


def make_advisor(settings: Settings) -> Advisor:
    """The OpenAI-compatible advisor when a key is set; otherwise offline (no network)."""
    if settings.openai_api_key is None or not settings.openai_api_key.get_secret_value():
        return OfflineAdvisor()
    from refund_desk.advisor.openai_api import OpenAIAdvisor

    return OpenAIAdvisor(
        api_key=settings.openai_api_key.get_secret_value(),
        base_url=settings.openai_base_url,
        model=settings.model,
    )


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
    sandbox = processor if isinstance(processor, SandboxProcessor) else None
    advisor = make_advisor(settings)
    # A lease must outlive the processor's (and the model's) timeout, or a slow call could be
    # run twice.
    lease = settings.lease_seconds or max(
        10.0, processor.timeout_seconds * 2, getattr(advisor, "budget_seconds", 0.0) * 1.5
    )
    lease = max(lease, processor.timeout_seconds * 1.5)  # a set lease too short is lengthened
    jobs = JobQueue(db, owner=replica_id(), lease_seconds=lease)
    secret = settings.secret_value()
    desk = Desk(
        db=db,
        audit=AuditLog(secret),
        vault=Vault(secret),
        processor=TimedProcessor(processor),
        advisor=advisor,
        jobs=jobs,
        secret=secret,
    )
    _payments(desk, schedule=migrate and settings.processor == "stripe")
    _anchor(desk, schedule=migrate)
    return Runtime(settings=settings, db=db, desk=desk, sandbox=sandbox)


def _anchor(desk: Desk, *, schedule: bool) -> None:
    """The audit head, anchored outside the database every hour (log, optional channel)."""
    from refund_desk.cases import anchor

    anchor.register(desk)
    if schedule:
        anchor.ensure_scheduled(desk)


def _payments(desk: Desk, *, schedule: bool) -> None:
    """Processor webhooks and reconciliation; a server on Stripe reconciles every hour."""
    from refund_desk.payments import reconcile, webhooks

    webhooks.register(desk)
    reconcile.register(desk)
    if schedule:
        reconcile.ensure_scheduled(desk)
