"""The tables. Money is integer minor units with its currency beside it; times are UTC.

Personal data (the customer's email, name and words) is stored encrypted, with a keyed hash
of the email for matching; audit payloads never carry it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, Index, Text, UniqueConstraint
from sqlalchemy.sql import false
from sqlmodel import Field, SQLModel

from refund_desk import clock
from refund_desk.storage.types import UTCDateTime


def row_defaults(model: type[SQLModel]) -> dict[str, Any]:
    """The model's plain defaults by column (not its default factories): the values a row
    written as a plain `INSERT` takes where the caller names none, as the ORM would write."""
    return {
        name: field.default
        for name, field in model.model_fields.items()
        if not field.is_required() and field.default_factory is None
    }


def _optional_ts() -> Any:
    return Field(default=None, sa_column=Column(UTCDateTime(), nullable=True))


def _json(nullable: bool = True) -> Any:
    return Field(default=None, sa_column=Column(JSON, nullable=nullable))


class ApiKey(SQLModel, table=True):
    __tablename__ = "api_keys"
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=100)
    prefix: str = Field(max_length=16)
    key_hash: str = Field(max_length=64, unique=True)
    created_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )
    revoked_at: datetime | None = _optional_ts()
    last_used_at: datetime | None = _optional_ts()  # written at most once a minute
    expires_at: datetime | None = _optional_ts()  # a rotated key works until then
    # `read`: cases and the policy; `propose`: also files refund requests (`api_keys.SCOPES`)
    scope: str = Field(
        default="propose", max_length=20, sa_column_kwargs={"server_default": "propose"}
    )


class PolicyVersion(SQLModel, table=True):
    """A published policy: immutable once written; `version` numbers only go up."""

    __tablename__ = "policy_versions"
    version: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    policy_name: str = Field(max_length=100)
    content_hash: str = Field(max_length=64)
    source: str = Field(sa_column=Column(Text, nullable=False))
    published_by: str = Field(max_length=100)
    published_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )
    note: str | None = None


class Control(SQLModel, table=True):
    """The one row of switches: the active policy version, the autonomy mode, the kill switch."""

    __tablename__ = "control"
    id: int = Field(default=1, primary_key=True)
    active_version: int | None = None
    mode: str = Field(default="supervised", max_length=20)  # shadow|approve-all|supervised
    paused: bool = False
    # Policy lifecycle: a draft evaluated beside every new case, and after-the-fact review.
    shadow_draft: int | None = None
    shadow_started_at: datetime | None = _optional_ts()
    review_sample_rate: float | None = None  # None: the active policy's review_sample_rate
    publish_needs_second_lead: bool = Field(
        default=False, sa_column_kwargs={"server_default": false()}
    )
    # The circuit breaker: processor failures in a row, and why automatic execution stopped.
    consecutive_failures: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    breaker_tripped_at: datetime | None = _optional_ts()
    breaker_reason: str | None = Field(default=None, sa_column=Column(Text))
    updated_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )


class Payment(SQLModel, table=True):
    """A processor payment as we last saw it; its row is the lock for refunds against it."""

    __tablename__ = "payments"
    id: str = Field(primary_key=True, max_length=100)
    processor: str = Field(max_length=20)
    currency: str = Field(max_length=3)
    amount: int = Field(sa_column=Column(BigInteger, nullable=False))
    # refunded at the processor by others than us, when last seen (ours are our executions)
    refunded: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    email_hash: str | None = Field(default=None, max_length=64, index=True)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    seen_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )


class Case(SQLModel, table=True):
    __tablename__ = "cases"
    __table_args__ = (
        Index("ix_cases_payment_status", "payment_id", "status"),
        Index("ix_cases_email_created", "email_hash", "created_at"),
        Index("ix_cases_created_at", "created_at", "id"),  # the desk's orders, alone ...
        Index("ix_cases_updated_at", "updated_at", "id"),
        Index("ix_cases_amount", "amount", "id"),
        Index("ix_cases_status_created", "status", "created_at", "id"),  # ... after a status
        Index("ix_cases_status_amount", "status", "amount", "id"),
    )
    id: str = Field(primary_key=True, max_length=40)
    revision: int = 0
    status: str = Field(max_length=20)
    source: str = Field(max_length=20)
    external_id: str | None = Field(default=None, max_length=200)
    correlation_id: str = Field(max_length=40)
    payment_id: str = Field(foreign_key="payments.id", max_length=100)
    currency: str = Field(max_length=3)
    requested_amount: int | None = Field(default=None, sa_column=Column(BigInteger))
    amount: int = Field(sa_column=Column(BigInteger, nullable=False))
    amount_source: str = Field(max_length=30)
    reason: str | None = Field(default=None, max_length=30)
    reason_source: str | None = Field(default=None, max_length=30)
    email_enc: str = Field(sa_column=Column(Text, nullable=False))
    email_hash: str = Field(max_length=64)
    name_enc: str | None = Field(default=None, sa_column=Column(Text))
    message_enc: str | None = Field(default=None, sa_column=Column(Text))  # what they wrote now
    # what their message quoted or carried under it (earlier mails, forwards, signatures):
    # for a person to read, never read for a field (`advisor/reply.py`)
    earlier_enc: str | None = Field(default=None, sa_column=Column(Text))
    customer_verified: bool = False
    possible_duplicate: bool = False
    duplicate_of: str | None = Field(default=None, max_length=40)
    policy_version: int | None = None
    facts: dict[str, Any] | None = _json()  # the frozen policy context the case was decided on
    advice: dict[str, Any] | None = _json()
    decision: dict[str, Any] | None = _json()  # outcome, rule, tier, approvers, reason, trace
    provenance: dict[str, Any] | None = _json()  # consequential field -> where it came from
    callback_url: str | None = Field(default=None, sa_column=Column(Text))
    customer_message: str | None = Field(default=None, sa_column=Column(Text))
    park_reason: str | None = Field(default=None, sa_column=Column(Text))
    escalation_level: int = 0
    approval_round: int = 0  # bumped each time the case goes (back) to a person
    requested_by: str | None = Field(default=None, max_length=100)  # a Slack user who filed it
    # Customer channels: evidence (hashes, never the bytes), the appealed case, where to answer.
    evidence: list[dict[str, Any]] | None = _json()
    appeal_of: str | None = Field(default=None, max_length=40, unique=True, index=True)
    reply_enc: str | None = Field(default=None, sa_column=Column(Text))  # encrypted JSON
    erased_at: datetime | None = _optional_ts()  # the customer's personal data was erased
    sla_due_at: datetime | None = _optional_ts()
    created_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )
    updated_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )

    def asked(self) -> int | None:
        """What the customer asked for: their amount, else the amount the case was decided on
        (a person's partial approval changes ``amount``, never this)."""
        if self.requested_amount is not None:
            return self.requested_amount
        decided = ((self.facts or {}).get("request") or {}).get("amount")
        return int(decided) if isinstance(decided, int) else None


class IntakeKey(SQLModel, table=True):
    """An integrator's Idempotency-Key: the same key and body always answer with the same case."""

    __tablename__ = "intake_keys"
    api_key_id: int = Field(primary_key=True, foreign_key="api_keys.id")
    key: str = Field(primary_key=True, max_length=200)
    body_hash: str = Field(max_length=64)
    case_id: str = Field(foreign_key="cases.id", max_length=40)
    created_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )


