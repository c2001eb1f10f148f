"""Capture: a validated request becomes a case in one transaction, or nothing is written.
The payment's row is locked meanwhile, so concurrent requests for one payment line up: the
first opens a case, the rest see it and are held as possible duplicates."""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, EmailStr, Field, ValidationError, field_validator
from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from refund_desk import logs, money
from refund_desk.advisor import reply
from refund_desk.cases import facts as case_facts
from refund_desk.cases.errors import Conflict, InvalidRequest, Unavailable
from refund_desk.cases.lifecycle import Status, record_possible_duplicate
from refund_desk.cases.ports import PaymentFacts, PaymentNotFound, ProcessorError, Provenance
from refund_desk.governance.versions import ACTIVE_VERSION, active_version
from refund_desk.jobs.queue import queue
from refund_desk.storage.audit import Actor, canonical
from refund_desk.storage.db import InsertIfNew, lock_payment
from refund_desk.storage.models import Case, Execution, IntakeKey, Payment, row_defaults

if TYPE_CHECKING:
    from refund_desk.cases.desk import Desk

log = logging.getLogger(__name__)

ADVANCE = "advance"  # job kind: advise, decide and route a new case

# `agent`: proposed by an assistant over MCP (`mcp_server.py`); the policy may treat it apart.
SOURCES = ("api", "web_form", "shopify", "zendesk", "gorgias", "slack", "email", "agent")
# What the system writes for itself, never a client: `slack` marks a case a person filed with
# `/refund` (its job writes it, with the person as requester), and `slack-job-<job id>` is
# that job's external id. The API refuses both (`refuse_internal`).
INTERNAL_SOURCES = frozenset({"slack"})
SLACK_JOB = "slack-job-"


