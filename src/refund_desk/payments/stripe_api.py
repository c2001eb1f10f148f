"""Stripe behind the processor port: the only module that imports `stripe`.

One `StripeClient` instance with the API version pinned and `max_network_retries=0`: the SDK's
own retries would resend a refund behind our execution record's back, and against a processor
that ignores idempotency keys that refunds twice. SDK errors become our `ProcessorError` family
on the spot, amounts become ISO 4217 minor units (`stripe_currency`), and refunds are found by
listing them for the payment and filtering on our metadata (Stripe's search does not cover
refunds).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, NoReturn, TypeVar

import stripe

from refund_desk.cases.ports import (
    PaymentFacts,
    PaymentNotFound,
    ProcessorError,
    ProcessorRefund,
    ProcessorTimeout,
    ProcessorUnavailable,
    RefundDeclined,
    RefundNotFound,
)
from refund_desk.payments.stripe_currency import from_stripe, to_stripe

API_VERSION = "2026-10-28.endive"  # pinned: a Stripe-side upgrade never changes our shapes
WEBHOOK_TOLERANCE_SECONDS = 300
PAGE = 100
T = TypeVar("T")


class WebhookRejected(Exception):
    """A webhook that is not provably from Stripe: nothing may change because of it."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def verify_event(
    payload: bytes,
    signature: str | None,
    secret: str,
    *,
    tolerance: int = WEBHOOK_TOLERANCE_SECONDS,
) -> dict[str, Any]:
    """Check the `Stripe-Signature` header (HMAC and age) and return the event as plain data."""
    if not signature:
        raise WebhookRejected("missing_signature", "The Stripe-Signature header is missing.")
    try:
        stripe.WebhookSignature.verify_header(payload.decode("utf-8"), signature, secret, tolerance)
    except stripe.SignatureVerificationError as exc:
        raise WebhookRejected(
            "invalid_signature", f"The signature does not verify: {exc}"
        ) from None
    except UnicodeDecodeError:
        raise WebhookRejected("invalid_payload", "The body is not UTF-8.") from None
    try:
        event = json.loads(payload)
    except ValueError:
        raise WebhookRejected("invalid_payload", "The body is not JSON.") from None
    if not isinstance(event, dict) or not isinstance(event.get("id"), str):
        raise WebhookRejected("invalid_payload", "The body is not a Stripe event.")
    return event


class StripeProcessor:
    name = "stripe"
    lists_every_refund = True

    def __init__(self, client: stripe.StripeClient, *, timeout_seconds: float = 15.0) -> None:
        self.client = client
        self.timeout_seconds = timeout_seconds

    @classmethod
    def connect(
        cls, api_key: str, *, api_base: str | None = None, timeout_seconds: float = 15.0
    ) -> StripeProcessor:
        client = stripe.StripeClient(
            api_key,
            stripe_version=API_VERSION,
            base_addresses={"api": api_base.rstrip("/")} if api_base else None,
            max_network_retries=0,
            http_client=stripe.RequestsClient(timeout=(min(5.0, timeout_seconds), timeout_seconds)),
        )
        return cls(client, timeout_seconds=timeout_seconds)

    @staticmethod
    def owns(reference: str) -> bool:
        return reference.startswith(("pi_", "ch_", "re_", "pyr_"))

    # ------------------------------------------------------------ the processor protocol

    def payment(self, payment_id: str) -> PaymentFacts:
        """Facts from a PaymentIntent (`pi_…`) or a Charge (`ch_…`)."""
        if payment_id.startswith("pi_"):
            paid = _sdk(
                lambda: _as_dict(
                    self.client.v1.payment_intents.retrieve(
                        payment_id, {"expand": ["customer", "latest_charge"]}
                    )
                ),
                payment_id=payment_id,
            )
            charge = paid.get("latest_charge")
            if isinstance(charge, str):
                charge_id = charge
                charge = _sdk(lambda: _as_dict(self.client.v1.charges.retrieve(charge_id)))
        elif payment_id.startswith("ch_"):
            paid = charge = _sdk(
                lambda: _as_dict(
                    self.client.v1.charges.retrieve(payment_id, {"expand": ["customer"]})
                ),
                payment_id=payment_id,
            )
        else:
            raise PaymentNotFound(
                "payment_not_found", f"{payment_id} is not a Stripe payment id (pi_… or ch_…)."
            )
        currency = paid["currency"]
        billing = (charge or {}).get("billing_details") or {}
        customer = paid.get("customer")
        customer = customer if isinstance(customer, dict) else {}
        return PaymentFacts(
            id=payment_id,
            amount=from_stripe(_captured(charge), currency),
            currency=currency.lower(),
            customer_email=customer.get("email")
            or billing.get("email")
            or (charge or {}).get("receipt_email"),
            customer_name=customer.get("name") or billing.get("name"),
            created_at=_time(paid["created"]),
            refunds=tuple(self.list_refunds(payment_id)),
            chargebacks_365d=1 if (charge or {}).get("disputed") else 0,
            processor=self.name,
        )

    def list_refunds(self, payment_id: str) -> list[ProcessorRefund]:
        params: Any = {_payment_key(payment_id): payment_id, "limit": PAGE}
        return _sdk(
            lambda: [_refund(r) for r in self.client.v1.refunds.list(params).auto_paging_iter()],
            payment_id=payment_id,
        )

    def create_refund(
        self,
        *,
        payment_id: str,
        amount: int,
        currency: str,
        idempotency_key: str,
        metadata: dict[str, str],
    ) -> ProcessorRefund:
        stripe_amount = to_stripe(amount, currency)  # refuse before anything is sent
        params: Any = {
            _payment_key(payment_id): payment_id,
            "amount": stripe_amount,
            "metadata": dict(metadata),
        }
        return _sdk(
            lambda: _refund(
                self.client.v1.refunds.create(params, {"idempotency_key": idempotency_key})
            ),
            payment_id=payment_id,
        )

    def refusal(self, amount: int, currency: str, payment_id: str = "") -> str | None:
        try:
            to_stripe(amount, currency)
        except RefundDeclined as exc:
            return exc.message
        return None

    def check(self) -> str:
        _sdk(lambda: self.client.v1.refunds.list({"limit": 1}))
        return "Stripe answers and accepts STRIPE_API_KEY."

    def retrieve_refund(self, refund_id: str) -> ProcessorRefund:
        return _sdk(
            lambda: _refund(self.client.v1.refunds.retrieve(refund_id)), refund_id=refund_id
        )

    def list_refunds_since(
        self, since: datetime, until: datetime | None = None, payments: Iterable[str] = ()
    ) -> list[ProcessorRefund]:
        """Stripe lists refunds newest first: page until we pass `since`.

        Paging instead of a `created` filter works the same on Stripe and on emulators that
        do not implement the filter.
        """

        def collect() -> list[ProcessorRefund]:
            found: list[ProcessorRefund] = []
            for raw in self.client.v1.refunds.list({"limit": PAGE}).auto_paging_iter():
                refund = _refund(raw)
                created = refund.created_at or since
                if created < since:
                    break
                if until is None or created < until:
                    found.append(refund)
            return found

        return _sdk(collect)