class Execution(SQLModel, table=True):
    """Our durable record of one refund attempt; written before the processor hears of it."""

    __tablename__ = "executions"
    id: str = Field(primary_key=True, max_length=40)
    case_id: str = Field(foreign_key="cases.id", max_length=40, index=True)
    payment_id: str = Field(foreign_key="payments.id", max_length=100, index=True)
    amount: int = Field(sa_column=Column(BigInteger, nullable=False))
    currency: str = Field(max_length=3)
    idempotency_key: str = Field(max_length=80, unique=True)
    status: str = Field(max_length=20)  # reserved | succeeded | failed
    automatic: bool
    basis: str = Field(max_length=200)  # the rule or the approvals that authorized it
    processor_refund_id: str | None = Field(default=None, max_length=100)
    processor_status: str | None = Field(default=None, max_length=30)
    error_code: str | None = Field(default=None, max_length=60)
    error_message: str | None = Field(default=None, sa_column=Column(Text))
    created_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )
    finished_at: datetime | None = _optional_ts()
    # When the pay step last passed the barrier and sent the create (`executor._send`).
    sent_at: datetime | None = _optional_ts()


class Approval(SQLModel, table=True):
    """A person's decision on a case, in one approval round; its token's nonce is consumed here."""

    __tablename__ = "approvals"
    __table_args__ = (UniqueConstraint("case_id", "round", "approver", "decision"),)
    id: int | None = Field(default=None, primary_key=True)
    case_id: str = Field(foreign_key="cases.id", max_length=40, index=True)
    round: int = 0
    approver: str = Field(max_length=100)
    decision: str = Field(max_length=20)  # approve | deny | escalate
    amount: int | None = Field(default=None, sa_column=Column(BigInteger))
    reason: str | None = Field(default=None, sa_column=Column(Text))
    token_nonce: str = Field(max_length=64, unique=True)
    created_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )


class SlackMessage(SQLModel, table=True):
    """Every Slack message that carries a case's buttons (card, manager DMs) or its thread."""

    __tablename__ = "slack_messages"
    id: int | None = Field(default=None, primary_key=True)
    case_id: str | None = Field(default=None, max_length=40, index=True)
    kind: str = Field(max_length=20)  # card | dm
    channel: str = Field(max_length=40)
    ts: str = Field(max_length=40)
    created_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )


class Job(SQLModel, table=True):
    """Pending work. Claimed with a lease; `attempt` fences a late writer whose lease expired."""

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_due", "status", "due_at"),)
    id: int | None = Field(default=None, primary_key=True)
    kind: str = Field(max_length=40)
    payload: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    dedupe_key: str | None = Field(default=None, max_length=200, unique=True)
    status: str = Field(default="pending", max_length=10)  # pending | done | dead
    due_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    attempt: int = 0  # claims: fences a late writer whose lease expired
    failures: int = 0  # failed runs; `max_attempts` of them and the job is dead
    max_attempts: int = 20
    lease_owner: str | None = Field(default=None, max_length=80)
    lease_expires_at: datetime | None = _optional_ts()
    last_error: str | None = Field(default=None, sa_column=Column(Text))
    created_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )
    finished_at: datetime | None = _optional_ts()


class AuditRecord(SQLModel, table=True):
    """Append-only; triggers refuse UPDATE, DELETE and TRUNCATE."""

    __tablename__ = "audit_records"
    seq: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    case_id: str | None = Field(default=None, max_length=40, index=True)
    correlation_id: str | None = Field(default=None, max_length=40)
    actor_kind: str = Field(max_length=20)
    actor_id: str | None = Field(default=None, max_length=100)
    action: str = Field(max_length=60)
    policy_version: int | None = None
    payload: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    prev_hash: str = Field(max_length=64)
    hash: str = Field(max_length=64)


class AuditHead(SQLModel, table=True):
    """The chain's tip; locking this row serializes appends so the chain never forks."""

    __tablename__ = "audit_head"
    id: int = Field(default=1, primary_key=True)
    seq: int = 0
    hash: str = Field(default="0" * 64, max_length=64)


# ---------------------------------------------------------------- sandbox processor ledger


class SandboxPayment(SQLModel, table=True):
    __tablename__ = "sandbox_payments"
    id: str = Field(primary_key=True, max_length=40)
    amount: int = Field(sa_column=Column(BigInteger, nullable=False))
    currency: str = Field(max_length=3)
    email: str = Field(max_length=320)
    name: str | None = Field(default=None, max_length=200)
    chargebacks: int = 0
    created_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )


class SandboxRefund(SQLModel, table=True):
    __tablename__ = "sandbox_refunds"
    id: str = Field(primary_key=True, max_length=40)
    payment_id: str = Field(foreign_key="sandbox_payments.id", max_length=40, index=True)
    amount: int = Field(sa_column=Column(BigInteger, nullable=False))
    currency: str = Field(max_length=3)
    status: str = Field(max_length=20)
    idempotency_key: str | None = Field(default=None, max_length=200)
    meta: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )


