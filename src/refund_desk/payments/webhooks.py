"""Processor webhooks (Stripe, PayPal): verify, remember the event id, queue the work, answer 200.

The signature is checked before anything else (Stripe's HMAC here; PayPal's by PayPal's own
verification call); an event id seen before changes nothing. The
event body is only a hint of *what* changed: the job re-fetches the refund from the processor and
applies its current state, so late or out-of-order events never move a refund backwards, and
a Stripe outage delays the work (the job retries) instead of losing it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from refund_desk import money
from refund_desk.cases.executor import settle
from refund_desk.cases.notify import notify
from refund_desk.cases.ports import ProcessorError
from refund_desk.jobs.queue import ClaimedJob, RetryLater, backoff, enqueue
from refund_desk.payments.stripe_api import WebhookRejected, verify_event
from refund_desk.payments.stripe_currency import from_stripe
from refund_desk.storage.audit import SYSTEM
from refund_desk.storage.models import Case, ProcessorEvent

if TYPE_CHECKING:
    from refund_desk.cases.desk import Desk
    from refund_desk.payments.paypal_api import PayPalProcessor

log = logging.getLogger(__name__)

EVENT_JOB = "processor.event"


@dataclass(frozen=True)
class Receipt:
    event_id: str
    type: str
    duplicate: bool = False
    handled: bool = False
    job_id: int | None = None


def receive(desk: Desk, payload: bytes, signature: str | None, secret: str | list[str]) -> Receipt:
    """Accept one delivery; raises `WebhookRejected` (nothing written) if it is not Stripe's.
    Several secrets: the current one and, during a rotation, the previous one."""
    event = _verified(payload, signature, [secret] if isinstance(secret, str) else secret)
    return _accept(desk, "stripe", event["id"], str(event.get("type") or ""), _hint(event))


def receive_paypal(
    desk: Desk, paypal: PayPalProcessor, payload: bytes, headers: Mapping[str, str]
) -> Receipt:
    """Accept one PayPal notification once PayPal's own verification says it sent it; raises
    `WebhookRejected` (nothing written) otherwise, and `ProcessorError` when PayPal cannot be
    asked (the route answers 503: PayPal delivers again)."""
    try:
        event = json.loads(payload)
    except ValueError:
        raise WebhookRejected("invalid_payload", "The body is not JSON.") from None
    if not isinstance(event, dict) or not isinstance(event.get("id"), str):
        raise WebhookRejected("invalid_payload", "The body is not a PayPal event.")
    if not paypal.verify_webhook(headers, event):
        raise WebhookRejected(
            "invalid_signature", "PayPal did not verify this notification's signature."
        )
    resource = event.get("resource")
    resource = resource if isinstance(resource, dict) else {}
    hint = {k: resource.get(k) for k in ("id", "status") if isinstance(resource.get(k), str)}
    return _accept(desk, "paypal", event["id"], str(event.get("event_type") or ""), hint)


def _accept(desk: Desk, processor: str, event_id: str, kind: str, hint: dict[str, Any]) -> Receipt:
    """Remember the event (a second delivery changes nothing) and queue its handler's job."""
    handled = kind in HANDLERS
    try:
        with desk.db.write() as session:
            if session.get(ProcessorEvent, event_id) is not None:
                return Receipt(event_id, kind, duplicate=True, handled=handled)
            session.add(
                ProcessorEvent(
                    id=event_id,
                    processor=processor,
                    type=kind[:80],
                    object_id=hint.get("id"),
                    received_at=desk.now(),
                )
            )
            session.flush()
            if not handled:
                log.info("%s event %s (%s) acknowledged; nothing to do", processor, event_id, kind)
                return Receipt(event_id, kind)
            job = enqueue(
                session,
                kind=EVENT_JOB,
                payload={"event_id": event_id, "type": kind, "object": hint},
                dedupe_key=f"{processor}-event:{event_id}",
            )
    except IntegrityError:  # the same event delivered twice at once: the other one won
        return Receipt(event_id, kind, duplicate=True, handled=handled)
    return Receipt(event_id, kind, handled=True, job_id=job.id)