class RefundRequest(BaseModel):
    """The intake body of DESIGN.md's external contract."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    payment: str = Field(min_length=3, max_length=100, pattern=r"^[A-Za-z0-9_\-]+$")
    email: EmailStr
    currency: str = Field(min_length=3, max_length=3)
    amount: str | None = Field(default=None, max_length=32)
    message: str | None = Field(default=None, max_length=10_000)
    source: Literal[
        "api", "web_form", "shopify", "zendesk", "gorgias", "slack", "email", "agent"
    ] = "api"
    external_id: str | None = Field(default=None, max_length=200)
    callback_url: str | None = Field(default=None, max_length=2000, pattern=r"^https?://")
    reason: str | None = Field(default=None, max_length=30)
    name: str | None = Field(default=None, max_length=200)
    # Where the payment's id alone does not say (its shape names the processor otherwise).
    processor: Literal["sandbox", "stripe", "paypal"] | None = None

    @field_validator("currency")
    @classmethod
    def _known_currency(cls, value: str) -> str:
        try:
            money.exponent(value)
        except money.UnknownCurrency:
            raise ValueError(_not_a_currency(value)) from None
        return value.upper()

    @field_validator("reason")
    @classmethod
    def _known_reason(cls, value: str | None) -> str | None:
        from refund_desk.cases.ports import REASONS

        if value is not None and value not in REASONS:
            raise ValueError(f"{quoted(value)} is not a reason; one of {', '.join(REASONS)}.")
        return value

    def amount_minor(self) -> int | None:
        if self.amount is None:
            return None
        problem = amount_problem(self.amount, self.currency)
        if problem is None and not self.amount.strip():
            problem = "empty; leave it out to refund what is left, or type one, such as 12.50."
        if problem is not None:
            raise InvalidRequest("invalid_amount", "The amount is not valid.", {"amount": problem})
        return money.to_minor(self.amount, self.currency)

    def fingerprint(self) -> str:
        # a body without `processor` hashes as it did before the field existed
        body = self.model_dump(mode="json", exclude={"processor"} if not self.processor else None)
        return hashlib.sha256(canonical(body).encode()).hexdigest()


def parse_request(data: object) -> RefundRequest:
    """Validate an intake body; every problem is reported by field, nothing is written."""
    if not isinstance(data, dict):
        raise InvalidRequest("invalid_body", "The body must be a JSON object.")
    try:
        request = RefundRequest.model_validate(data)
    except ValidationError as exc:
        raise invalid(exc.errors()) from None
    request.amount_minor()  # surface amount errors at validation time
    return request


def invalid(errors: Sequence[Any], *, within: int = 0) -> InvalidRequest:
    """Pydantic's errors as our 422, by field (`within`: leading parts of each error's place
    to leave out of the field's name, as FastAPI's `body` or `header`)."""
    fields: dict[str, str] = {}
    for error in errors:
        place = tuple(error["loc"])[within:]
        if error["type"] == "json_invalid":
            return InvalidRequest("invalid_json", "The body is not valid JSON.")
        if not place and error["type"] in ("missing", "model_attributes_type", "dict_type"):
            return InvalidRequest("invalid_body", "The body must be a JSON object.")
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field"
        elif place and place[0] in RefundRequest.model_fields:  # an intake body's field
            message = in_words(error, str(place[0])).removeprefix("Value error, ")
        fields.setdefault(".".join(str(p) for p in place) or "body", message)
    return InvalidRequest("invalid_request", "The request has invalid fields.", fields)


# ---------------------------------------------------------------- words for what was typed
# A request's problems said as the person who typed it reads them: what they typed, quoted,
# what is wrong with it, and an example of what would do (never a validator's own words).

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_CURRENCY_IN = re.compile(r"[$€£¥]|\b[A-Za-z]{3}\b")


def quoted(value: object) -> str:
    """What a person typed, in quotes, cut to a length a sentence can carry."""
    shown = str(value).strip()
    return f"“{shown if len(shown) <= 20 else shown[:19] + '…'}”"


def amount_problem(typed: str, currency: str | None = None) -> str | None:
    """What is wrong with an amount as typed, quoting it; None when it reads as an amount (of
    ``currency`` when it is known: then its decimals and its size are checked too)."""
    text = typed.strip()
    said = quoted(text)
    if not text:
        return None
    if text.startswith("-"):
        return f"{said} is below zero; type the amount to give back, such as 12.50."
    if _with_currency(text):
        return f"{said} has a currency in it; type the number alone, such as 12.50."
    if any(c.isalpha() for c in text):
        return f"letters are not an amount ({said}); type digits, such as 12.50."
    if "," in text:
        return f"{said} has a comma; type a point before the decimals, such as 12.50."
    if not _NUMBER.fullmatch(text):
        return f"{said} is not an amount; type digits with one point, such as 12.50."
    if Decimal(text) == 0:
        return f"{said} refunds nothing; type more than zero, such as 12.50."
    return _beyond_currency(text, currency)


def _with_currency(text: str) -> bool:
    """A number written with a currency sign or code: "$12", "12.50 USD", "eur 7"."""
    found = _CURRENCY_IN.findall(text)
    known = all(c in "$€£¥" or c.upper() in money.CURRENCIES for c in found)
    return bool(found) and known and bool(_NUMBER.fullmatch(_CURRENCY_IN.sub("", text).strip()))


def _beyond_currency(text: str, currency: str | None) -> str | None:
    """An amount with more decimals than its currency has, or more than money here holds."""
    try:
        exp = money.exponent(currency or "")
    except money.UnknownCurrency:
        return None  # said of the currency's own field
    said, code, scaled = quoted(text), str(currency).upper(), Decimal(text).scaleb(exp)
    if scaled != scaled.to_integral_value() and exp == 0:
        return f"{said} has decimals, and {code} has none; type a whole number, such as 1250."
    if scaled != scaled.to_integral_value():
        example = "12." + "5".ljust(exp, "0")
        return f"{said} has more decimals than {code} has ({exp}); type, for example, {example}."
    if scaled >= money.MAX_MINOR:
        most = money.format_money(money.MAX_MINOR - 1, code)
        return f"{said} is more than any refund can be (at most {most})."
    return None


def _not_a_currency(value: object) -> str:
    return f"{quoted(value)} is not a currency; type its three-letter code, such as USD."


_MISSING = {
    "payment": "The payment id is missing: it is on the receipt, such as py_1a2b3c.",
    "email": "The customer's email is missing.",
    "currency": "The currency is missing: type its three-letter code, such as USD.",
}


def in_words(error: Mapping[str, Any], field: str) -> str:
    """One of pydantic's errors on a field of an intake body, in words that quote what was
    typed."""
    kind, typed, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    if kind == "missing":
        return _MISSING.get(field, "This is missing.")
    if field == "payment":
        return (
            f"{quoted(typed)} is not a payment id; an id is 3 to 100 letters, digits, _ or -, "
            "such as py_1a2b3c."
        )
    if field == "email":
        return f"{quoted(typed)} is not an email address; one reads like name@example.com."
    if field == "currency" and kind.startswith("string_too"):
        return _not_a_currency(typed)
    if kind == "string_too_long" and field == "amount":
        return f"{quoted(typed)} is longer than any amount ({ctx['max_length']} characters)."
    if field == "callback_url" and kind == "string_pattern_mismatch":
        return f"{quoted(typed)} is not a web address; one starts with https://."
    if kind == "string_too_long":
        return f"This is too long: {ctx['max_length']:,} characters at most."
    if kind == "literal_error":
        return f"{quoted(typed)} is not one of {ctx['expected']}."
    return str(error["msg"])


def refuse_internal(request: RefundRequest) -> None:
    """An outside request (the API) may not claim what only the system's own paths write:
    an internal `source`, or an `external_id` of a form an internal job uses. 422, by field."""
    fields: dict[str, str] = {}
    if request.source in INTERNAL_SOURCES:
        allowed = ", ".join(s for s in SOURCES if s not in INTERNAL_SOURCES)
        fields["source"] = f"{request.source!r} is the system's own; one of {allowed}"
    if (request.external_id or "").lower().startswith(SLACK_JOB):
        fields["external_id"] = f"ids of the form {SLACK_JOB}… are the system's own"
    if fields:
        raise InvalidRequest("invalid_request", "The request has invalid fields.", fields)


@dataclass(frozen=True)
class Submitted:
    case_id: str
    created: bool
    job_id: int | None = None
    # A case this call created: its row as the capture inserted it (the answer needs no read).
    row: Mapping[str, Any] | None = None
    processor: str | None = None  # the payment's, for that answer


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(10)}"


def submit(
    desk: Desk,
    request: RefundRequest,
    *,
    actor: Actor,
    api_key_id: int | None = None,
    idempotency_key: str | None = None,
    requested_by: str | None = None,
    prepare: Callable[[Session, Case], None] | None = None,
) -> Submitted:
    """Capture a request as a case; `requested_by` is the person who filed it, if one did.
    `prepare` runs in the capture's transaction once the case exists (evidence, the channel to
    answer on, an appeal's link), so the case and its channel details commit together."""
    fingerprint = request.fingerprint()
    if idempotency_key and api_key_id is not None:
        with desk.db.read() as session:
            replay = _replay(session, api_key_id, idempotency_key, fingerprint)
        if replay:
            return replay

    named = request.processor
    if named and named not in desk.processor.name.split(","):
        raise InvalidRequest(
            "processor_not_configured",
            "This desk does not refund through that processor.",
            {"processor": f"this desk refunds through {desk.processor.name}"},
        )
    payment = fetch_payment(desk, request.payment)
    if named and (payment.processor or desk.processor.name) != named:
        raise InvalidRequest(
            "processor_mismatch",
            "The payment is not at the processor the request names.",
            {"payment": f"{request.payment} is a {payment.processor} payment, not {named}"},
        )
    if payment.currency.upper() != request.currency:
        raise InvalidRequest(
            "currency_mismatch",
            "The currency does not match the payment.",
            {"currency": f"the payment is in {payment.currency.upper()}"},
        )
    amount = request.amount_minor()
    refused = (
        desk.processor.refusal(amount, request.currency, payment.id) if amount is not None else None
    )
    if refused:
        raise InvalidRequest(
            "amount_not_accepted", "The processor cannot refund this amount.", {"amount": refused}
        )
    for attempt in range(3):
        try:
            return _capture(
                desk,
                request,
                payment,
                actor,
                api_key_id,
                idempotency_key,
                fingerprint,
                requested_by,
                prepare,
            )
        except IntegrityError:
            # A concurrent request won a unique key (payment row or Idempotency-Key); look again.
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def fetch_payment(desk: Desk, payment_id: str) -> PaymentFacts:
    try:
        return desk.processor.payment(payment_id)
    except PaymentNotFound:
        raise InvalidRequest(
            "payment_not_found",
            "No such payment at the processor.",
            {"payment": f"the processor has no payment {quoted(payment_id)}"},
        ) from None
    except ProcessorError as exc:
        raise Unavailable(
            exc.code, f"The payment processor is not reachable: {exc.message}"
        ) from None


