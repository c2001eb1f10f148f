"""Inbound channels: `POST /webhooks/email`, `/webhooks/shopify`, `/webhooks/zendesk`,
`/webhooks/gorgias`.

Each verifies its sender first (a shared bearer secret for mail, Shopify's HMAC of the body,
Zendesk's HMAC of timestamp + body, the header a Gorgias HTTP integration is configured to
send), refuses and logs anything else, maps the delivery to one `ChannelRequest` and answers
201 for a new case, 200 for a repeat. Replays of a signed delivery are harmless: the same
message, return or ticket always answers with its one case. A channel whose secret is not set
answers 404, as a path the server does not know.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import UploadFile

from refund_desk import clock, crypto
from refund_desk.cases import evidence
from refund_desk.cases.errors import CaseError, InvalidRequest
from refund_desk.cases.ports import REASONS
from refund_desk.customers import intake as channels
from refund_desk.customers import mail
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import Case
from refund_desk.web.admission import admitted
from refund_desk.web.errors import error_response, no_such_route

log = logging.getLogger(__name__)
router = APIRouter(prefix="/webhooks")
MAX_BODY = 40 * 1024 * 1024
REFUND_TAGS = frozenset({"refund", "refunds", "refund_request", "refund-request"})
SHOPIFY_TOPICS = frozenset({"returns/request"})
SHOPIFY_REASONS = {
    "defective": "defective",
    "wrong_item": "wrong_item",
    "unwanted": "changed_mind",
    "size_too_small": "changed_mind",
    "size_too_large": "changed_mind",
    "style": "changed_mind",
    "color": "changed_mind",
    "not_as_described": "other",
}


def _refuse(platform: str, code: str, message: str, status: int) -> JSONResponse:
    log.warning("refused a %s delivery: %s", platform, code)  # no payload, no addresses
    return error_response(code, message, status)


def _bearer_ok(request: Request, secrets: list[str]) -> bool:
    """The bearer secret matches the current one or, during a rotation, the previous one."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    matches = [crypto.same(value.strip(), secret) for secret in secrets]  # no early exit
    return scheme.lower() == "bearer" and any(matches)


def _signed(given: str, expected: list[str]) -> bool:
    return bool(given) and any([crypto.same(given.strip(), e) for e in expected])


def _answer(runtime: Runtime, submitted: Any, extra: dict[str, Any] | None = None) -> JSONResponse:
    with runtime.db.read() as session:
        case = session.get(Case, submitted.case_id)
        status = case.status if case else None
    body = {
        "case": submitted.case_id,
        "status": status,
        "duplicate": not submitted.created,
        **(extra or {}),
    }
    return JSONResponse(body, status_code=201 if submitted.created else 200)


def _receive(runtime: Runtime, req: channels.ChannelRequest) -> Any:
    submitted = channels.receive(
        runtime.desk,
        req,
        store=evidence.EvidenceStore(runtime.settings.evidence_path()),
        base_url=runtime.settings.public_url,
    )
    runtime.desk.start(submitted.job_id)
    return submitted


async def _run(request: Request, runtime: Runtime, fn: Any, *args: Any) -> JSONResponse:
    try:
        return await admitted(request, fn, runtime, *args)
    except CaseError as exc:
        return error_response(exc.code, exc.message, exc.status, exc.fields)


# ---------------------------------------------------------------- email


@router.post("/email")
async def email_webhook(request: Request) -> JSONResponse:
    runtime: Runtime = request.app.state.runtime
    if runtime.settings.email_secret is None:
        raise no_such_route()  # REFUND_DESK_EMAIL_SECRET
    if not _bearer_ok(request, runtime.settings.webhook_secrets("email_secret")):
        return _refuse("email", "unauthorized", "Send `Authorization: Bearer <secret>`.", 401)
    if int(request.headers.get("content-length") or 0) > MAX_BODY:
        return _refuse("email", "too_large", "The message is too large.", 413)
    raw = await _raw_message(request)
    try:
        message = mail.parse(raw)
    except mail.NotAnEmail as exc:
        return _refuse("email", "invalid_email", f"Not a usable RFC 822 message: {exc}.", 422)
    return await _run(request, runtime, _email, message, raw)


