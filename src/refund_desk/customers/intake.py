"""Requests from where customers ask (web form, email, storefront, helpdesk) become cases.

Every channel ends in `intake.submit`: one case type, one capture transaction. A channel adds
three things: checking the customer against the system of record first (where the customer
speaks for themselves), evidence and the way back to the customer (written in the capture's
transaction), and repeat-safety: each channel has an internal intake key row, so a repeated
delivery (same e-mail Message-ID, same ticket, same form token) answers with the same case.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from refund_desk import clock
from refund_desk.cases import evidence
from refund_desk.cases.errors import Conflict, InvalidRequest, NotMatched
from refund_desk.cases.facts import customer_verified
from refund_desk.cases.intake import (
    Submitted,
    fetch_payment,
    parse_request,
    submit,
)
from refund_desk.cases.notify import notify
from refund_desk.cases.rows import load_for_update
from refund_desk.customers import unclaimed
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import ApiKey, Case, CustomerMessage, IntakeKey

if TYPE_CHECKING:
    from collections.abc import Callable

    from refund_desk.cases.desk import Desk


@dataclass
class ChannelRequest:
    source: str  # web_form | email | shopify | zendesk | gorgias
    email: str
    payment: str
    actor: Actor
    dedupe: str  # unique per delivery within the channel: a repeat answers with the same case
    amount: str | None = None
    message: str | None = None
    reason: str | None = None
    external_id: str | None = None
    name: str | None = None
    verify: bool = False  # refuse unless the email matches the payment's customer
    uploads: list[evidence.Upload] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    reply: dict[str, Any] = field(default_factory=dict)  # how to answer: thread, ticket
    # In the capture's transaction, before this request's evidence is attached (an appeal).
    prepare: Callable[[Session, Case], None] | None = None


def channel_key(desk: Desk, source: str) -> int:
    """The internal intake key of a channel: revoked and unhashable, so it never authenticates."""
    marker = f"channel:{source}"
    with desk.db.read() as session:
        row = session.scalars(select(ApiKey).where(col(ApiKey.key_hash) == marker)).first()
    if row is not None and row.id is not None:
        return row.id
    try:
        with desk.db.write() as session:
            row = ApiKey(name=marker, prefix="channel", key_hash=marker, revoked_at=clock.now())
            session.add(row)
            session.flush()
            assert row.id is not None
            return row.id
    except IntegrityError:  # another request created it first
        return channel_key(desk, source)


def receive(
    desk: Desk, req: ChannelRequest, *, store: evidence.EvidenceStore, base_url: str
) -> Submitted:
    """Check, then capture. Raises InvalidRequest (nothing written) on bad input."""
    key = channel_key(desk, req.source)
    replay = _replayed(desk, key, req.dedupe)
    if replay is not None:
        return replay
    try:
        payment = fetch_payment(desk, req.payment)
    except InvalidRequest:
        if req.verify:
            raise NotMatched() from None
        raise
    if req.verify and not customer_verified(req.email, payment):
        raise NotMatched()
    body: dict[str, Any] = {
        "payment": req.payment,
        "email": req.email,
        "currency": payment.currency.upper(),
        "amount": req.amount,
        "message": req.message,
        "source": req.source,
        "external_id": req.external_id,
        "reason": req.reason,
        "name": req.name,
    }
    request = parse_request({k: v for k, v in body.items() if v is not None})
    # After the checks; a refusal after the write lets the files go (`unclaimed`).
    files = evidence.store_files(desk, store, desk.vault.email_hash(req.email), req.uploads)

    def prepare(session: Session, case: Case) -> None:
        if req.reply:
            customer = desk.vault.for_customer(session, case.email_hash)
            case.reply_enc = customer.encrypt(json.dumps(req.reply))
        if req.prepare is not None:  # first: an appeal's carried evidence, then this request's
            req.prepare(session, case)
        evidence.attach(
            desk,
            session,
            case,
            files=files,
            links=req.links,
            source=req.source,
            actor=req.actor,
            base_url=base_url,
        )

    with unclaimed.claiming(desk, files) as claim:
        try:
            submitted = submit(
                desk,
                request,
                actor=req.actor,
                api_key_id=key,
                idempotency_key=req.dedupe,
                prepare=prepare,
            )
        except Conflict:  # the same delivery again with other content: still the same case
            replay = _replayed(desk, key, req.dedupe)
            if replay is None:
                raise
            submitted = replay
        claim.kept = submitted.created  # an earlier delivery's case does not hold these files
    return submitted


def _replayed(desk: Desk, key: int, dedupe: str) -> Submitted | None:
    with desk.db.read() as session:
        row = session.get(IntakeKey, (key, dedupe))
        return Submitted(row.case_id, created=False) if row is not None else None


def record_reply(
    desk: Desk,
    case_id: str,
    *,
    sender: str,
    text: str,
    message_id: str | None,
    uploads: list[evidence.Upload],
    store: evidence.EvidenceStore,
    base_url: str,
) -> bool:
    """A reply to our outcome email goes onto its case, if it comes from that customer.

    False means "not a reply we can place" (unknown case, another sender): the caller then
    treats the message as a new request. A retried delivery is recorded once.
    """
    with desk.db.read() as session:
        case = session.get(Case, case_id)
        if case is None or case.email_hash != desk.vault.email_hash(sender):
            return False
    files = evidence.store_files(desk, store, desk.vault.email_hash(sender), uploads)
    with unclaimed.claiming(desk, files) as claim:
        # a repeated delivery: its files are on the case already, or go
        claim.kept = _place_reply(desk, case_id, text, message_id, files, base_url)
    return True


def _place_reply(
    desk: Desk,
    case_id: str,
    text: str,
    message_id: str | None,
    files: evidence.Stored,
    base_url: str,
) -> bool:
    """The reply and its evidence on the case; False if this delivery was recorded before."""
    ref = (message_id or "")[:300] or None
    actor = Actor("customer", "email")
    with desk.db.write() as session:
        case = load_for_update(session, case_id)
        seen = (
            ref is not None
            and session.scalars(
                select(CustomerMessage).where(
                    col(CustomerMessage.case_id) == case_id,
                    col(CustomerMessage.direction) == "in",
                    col(CustomerMessage.external_ref) == ref,
                )
            ).first()
        )
        if seen:
            return False
        row = CustomerMessage(
            case_id=case_id,
            direction="in",
            kind="reply",
            channel="email",
            body=desk.vault.for_customer(session, case.email_hash).encrypt(text) or "",
            status="received",
            external_ref=ref,
            created_at=desk.now(),
        )
        session.add(row)
        session.flush()
        evidence.attach(
            desk,
            session,
            case,
            files=files,
            links=evidence.links_in(text),
            source="email",
            actor=actor,
            base_url=base_url,
        )
        desk.audit.append(
            session,
            action="customer.replied",
            actor=actor,
            case_id=case.id,
            correlation_id=case.correlation_id,
            policy_version=case.policy_version,
            payload={"message_id": row.id, "attachments": len(files.uploads)},
        )
        notify(
            session,
            event="case.note",
            case_id=case.id,
            text=f"The customer replied by email ({len(files.uploads)} attachment(s)).",
        )
    return True