def _replay(session: Session, api_key_id: int, key: str, fingerprint: str) -> Submitted | None:
    row = session.get(IntakeKey, (api_key_id, key))
    if row is None:
        return None
    if row.body_hash != fingerprint:
        raise Conflict(
            "idempotency_key_reused",
            "This Idempotency-Key was already used with a different request body.",
        )
    return Submitted(row.case_id, created=False)


def _capture(
    desk: Desk,
    request: RefundRequest,
    payment: PaymentFacts,
    actor: Actor,
    api_key_id: int | None,
    idempotency_key: str | None,
    fingerprint: str,
    requested_by: str | None,
    prepare: Callable[[Session, Case], None] | None = None,
) -> Submitted:
    now = desk.now()
    email_hash = desk.vault.email_hash(str(request.email))
    case_id, correlation_id = new_id("case"), new_id("req")
    # The case's row, made before the writer is taken; what only the transaction knows is
    # filled in there. It is written as one plain INSERT: no ORM object is built or flushed
    # unless `prepare` asks for one.
    row = _CASE_DEFAULTS | {
        "id": case_id,
        "status": Status.received,
        "source": request.source,
        "external_id": request.external_id,
        "correlation_id": correlation_id,
        "payment_id": payment.id,
        "currency": request.currency,
        "requested_amount": request.amount_minor(),
        "reason": request.reason,
        "reason_source": Provenance.customer_input if request.reason else None,
        "email_hash": email_hash,
        "customer_verified": case_facts.customer_verified(str(request.email), payment),
        "callback_url": request.callback_url,
        "requested_by": requested_by,
        "created_at": now,
        "updated_at": now,
    }
    with desk.db.write(urgent=True) as session:  # a client waits for the answer
        first_sighting = _upsert_payment(desk, session, payment)
        if idempotency_key and api_key_id is not None:
            replay = _replay(session, api_key_id, idempotency_key, fingerprint)
            if replay:
                return replay
        money_left = case_facts.refundable(session, payment, unseen=first_sighting).left
        amount = request.amount_minor()
        if amount is None:
            if money_left <= 0:
                raise InvalidRequest(
                    "nothing_refundable",
                    "Nothing is left to refund on this payment.",
                    {"amount": "nothing left to refund"},
                )
            amount, amount_source = money_left, Provenance.system_of_record
        else:
            amount_source = Provenance.customer_input
        # A payment seen for the first time has no case and no refund of ours to repeat.
        duplicate_of = (
            None if first_sighting else case_facts.duplicate_of(session, payment.id, amount)
        )
        customer = desk.vault.for_customer(session, email_hash)  # their own data key
        # What the customer wrote now is the message; what it quotes is kept beside it.
        said = reply.read(request.message, sender=str(request.email)) if request.message else None
        row |= {
            "email_enc": customer.encrypt(str(request.email)),
            "name_enc": customer.encrypt(request.name or payment.customer_name),
            "message_enc": customer.encrypt(said.current if said else None),
            "earlier_enc": customer.encrypt(said.earlier or None) if said else None,
            "amount": amount,
            "amount_source": amount_source,
            "possible_duplicate": duplicate_of is not None,
            "duplicate_of": duplicate_of,
        }
        session.flush()
        row["policy_version"] = session.connection().execute(_INSERT_CASE, row).scalar_one()
        if row["policy_version"] is None:
            active_version(session)  # none published, or no control row: that one says so
        desk.audit.append(
            session,
            action="request.received",
            actor=actor,
            case_id=case_id,
            correlation_id=correlation_id,
            policy_version=row["policy_version"],
            payload={
                "source": row["source"],
                "external_id": row["external_id"],
                "payment": row["payment_id"],
                "amount": amount,
                "currency": row["currency"],
                "amount_source": amount_source,
                "customer_verified": row["customer_verified"],
                "has_message": bool(request.message),
            },
        )
        if duplicate_of:
            record_possible_duplicate(
                session,
                desk.audit,
                case_id=case_id,
                correlation_id=correlation_id,
                policy_version=row["policy_version"],
                duplicate_of=duplicate_of,
                actor=actor,
            )
        if prepare is not None:
            # The case as an object, for what the channel adds to it (flushed at the commit).
            case = session.get(Case, case_id)
            assert case is not None, "inserted above, in this transaction"
            prepare(session, case)
        if idempotency_key and api_key_id is not None:
            session.add(
                IntakeKey(
                    api_key_id=api_key_id,
                    key=idempotency_key,
                    body_hash=fingerprint,
                    case_id=case_id,
                    created_at=now,
                )
            )
        # Started by the caller (`Desk.start`). The payment's id lets `advance` ask the
        # processor before it reads the case.
        job_id = queue(
            session,
            kind=ADVANCE,
            payload={
                "case_id": case_id,
                "payment_id": payment.id,
                "correlation_id": correlation_id,
            },
            due_at=desk.now(),
        )
        logs.bind(case_id, correlation_id)  # the rest of this request is about the case
        log.info(
            "case %s received from %s: %s (%s)",
            case_id,
            row["source"],
            money.format_money(amount, row["currency"]),
            "possible duplicate" if duplicate_of else "new",
        )
        return Submitted(
            case_id,
            created=True,
            job_id=job_id,
            row=row,
            processor=payment.processor or desk.processor.name,
        )