class SandboxFault(SQLModel, table=True):
    """The fault the sandbox plays next; in the database so the CLI reaches a running server."""

    __tablename__ = "sandbox_faults"
    id: int = Field(default=1, primary_key=True)
    mode: str = Field(default="none", max_length=30)
    remaining: int | None = None  # None: until changed
    # A repeated idempotency key makes a new refund, until `fault none` (as a processor that
    # does not honour keys would).
    ignore_keys: bool = Field(default=False, sa_column_kwargs={"server_default": false()})


# ---------------------------------------------------------------- processor news


class ProcessorEvent(SQLModel, table=True):
    """A processor webhook event we accepted; its id makes a second delivery a no-op."""

    __tablename__ = "processor_events"
    id: str = Field(primary_key=True, max_length=100)
    processor: str = Field(max_length=20)
    type: str = Field(max_length=80)
    object_id: str | None = Field(default=None, max_length=100)
    received_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )


class ProcessorFinding(SQLModel, table=True):
    """Something reconciliation found; the key makes each finding reported once."""

    __tablename__ = "processor_findings"
    key: str = Field(primary_key=True, max_length=200)
    kind: str = Field(max_length=40)  # unknown_refund | missing_at_processor | *_mismatch
    case_id: str | None = Field(default=None, max_length=40, index=True)
    execution_id: str | None = Field(default=None, max_length=40)
    refund_id: str | None = Field(default=None, max_length=100)
    payment_id: str | None = Field(default=None, max_length=100)
    currency: str | None = Field(default=None, max_length=3)
    processor_amount: int | None = Field(default=None, sa_column=Column(BigInteger))
    our_amount: int | None = Field(default=None, sa_column=Column(BigInteger))
    processor_status: str | None = Field(default=None, max_length=30)
    our_status: str | None = Field(default=None, max_length=30)
    detail: str = Field(sa_column=Column(Text, nullable=False))
    found_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )


# ---------------------------------------------------------------- the AI advisor


class AdvisorCall(SQLModel, table=True):
    """One advisor call: whether its answer parsed and the tokens it spent (format, cost)."""

    __tablename__ = "advisor_calls"
    __table_args__ = (Index("ix_advisor_calls_day", "day", "provider"),)
    id: int | None = Field(default=None, primary_key=True)
    at: datetime = Field(default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False))
    day: str = Field(max_length=10)  # UTC date, ISO: the unit of the format-adherence figure
    case_id: str | None = Field(default=None, max_length=40, index=True)
    correlation_id: str | None = Field(default=None, max_length=40)
    provider: str = Field(max_length=30)
    model: str | None = Field(default=None, max_length=100)
    outcome: str = Field(max_length=20)  # parsed | unparsed (answered, bad format) | failed
    error_code: str | None = Field(default=None, max_length=60)
    prompt_tokens: int = 0
    completion_tokens: int = 0


# ---------------------------------------------------------------- policy lifecycle


class PolicyDraft(SQLModel, table=True):
    """A policy being worked on: editable by id until published; the gate reads its records."""

    __tablename__ = "policy_drafts"
    id: int | None = Field(default=None, primary_key=True)
    source: str = Field(sa_column=Column(Text, nullable=False))
    content_hash: str | None = Field(default=None, max_length=64)  # None while invalid
    author: str = Field(max_length=100)
    created_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )
    updated_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )
    last_test_ok: bool | None = None
    last_test_summary: str | None = Field(default=None, sa_column=Column(Text))
    last_backtest_hash: str | None = Field(default=None, max_length=64)
    last_backtest_at: datetime | None = _optional_ts()
    last_backtest_summary: dict[str, Any] | None = _json()
    publish_requested_by: str | None = Field(default=None, max_length=100)  # second-lead gate
    publish_requested_hash: str | None = Field(default=None, max_length=64)
    published_version: int | None = None


