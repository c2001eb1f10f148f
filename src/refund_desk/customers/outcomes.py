"""Telling the customer the outcome, through the channel the request came from.

The message is written, and its delivery queued as a job (`customer.tell`), in the same
transaction as the transition it announces; the job's dedupe key (`tell:<case>:<status>:
<revision>`) makes one outcome one message. Couriers (SMTP, a signed webhook, a helpdesk
comment) are adapters behind the small `Courier` port; they run inside the job, never inside a
transaction. What an operator alone may read (the counterfactual, the park reason) is never
put in a customer message.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import bindparam, insert, select
from sqlmodel import Session, col

from refund_desk import clock, money
from refund_desk.cases.notify import notify
from refund_desk.jobs.queue import ClaimedJob, RetryLater, backoff, queue
from refund_desk.storage.audit import SYSTEM, AuditLog
from refund_desk.storage.db import deployment
from refund_desk.storage.models import Approval, Case, CustomerMessage

if TYPE_CHECKING:
    from refund_desk.cases.desk import Desk

log = logging.getLogger(__name__)

TELL = "customer.tell"
TELL_ON = frozenset({"refunded", "denied", "parked"})
DEFAULT_WAIT = timedelta(days=2)  # promised when a parked case has no SLA deadline
DEFAULT_DENIAL = "We could not approve this refund request."
DEFAULT_REFUNDED = "Your refund of {amount} has been issued."


class DeliveryFailed(Exception):
    """A courier could not deliver; `transient` says whether trying again may help."""

    def __init__(self, message: str, *, transient: bool = True) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class Outbound:
    """Everything a courier needs for one message; built in the job, outside transactions."""

    message_id: int
    case_id: str
    external_id: str | None
    source: str
    kind: str  # refunded | partially_refunded | denied | in_review
    status: str
    text: str
    amount: str
    currency: str
    expected_by: datetime | None
    appeal_url: str | None
    to_email: str | None
    callback_url: str | None
    reply: dict[str, Any] = field(default_factory=dict)  # thread: message id, subject, ticket

    def full_text(self) -> str:
        parts = [self.text]
        if self.appeal_url:
            parts.append(
                "If you think we got this wrong, you can ask for a second look once, here: "
                f"{self.appeal_url}"
            )
        return "\n\n".join(parts)


class Courier(Protocol):
    channel: str

    def send(self, out: Outbound) -> str | None:
        """Deliver, or raise DeliveryFailed; returns a reference (Message-ID, delivery id)."""
        ...


# ---------------------------------------------------------------- in the transition's transaction


def tell(session: Session, case: Case, audit: AuditLog) -> int | None:
    """Write the outcome message and queue its delivery; called by `lifecycle.move`.

    An outcome with nowhere to go (an API request without a callback, where no webhook is
    configured: the integrator reads it from `GET /api/v1/cases/{id}`) is recorded as told
    here, as its job would have recorded it, and no job is queued."""
    if case.status not in TELL_ON:
        return None
    kind, text, expected = compose(session, case)
    now = clock.now()
    nowhere = _nowhere_to_go(session, case, kind)
    message_id: int = (
        session.connection()
        .execute(  # only its id is used
            _ADD_MESSAGE,
            {
                "case_id": case.id,
                "direction": "out",
                "kind": kind,
                "case_status": case.status,
                "case_revision": case.revision,
                "body": text,
                "expected_by": expected,
                # nowhere to go: written as told, one INSERT, not an INSERT and an UPDATE
                "channel": "none" if nowhere else None,
                "status": "recorded" if nowhere else "queued",
                "external_ref": None,
                "created_at": now,
                "sent_at": now if nowhere else None,
            },
        )
        .scalar_one()
    )
    if nowhere:
        _told(session, audit, case, message_id, kind, channel=None, status="recorded")
        log.info("customer told %s (recorded)", kind)
        return None
    return queue(
        session,
        kind=TELL,
        payload={"case_id": case.id, "message_id": message_id},
        dedupe_key=f"tell:{case.id}:{case.status}:{case.revision}",
    )


_MESSAGES = CustomerMessage.__table__  # type: ignore[attr-defined]
_ADD_MESSAGE = insert(_MESSAGES).returning(_MESSAGES.c.id)


def _nowhere_to_go(session: Session, case: Case, kind: str) -> bool:
    """`Delivery.channel_for` would find no channel (a denial's appeal link is made by the
    job, so a denial always goes through it)."""
    return (
        case.source == "api"
        and not case.callback_url
        and kind != "denied"
        and not deployment(session).api_webhook
    )


def _told(
    session: Session,
    audit: AuditLog,
    case: Case,
    message_id: int,
    kind: str,
    *,
    channel: str | None,
    status: str,
    appeal_link: bool = False,
    error: str | None = None,
) -> None:
    """What became of an outcome message, on the record; the case's card is told too."""
    audit.append(
        session,
        action="customer.told" if status != "failed" else "customer.undeliverable",
        actor=SYSTEM,
        case_id=case.id,
        correlation_id=case.correlation_id,
        policy_version=case.policy_version,
        payload={
            "message_id": message_id,
            "kind": kind,
            "channel": channel or "none",
            "delivered": status == "sent",
            "appeal_link": appeal_link,
            **({"error": error[:200]} if error else {}),
        },
    )
    notify(session, event="case.customer_told", case_id=case.id)  # the card says so


