"""The composition root: build the running system from settings (database, audit, processor,
advisor, desk, customer delivery) and the one table of job kinds → handlers.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from refund_desk.advisor.offline import OfflineAdvisor
from refund_desk.cases import anchor, decide, evidence, executor, intake, sla
from refund_desk.cases.desk import Desk
from refund_desk.cases.evidence import EvidenceStore
from refund_desk.cases.notify import NOTIFY
from refund_desk.cases.ports import Advisor, Processor
from refund_desk.crypto import Vault
from refund_desk.customers import appeals, couriers, erasure, unclaimed
from refund_desk.customers.outcomes import TELL, Delivery
from refund_desk.jobs.queue import Handler, JobQueue, nothing_to_do
from refund_desk.payments import reconcile, webhooks
from refund_desk.payments.paypal_api import PayPalProcessor
from refund_desk.payments.processors import Processors
from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.settings import ConfigError, Settings
from refund_desk.storage.audit import AuditLog
from refund_desk.storage.db import Database, Deployment
from refund_desk.storage.migrate import upgrade
from refund_desk.web.metrics import TimedProcessor

if TYPE_CHECKING:
    from refund_desk.bot.app import Surface


@dataclass
class Runtime:
    settings: Settings
    db: Database
    desk: Desk
    sandbox: SandboxProcessor | None
    delivery: Delivery
    processor: Processor  # as configured, before `TimedProcessor` wraps it
    paypal: PayPalProcessor | None = None  # verifies PayPal's webhooks
    extra_jobs: dict[str, Handler] = field(default_factory=dict)  # the demo's request stream


def make_processor(settings: Settings, db: Database) -> Processor:
    members = [_processor(name, settings, db) for name in settings.processors]
    return members[0] if len(members) == 1 else Processors(members)


def _processor(name: str, settings: Settings, db: Database) -> Processor:
    if name == "sandbox":
        return SandboxProcessor(db)
    if name == "paypal":
        if not settings.paypal_client_id or settings.paypal_client_secret is None:
            raise ConfigError(
                "REFUND_DESK_PROCESSOR=paypal needs PAYPAL_CLIENT_ID and PAYPAL_CLIENT_SECRET"
            )
        return PayPalProcessor(
            client_id=settings.paypal_client_id,
            client_secret=settings.paypal_client_secret.get_secret_value(),
            api_base=settings.paypal_api_base,
            webhook_id=settings.paypal_webhook_id,
        )
    if settings.stripe_api_key is None:
        raise ConfigError("REFUND_DESK_PROCESSOR=stripe needs STRIPE_API_KEY")
    from refund_desk.payments.stripe_api import StripeProcessor

    return StripeProcessor.connect(
        settings.stripe_api_key.get_secret_value(), api_base=settings.stripe_api_base
    )


def members(processor: Processor) -> tuple[Processor, ...]:
    """The processors behind the port: itself, or those a `Processors` routes to."""
    return processor.members if isinstance(processor, Processors) else (processor,)


def make_advisor(settings: Settings) -> Advisor:
    """The OpenAI-compatible advisor when a key is set; otherwise offline (no network)."""
    if settings.openai_api_key is None or not settings.openai_api_key.get_secret_value():
        return OfflineAdvisor()
    from refund_desk.advisor.fallback import FallbackAdvisor
    from refund_desk.advisor.openai_api import OpenAIAdvisor

    # A model failure falls back to the offline advisor's answer, marked on the case.
    return FallbackAdvisor(
        OpenAIAdvisor(
            api_key=settings.openai_api_key.get_secret_value(),
            base_url=settings.openai_base_url,
            model=settings.model,
        )
    )


def build(
    settings: Settings,
    *,
    migrate: bool = False,
    db: Database | None = None,
    processor: Processor | None = None,
) -> Runtime:
    db = db or Database.from_url(settings.database_url)
    db.deployment = Deployment(api_webhook=settings.webhook_url is not None)
    if migrate:
        upgrade(db.engine)
    processor = processor or make_processor(settings, db)
    sandbox = next((p for p in members(processor) if isinstance(p, SandboxProcessor)), None)
    advisor = make_advisor(settings)
    # A lease must outlive the processor's (and the model's) timeout, or a slow call could be
    # run twice.
    lease = settings.lease_seconds or max(
        10.0, processor.timeout_seconds * 2, getattr(advisor, "budget_seconds", 0.0) * 1.5
    )
    lease = max(lease, processor.timeout_seconds * 1.5)  # a set lease too short is lengthened
    replica = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    jobs = JobQueue(db, owner=replica, lease_seconds=lease)
    secret = settings.secret_value()
    desk = Desk(
        db=db,
        audit=AuditLog(secret),
        vault=Vault(secret, db),
        processor=TimedProcessor(processor),
        advisor=advisor,
        jobs=jobs,
        secret=secret,
    )
    delivery = Delivery(
        desk=desk,
        couriers=couriers.from_settings(settings),
        webhook_url=settings.webhook_url,
        appeal_link=appeals.link_maker(desk, settings.public_url),
    )
    runtime = Runtime(
        settings=settings,
        db=db,
        desk=desk,
        sandbox=sandbox,
        delivery=delivery,
        processor=processor,
        paypal=next((p for p in members(processor) if isinstance(p, PayPalProcessor)), None),
    )
    install_jobs(runtime)
    if migrate and any(p is not sandbox for p in members(processor)):
        # a server on Stripe or PayPal reconciles every hour
        reconcile.ensure_scheduled(desk)
    if migrate:  # the audit head, anchored outside the database every hour
        anchor.ensure_scheduled(desk)
        erasure.ensure_scheduled(desk)  # retention, daily
    return runtime


def job_table(runtime: Runtime, *, slack: Surface | None = None) -> dict[str, Handler]:
    """Every kind of durable work and who does it: the one place to look."""
    desk, store = runtime.desk, EvidenceStore(runtime.settings.evidence_path())
    table: dict[str, Handler] = {
        intake.ADVANCE: partial(decide.advance, desk),  # advise, decide, route
        executor.EXECUTE: partial(executor.execute, desk),  # reserve, pay, record
        sla.REMIND: partial(sla.remind, desk),
        sla.ESCALATE: partial(sla.escalate, desk),
        webhooks.EVENT_JOB: partial(webhooks.handle, desk),  # the processor's webhooks
        reconcile.JOB: partial(reconcile.run_scheduled, desk),
        anchor.JOB: partial(anchor.run, desk),  # the audit head, to the log and a channel
        TELL: runtime.delivery.run,  # the outcome, through the customer's channel
        erasure.RETENTION_JOB: partial(  # personal data of long-closed cases, daily
            erasure.run_retention, desk, days=runtime.settings.retention_days, evidence=store
        ),
        # an erased customer's evidence files
        erasure.DELETE_FILES_JOB: partial(erasure.run_delete_files, desk, evidence=store),
        erasure.PURGE_KEYS_JOB: partial(erasure.run_purge_keys, desk),  # destroyed keys' rows
        # files of a request that never became a case
        evidence.UNCLAIMED_JOB: partial(unclaimed.run, desk, store=store),
        NOTIFY: nothing_to_do,  # without a chat surface the case itself is the record
    }
    if slack is not None:
        slack_jobs = slack.job_handlers()  # NOTIFY: Slack renders and posts what is said
        assert not (set(slack_jobs) - {NOTIFY}) & set(table), "a job kind with two handlers"
        table.update(slack_jobs)
    assert not set(runtime.extra_jobs) & set(table), "a job kind with two handlers"
    table.update(runtime.extra_jobs)
    return table


def install_jobs(runtime: Runtime, *, slack: Surface | None = None) -> None:
    runtime.desk.jobs.install(job_table(runtime, slack=slack))
    if slack is not None:
        runtime.desk.jobs.forget_when_done.update(slack.private_job_kinds())
        runtime.desk.jobs.on_erasure.append(slack.outbox.forget_cases)