# The version is not among them: the INSERT pins it (`_INSERT_CASE`) and the row takes it back.
_CASE_DEFAULTS = {k: v for k, v in row_defaults(Case).items() if k != "policy_version"}
_CASES = Case.__table__  # type: ignore[attr-defined]
# Built once. The case is pinned to the active policy version in its own INSERT, which
# returns it: one statement, not a read of the control row and then the INSERT.
_INSERT_CASE = (
    insert(_CASES)
    .values(policy_version=ACTIVE_VERSION.scalar_subquery())
    .returning(_CASES.c.policy_version)
)


# The capture's statements on the payments table: no `Payment` object is loaded or kept, as
# nothing in the capture reads one; its row is only the lock refunds against the payment take.
_PAYMENTS = Payment.__table__  # type: ignore[attr-defined]
_INSERT_PAYMENT = InsertIfNew(_PAYMENTS, _PAYMENTS.c.id)  # only the id may conflict
_SEEN_AGAIN = (
    update(_PAYMENTS)
    .where(_PAYMENTS.c.id == bindparam("payment_id"))
    .values(amount=bindparam("amount"), refunded=bindparam("refunded"), seen_at=bindparam("now"))
)
_OUR_REFUNDS = select(col(Execution.id)).where(col(Execution.payment_id) == bindparam("payment_id"))