def handle(desk: Desk, job: ClaimedJob) -> None:
    """The `processor.event` job: run the table's handler for the event type."""
    handler = HANDLERS.get(job.payload.get("type", ""))
    if handler is None:
        return
    try:
        handler(desk, job.payload.get("object") or {})
    except ProcessorError as exc:
        if exc.transient:
            raise RetryLater(backoff(job.failures + 1), f"{exc.code}: {exc.message}") from None
        log.warning("event %s: %s (%s)", job.payload.get("event_id"), exc.message, exc.code)


# ---------------------------------------------------------------- the table


def _refund_news(desk: Desk, hint: dict[str, Any]) -> None:
    refund = desk.processor.retrieve_refund(hint["id"])  # the truth, not the event body
    if settle(desk, refund) == "not_ours":
        log.info("refund %s was not made by Refund Desk; reconciliation reports it", refund.id)


def _charge_refunded(desk: Desk, hint: dict[str, Any]) -> None:
    for refund in desk.processor.list_refunds(hint.get("payment_intent") or hint["id"]):
        settle(desk, refund)


def _dispute_opened(desk: Desk, hint: dict[str, Any]) -> None:
    """A note on every case for the disputed payment: no money moves because of it."""
    payments = [p for p in (hint.get("payment_intent"), hint.get("charge")) if p]
    if not payments:
        return
    amount, currency = hint.get("amount"), hint.get("currency")
    shown = (
        money.format_money(from_stripe(int(amount), currency), currency)
        if isinstance(amount, int) and isinstance(currency, str)
        else "an unknown amount"
    )
    with desk.db.write() as session:
        cases = session.scalars(select(Case).where(Case.payment_id.in_(payments))).all()  # type: ignore[attr-defined]
        for case in cases:
            payload = {
                "dispute_id": hint.get("id"),
                "reason": hint.get("reason"),
                "amount": shown,
            }
            desk.audit.append(
                session,
                action="processor.dispute_opened",
                actor=SYSTEM,
                case_id=case.id,
                correlation_id=case.correlation_id,
                policy_version=case.policy_version,
                payload=payload,
            )
            notify(
                session,
                event="case.note",
                case_id=case.id,
                text=f"The customer opened a dispute (chargeback) for {shown} on this payment "
                f"({hint.get('reason') or 'no reason given'}).",
                **payload,
            )


HANDLERS: dict[str, Callable[[Desk, dict[str, Any]], None]] = {
    "refund.created": _refund_news,
    "refund.updated": _refund_news,
    "refund.failed": _refund_news,
    "charge.refunded": _charge_refunded,
    "charge.dispute.created": _dispute_opened,
    # PayPal's: the resource is a refund (a reversal is refund-shaped)
    "PAYMENT.CAPTURE.REFUNDED": _refund_news,
    "PAYMENT.CAPTURE.REVERSED": _refund_news,
    "PAYMENT.REFUND.PENDING": _refund_news,
    "PAYMENT.REFUND.COMPLETED": _refund_news,
    "PAYMENT.REFUND.FAILED": _refund_news,
    "PAYMENT.REFUND.CANCELLED": _refund_news,
}


def _verified(payload: bytes, signature: str | None, secrets: list[str]) -> dict[str, Any]:
    first: WebhookRejected | None = None
    for secret in secrets:
        try:
            return verify_event(payload, signature, secret)
        except WebhookRejected as exc:
            first = first or exc
    raise first or WebhookRejected("invalid_signature", "No webhook secret is set.")


def _hint(event: dict[str, Any]) -> dict[str, Any]:
    """The few ids and figures a handler needs; never the customer's data."""
    obj = (event.get("data") or {}).get("object") or {}
    if not isinstance(obj, dict):
        return {}
    keep = ("id", "object", "charge", "payment_intent", "amount", "currency", "reason", "status")
    hint = {k: obj.get(k) for k in keep if obj.get(k) is not None}
    for key in ("charge", "payment_intent"):
        value = hint.get(key)
        if isinstance(value, dict):
            hint[key] = value.get("id")
    return hint