class PolicyBacktest(SQLModel, table=True):
    """A backtest that ran on exactly ``content_hash``: the publishing gate looks for one."""

    __tablename__ = "policy_backtests"
    id: int | None = Field(default=None, primary_key=True)
    content_hash: str = Field(max_length=64, index=True)
    label: str = Field(max_length=40)  # d3, v2 or a file name
    days: int
    cases: int
    ran_by: str = Field(max_length=100)
    ran_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )
    summary: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class ShadowDecision(SQLModel, table=True):
    """What the shadow draft would have decided for a new case; it has no effect."""

    __tablename__ = "shadow_decisions"
    case_id: str = Field(primary_key=True, max_length=40)
    draft_id: int = Field(index=True)
    content_hash: str = Field(max_length=64)
    live_outcome: str = Field(max_length=20)
    live_rule: str = Field(max_length=100)
    outcome: str = Field(max_length=20)
    rule: str = Field(max_length=100)
    agree: bool
    amount: int = Field(sa_column=Column(BigInteger, nullable=False))
    currency: str = Field(max_length=3)
    created_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )


class ReviewSample(SQLModel, table=True):
    """An automatic refund picked for a person to confirm afterwards; the answer names the rule."""

    __tablename__ = "review_samples"
    case_id: str = Field(primary_key=True, max_length=40)
    policy_version: int | None = None
    rule: str = Field(max_length=100)
    amount: int = Field(sa_column=Column(BigInteger, nullable=False))
    currency: str = Field(max_length=3)
    sampled_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )
    answer: str | None = Field(default=None, max_length=20)  # right | wrong
    answered_by: str | None = Field(default=None, max_length=100)
    answered_at: datetime | None = _optional_ts()


# ---------------------------------------------------------------- customer channels


class CustomerMessage(SQLModel, table=True):
    """What we told the customer (out) or they wrote back (in); one outcome, one row."""

    __tablename__ = "customer_messages"
    id: int | None = Field(default=None, primary_key=True)
    case_id: str = Field(foreign_key="cases.id", max_length=40, index=True)
    direction: str = Field(max_length=3)  # out | in
    kind: str = Field(max_length=30)  # refunded | partially_refunded | denied | in_review | reply
    case_status: str | None = Field(default=None, max_length=20)
    case_revision: int | None = None
    body: str = Field(sa_column=Column(Text, nullable=False))  # out: as told; in: encrypted
    expected_by: datetime | None = _optional_ts()
    channel: str | None = Field(default=None, max_length=20)  # email | webhook | zendesk | ...
    # queued | sent | recorded | received | withdrawn (erased before it was delivered)
    status: str = Field(default="queued", max_length=20)
    external_ref: str | None = Field(default=None, max_length=300)  # Message-ID, delivery id
    created_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )
    sent_at: datetime | None = _optional_ts()


class RateLimit(SQLModel, table=True):
    """Attempts per key (a keyed hash of an email or an IP) per fixed window."""

    __tablename__ = "rate_limits"
    key: str = Field(primary_key=True, max_length=100)
    window: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    count: int = 0


# ---------------------------------------------------------------- operations


class CustomerKey(SQLModel, table=True):
    """One customer's data key, wrapped by the deployment secret; erasing the customer
    destroys it, and every field encrypted under it is unreadable from then on."""

    __tablename__ = "customer_keys"
    email_hash: str = Field(primary_key=True, max_length=64)
    generation: int = 1  # a customer who returns after an erasure gets a new key
    key_enc: str | None = Field(default=None, sa_column=Column(Text))  # None once erased
    created_at: datetime = Field(
        default_factory=clock.now, sa_column=Column(UTCDateTime(), nullable=False)
    )
    erased_at: datetime | None = _optional_ts()


class ReplicaHeartbeat(SQLModel, table=True):
    """Each replica's last sweep, for `refund-desk status` (readiness reads its own memory)."""

    __tablename__ = "replica_heartbeats"
    replica: str = Field(primary_key=True, max_length=80)
    started_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    swept_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    sweep_seconds: float = 30.0
    last_error: str | None = Field(default=None, sa_column=Column(Text))