def _upsert_payment(desk: Desk, session: Session, payment: PaymentFacts) -> bool:
    """Record what the processor said about the payment, and lock its row; True if this is
    its first sighting (then no case and no execution of ours can refer to it yet).

    The insert comes first: the row this transaction inserts is its own until it commits; a
    row already there (a concurrent first sighting's, which the insert waits for) is locked
    for update, then brought up to date."""
    now = desk.now()
    inserted = _INSERT_PAYMENT.into(
        session,
        {
            "id": payment.id,
            "processor": payment.processor or desk.processor.name,
            "currency": payment.currency.upper(),
            "amount": payment.amount,
            "refunded": payment.refunded_amount(excluding=frozenset()),
            "email_hash": None,
            "created_at": payment.created_at,
            "seen_at": now,
        },
    )
    if inserted:
        return True
    lock_payment(session, payment.id)
    # our own refunds are counted from our executions, never twice
    ours = frozenset(
        session.connection().execute(_OUR_REFUNDS, {"payment_id": payment.id}).scalars()
    )
    elsewhere = payment.refunded_amount(excluding=ours)
    session.connection().execute(
        _SEEN_AGAIN,
        {"payment_id": payment.id, "amount": payment.amount, "refunded": elsewhere, "now": now},
    )
    return False


def to_major_text(minor: int, currency: str) -> str:
    return str(
        money.to_major(minor, currency).quantize(Decimal(1).scaleb(-money.exponent(currency)))
    )