async def _raw_message(request: Request) -> bytes:
    """The raw MIME message: the body itself, or a form's `email`/`message`/file field."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        return await request.body()
    form = await request.form(max_files=5, max_fields=50, max_part_size=MAX_BODY)
    for name in ("email", "message", "raw", "mime"):
        value = form.get(name)
        if isinstance(value, str) and value:
            return value.encode()
        if isinstance(value, UploadFile):
            return await value.read()
    files = [v for _, v in form.multi_items() if isinstance(v, UploadFile)]
    return await files[0].read() if files else b""


def _email(runtime: Runtime, message: mail.InboundMail, raw: bytes) -> JSONResponse:
    uploads, skipped = [], 0
    for number, (filename, data) in enumerate(message.attachments, start=1):
        try:
            uploads.append(
                evidence.check_upload(data, name=f"attachment {number}", filename=filename)
            )
        except InvalidRequest:
            skipped += 1  # signatures, calendar files: not evidence, not an error
    uploads = uploads[: evidence.MAX_FILES]
    counts = {"attachments": len(uploads), "skipped_attachments": skipped}
    thread = message.thread_case()
    if thread and channels.record_reply(
        runtime.desk,
        thread,
        sender=message.sender,
        text=message.current,  # our own words, quoted under it, need not come back
        message_id=message.message_id,
        uploads=uploads,
        store=evidence.EvidenceStore(runtime.settings.evidence_path()),
        base_url=runtime.settings.public_url,
    ):
        return JSONResponse({"case": thread, "threaded": True, **counts}, status_code=200)
    payment = message.payment_reference()
    if payment is None:
        raise InvalidRequest(
            "payment_reference_missing",
            "No payment or order reference was found in the subject or the text.",
            {"payment": "write the reference from the receipt, e.g. 'Order: py_1a2b3c'"},
        )
    key = message.message_id or hashlib.sha256(raw).hexdigest()
    req = channels.ChannelRequest(
        source="email",
        email=message.sender,
        payment=payment,
        actor=Actor("customer", "email"),
        dedupe="email:" + hashlib.sha256(key.encode()).hexdigest()[:48],
        amount=message.amount(),
        message="\n\n".join(p for p in (message.subject, message.text) if p)[:10_000] or None,
        name=message.name,
        verify=True,
        uploads=uploads,
        links=evidence.links_in(message.current),
        reply={
            "message_id": message.message_id,
            "subject": message.subject,
            "references": message.references[-5:],
        },
    )
    return _answer(runtime, _receive(runtime, req), counts)


# ---------------------------------------------------------------- storefront and helpdesks


@router.post("/shopify")
async def shopify_webhook(request: Request) -> JSONResponse:
    runtime: Runtime = request.app.state.runtime
    if runtime.settings.shopify_secret is None:
        raise no_such_route()  # SHOPIFY_WEBHOOK_SECRET
    body = await request.body()
    given = request.headers.get("x-shopify-hmac-sha256", "")
    expected = [
        base64.b64encode(crypto.mac(key.encode(), body)).decode()
        for key in runtime.settings.webhook_secrets("shopify_secret")
    ]
    if not _signed(given, expected):
        return _refuse("shopify", "bad_signature", "The Shopify signature does not match.", 401)
    topic = request.headers.get("x-shopify-topic", "")
    if topic not in SHOPIFY_TOPICS:
        return _refuse("shopify", "unsupported_topic", f"Topic {topic!r} is not handled.", 422)
    payload = _json(body)
    if payload is None:
        return _refuse("shopify", "invalid_json", "The body is not a JSON object.", 400)
    shop = request.headers.get("x-shopify-shop-domain", "shop")[:100]
    return await _run(request, runtime, _shopify, payload, shop)


def _shopify(runtime: Runtime, payload: dict[str, Any], shop: str) -> JSONResponse:
    order = payload.get("order") if isinstance(payload.get("order"), dict) else {}
    assert isinstance(order, dict)
    customer = order.get("customer") or payload.get("customer") or {}
    lines = [x for x in payload.get("return_line_items") or [] if isinstance(x, dict)]
    notes = "\n".join(str(x["customer_note"]) for x in lines if x.get("customer_note"))
    reason = SHOPIFY_REASONS.get(str((lines[0] if lines else {}).get("return_reason", "")).lower())
    attributes = {
        str(a.get("name")): a.get("value")
        for a in order.get("note_attributes") or []
        if isinstance(a, dict)
    }
    transactions = [t for t in order.get("transactions") or [] if isinstance(t, dict)]
    payment = _first(
        payload.get("payment"),
        attributes.get("payment"),
        *(t.get("payment_id") or t.get("authorization") for t in transactions),
    )
    email = _first(
        payload.get("email"),
        order.get("email"),
        customer.get("email") if isinstance(customer, dict) else None,
    )
    return_id = _first(payload.get("id"), payload.get("admin_graphql_api_id"))
    _require(email=email, payment=payment, id=return_id)
    req = channels.ChannelRequest(
        source="shopify",
        email=str(email),
        payment=str(payment),
        actor=Actor("api", f"shopify:{shop}"),
        dedupe=f"shopify:{shop}:{return_id}"[:200],
        amount=_first(payload.get("amount")),
        message=notes or None,
        reason=reason if reason in REASONS else None,
        external_id=str(return_id)[:200],
        links=evidence.links_in(notes),
        reply={"platform": "shopify", "shop": shop, "return_id": str(return_id)},
    )
    return _answer(runtime, _receive(runtime, req))


ZENDESK_MAX_AGE = timedelta(minutes=5)


def _fresh(stamp: str) -> bool:
    """Zendesk signs an ISO 8601 timestamp with the body: it must be recent."""
    try:
        at = datetime.fromisoformat(stamp.strip().replace("Z", "+00:00"))
    except ValueError:
        return False
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return abs(clock.now() - at) <= ZENDESK_MAX_AGE


@router.post("/zendesk")
async def zendesk_webhook(request: Request) -> JSONResponse:
    runtime: Runtime = request.app.state.runtime
    if runtime.settings.zendesk_secret is None:
        raise no_such_route()  # ZENDESK_WEBHOOK_SECRET
    body = await request.body()
    given = request.headers.get("x-zendesk-webhook-signature", "")
    stamp = request.headers.get("x-zendesk-webhook-signature-timestamp", "")
    expected = [
        base64.b64encode(crypto.mac(key.encode(), stamp.encode() + body)).decode()
        for key in runtime.settings.webhook_secrets("zendesk_secret")
    ]
    if not stamp or not _signed(given, expected):
        return _refuse("zendesk", "bad_signature", "The Zendesk signature does not match.", 401)
    if not _fresh(stamp):  # a signed request recorded once must not be replayable for ever
        return _refuse("zendesk", "stale_signature", "The Zendesk timestamp is too old.", 401)
    payload = _json(body)
    if payload is None:
        return _refuse("zendesk", "invalid_json", "The body is not a JSON object.", 400)
    return await _run(request, runtime, _ticket, "zendesk", payload)


@router.post("/gorgias")
async def gorgias_webhook(request: Request) -> JSONResponse:
    """Gorgias HTTP integrations do not sign bodies; they send the headers configured on them,
    so the integration carries `Authorization: Bearer <GORGIAS_WEBHOOK_SECRET>`."""
    runtime: Runtime = request.app.state.runtime
    if runtime.settings.gorgias_secret is None:
        raise no_such_route()  # GORGIAS_WEBHOOK_SECRET
    if not _bearer_ok(request, runtime.settings.webhook_secrets("gorgias_secret")):
        return _refuse("gorgias", "bad_signature", "The Gorgias secret does not match.", 401)
    payload = _json(await request.body())
    if payload is None:
        return _refuse("gorgias", "invalid_json", "The body is not a JSON object.", 400)
    return await _run(request, runtime, _ticket, "gorgias", payload)


def _ticket(runtime: Runtime, platform: str, payload: dict[str, Any]) -> JSONResponse:
    """A helpdesk ticket tagged for refunds (Zendesk's or Gorgias's shape) becomes a case."""
    ticket = payload.get("ticket") if isinstance(payload.get("ticket"), dict) else payload
    assert isinstance(ticket, dict)
    raw_tags = ticket.get("tags") or []
    if isinstance(raw_tags, str):
        raw_tags = raw_tags.replace(",", " ").split()
    tags = {str(t.get("name") if isinstance(t, dict) else t).lower() for t in raw_tags}
    ticket_id = ticket.get("id")
    if not tags & REFUND_TAGS:
        return JSONResponse({"ignored": True, "reason": "the ticket is not tagged for refunds"})
    person = ticket.get("requester") or ticket.get("customer") or {}
    messages = [m for m in ticket.get("messages") or [] if isinstance(m, dict)]
    text = _first(
        ticket.get("description"),
        ticket.get("latest_comment"),
        *(m.get("body_text") for m in messages),
    )
    subject = str(ticket.get("subject") or "")
    email = _first(
        person.get("email") if isinstance(person, dict) else None, ticket.get("requester_email")
    )
    payment = _first(ticket.get("payment"), mail.find_payment(subject, text))
    _require(email=email, payment=payment, id=ticket_id)
    message = "\n\n".join(p for p in (subject, text) if p)[:10_000] or None
    req = channels.ChannelRequest(
        source=platform,
        email=str(email),
        payment=str(payment),
        actor=Actor("api", platform),
        dedupe=f"{platform}:{ticket_id}"[:200],
        amount=_first(ticket.get("amount")),
        message=message,
        external_id=str(ticket_id)[:200],
        links=evidence.links_in(text),
        reply={"platform": platform, "ticket_id": str(ticket_id)},
    )
    return _answer(runtime, _receive(runtime, req))


# ---------------------------------------------------------------- helpers


def _json(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _first(*values: Any) -> str | None:
    for value in values:
        if value is not None and str(value).strip():
            return str(value).strip()
    return None


def _require(**values: str | None) -> None:
    missing = {k: "missing from the delivery" for k, v in values.items() if not v}
    if missing:
        raise InvalidRequest(
            "incomplete_delivery", "The delivery lacks what a case needs.", missing
        )