def compose(session: Session, case: Case) -> tuple[str, str, datetime | None]:
    """The customer's words for the case's current status: (kind, text, expected answer time)."""
    if case.status == "denied":
        return "denied", (case.customer_message or DEFAULT_DENIAL), None
    if case.status == "parked":
        expected = case.sla_due_at or clock.now() + DEFAULT_WAIT
        text = (
            "Your refund request needs a closer look by our team. We expect to answer by "
            f"{expected:%A %d %B %Y, %H:%M} UTC."
        )
        return "in_review", text, expected
    paid = money.format_money(case.amount, case.currency)
    text = case.customer_message or DEFAULT_REFUNDED.format(amount=paid)
    wanted = case.asked()
    note = _approver_note(session, case)
    kind = "refunded"
    if wanted is not None and case.amount < wanted:
        kind = "partially_refunded"
        text += f" That is part of the {money.format_money(wanted, case.currency)} you asked for."
    if note:
        text += f" A note from our team: {note}"
    return kind, text, None


_LAST_APPROVAL_REASON = (
    select(col(Approval.reason))
    .where(col(Approval.case_id) == bindparam("case_id"), col(Approval.decision) == "approve")
    .order_by(col(Approval.created_at).desc())
    .limit(1)
)


def _approver_note(session: Session, case: Case) -> str | None:
    session.flush()
    reason = session.connection().execute(_LAST_APPROVAL_REASON, {"case_id": case.id}).scalar()
    return reason.strip() if reason and reason.strip() else None


# ---------------------------------------------------------------- the job


@dataclass
class Delivery:
    """The `customer.tell` handler: couriers by channel, and how to make appeal links."""

    desk: Desk
    couriers: dict[str, Courier]
    webhook_url: str | None = None  # the integrator's endpoint for API requests without one
    appeal_link: Any = None  # Callable[[Case], str | None]

    def run(self, job: ClaimedJob) -> None:
        desk = self.desk
        with desk.db.read() as session:
            message = session.get(CustomerMessage, job.payload["message_id"])
            case = session.get(Case, job.payload["case_id"])
            if message is None or case is None or message.status != "queued":
                return  # delivered already (a late retry): exactly once per outcome
            out = self._outbound(message, case)
        channel = self.channel_for(out)
        courier = self.couriers.get(channel) if channel else None
        reference: str | None = None
        if courier is not None:
            try:
                reference = courier.send(out)
            except DeliveryFailed as exc:
                if not exc.transient:
                    log.error("customer message %s undeliverable: %s", out.message_id, exc)
                    self._finish(out, channel, "failed", None, str(exc), job)
                    return
                raise RetryLater(backoff(job.failures + 1, base=5.0), str(exc)) from None
        self._finish(
            out,
            channel if courier else None,
            "sent" if courier else "recorded",
            reference,
            None,
            job,
        )
        log.info(
            "customer told %s (%s)", message.kind, f"sent by {channel}" if courier else "recorded"
        )

    def channel_for(self, out: Outbound) -> str | None:
        """Back where the request came from: the integrator, the helpdesk ticket, or email."""
        if out.callback_url or (out.source == "api" and self.webhook_url):
            return "webhook"
        ticket = out.reply.get("ticket_id")
        if out.source in ("zendesk", "gorgias") and ticket and out.source in self.couriers:
            return out.source
        if out.source == "api":
            return None  # the integrator reads it from GET /api/v1/cases/{id}
        return "email" if out.to_email else None

    def _outbound(self, message: CustomerMessage, case: Case) -> Outbound:
        vault = self.desk.vault
        reply: dict[str, Any] = json.loads(vault.decrypt(case.reply_enc) or "{}")
        callback = case.callback_url or (self.webhook_url if case.source == "api" else None)
        appeal = self.appeal_link(case) if self.appeal_link and message.kind == "denied" else None
        assert message.id is not None
        return Outbound(
            message_id=message.id,
            case_id=case.id,
            external_id=case.external_id,
            source=case.source,
            kind=message.kind,
            status=message.case_status or case.status,
            text=message.body,
            amount=str(money.to_major(case.amount, case.currency)),
            currency=case.currency,
            expected_by=message.expected_by,
            appeal_url=appeal,
            to_email=vault.decrypt(case.email_enc) or None,
            callback_url=callback,
            reply=reply,
        )

    def _finish(
        self,
        out: Outbound,
        channel: str | None,
        status: str,
        ref: str | None,
        error: str | None,
        job: ClaimedJob,
    ) -> None:
        """Record what became of the message; the job ends in the same commit."""
        desk = self.desk
        with desk.db.write() as session:
            message = session.get(CustomerMessage, out.message_id)
            case = session.get(Case, out.case_id)
            if message is None or case is None or message.status != "queued":
                return
            desk.jobs.finish_in(session, job)
            message.status, message.channel = status, channel or "none"
            message.external_ref, message.sent_at = ref, desk.now()
            if out.appeal_url:
                message.body = out.full_text()
            session.add(message)
            _told(
                session,
                desk.audit,
                case,
                out.message_id,
                out.kind,
                channel=channel,
                status=status,
                appeal_link=bool(out.appeal_url),
                error=error,
            )