# ---------------------------------------------------------------- shapes


def _as_dict(obj: Any) -> dict[str, Any]:
    return obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)


def _refund(raw: Any) -> ProcessorRefund:
    data = _as_dict(raw)
    charge = data.get("charge")
    charge_id = charge.get("id") if isinstance(charge, dict) else charge
    intent = data.get("payment_intent")
    intent_id = intent.get("id") if isinstance(intent, dict) else intent
    return ProcessorRefund(
        id=data["id"],
        payment_id=intent_id or charge_id or "",
        amount=from_stripe(int(data["amount"]), data["currency"]),
        currency=data["currency"].lower(),
        status=data.get("status") or "pending",
        metadata={str(k): str(v) for k, v in (data.get("metadata") or {}).items()},
        created_at=_time(data["created"]) if data.get("created") else None,
    )


def _captured(charge: dict[str, Any] | None) -> int:
    """What can be refunded from: `amount_captured`, or `amount` where that is absent."""
    if not charge or charge.get("status") == "failed":
        return 0
    if charge.get("amount_captured") is not None:
        return int(charge["amount_captured"])
    return int(charge["amount"]) if charge.get("captured", True) else 0


def _time(epoch: int) -> datetime:
    return datetime.fromtimestamp(int(epoch), UTC)


# ---------------------------------------------------------------- errors


def _sdk(
    call: Callable[[], T], *, payment_id: str | None = None, refund_id: str | None = None
) -> T:
    """Run one SDK call; its errors become ours on the spot."""
    try:
        return call()
    except stripe.StripeError as exc:
        _raise_ours(exc, payment_id=payment_id, refund_id=refund_id)


def _payment_key(payment_id: str) -> str:
    return "payment_intent" if payment_id.startswith("pi_") else "charge"


def _raise_ours(
    exc: stripe.StripeError, *, payment_id: str | None, refund_id: str | None
) -> NoReturn:
    status, code = exc.http_status, (exc.code or "")
    message = exc.user_message or str(exc) or type(exc).__name__
    if isinstance(exc, stripe.APIConnectionError):
        # A refused connection and a read timeout look alike here: the outcome is unknown.
        raise ProcessorTimeout("processor_timeout", f"Stripe did not answer: {message}") from None
    if isinstance(exc, stripe.RateLimitError):
        raise ProcessorUnavailable("processor_rate_limited", "Stripe is rate limiting.") from None
    if isinstance(exc, stripe.AuthenticationError | stripe.PermissionError):
        raise ProcessorUnavailable(
            "processor_auth_failed", f"Stripe refused our API key: {message}"
        ) from None
    if status == 409:
        raise ProcessorUnavailable(
            "idempotency_key_in_use", "Stripe is still processing a request with this key."
        ) from None
    if isinstance(exc, stripe.IdempotencyError):
        raise ProcessorError(
            "idempotency_conflict", f"Stripe saw this key with other parameters: {message}"
        ) from None
    if status == 404 or code == "resource_missing":
        if refund_id:
            raise RefundNotFound("refund_not_found", f"Stripe has no refund {refund_id}.") from None
        raise PaymentNotFound(
            "payment_not_found", f"Stripe has no payment {payment_id or ''}.".replace(" .", ".")
        ) from None
    if isinstance(exc, stripe.CardError | stripe.InvalidRequestError):
        raise RefundDeclined(code or "refund_declined", f"Stripe declined: {message}") from None
    if (status is not None and status >= 500) or isinstance(exc, stripe.APIError):
        raise ProcessorTimeout(
            "processor_error", f"Stripe failed ({status}); the outcome is unknown: {message}"
        ) from None
    raise ProcessorUnavailable("processor_error", f"Stripe error: {message}") from None
