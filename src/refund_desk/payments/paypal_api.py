"""PayPal behind the processor port: Payments v2 and Orders v2 over `httpx`.

PayPal's own Python SDK (`paypal-server-sdk`) covers captures, refunds and orders but not
webhook signature verification, and brings its own retry layer and four dependencies; one
`httpx.Client` covers every call we make, with our timeouts and headers, and no retries of its
own (a retried create behind our execution record's back is how a processor that ignores
request ids refunds twice).

- A payment is named by its capture id or its order id; either way the case is about the
  capture, and its customer is the order's payer. Refunds of a capture are listed through its
  order (Payments v2 lists none), which is where the lookup before a create finds ours by
  `custom_id` (our execution id, also sent as `PayPal-Request-Id`).
- Amounts are strings in PayPal's decimals for the currency (`to_paypal`): JPY, HUF and TWD take
  none, whatever ISO 4217 says; an amount PayPal cannot take is refused before anything is sent.
- The access token (client credentials) is kept until a minute before it expires and fetched
  again on a 401; a 401 means PayPal did nothing, so the call is sent once more.
- PayPal's errors become the `ProcessorError` family on the spot: timeouts and 5xx an unknown
  outcome (look up before trying again), 429 and 409 try later, 422 a decline a person reads.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any, NoReturn

import httpx

from refund_desk import money
from refund_desk.cases.ports import (
    AmountRefused,
    PaymentFacts,
    PaymentNotFound,
    ProcessorError,
    ProcessorRefund,
    ProcessorTimeout,
    ProcessorUnavailable,
    RefundDeclined,
    RefundNotFound,
)

# PayPal's ids: upper-case letters and digits (orders, captures, refunds; `related_ids` allows 20).
PAYPAL_ID = re.compile(r"[A-Z0-9]{10,20}")
# The currencies PayPal's REST API processes, and those it counts in whole units.
CURRENCIES = frozenset(("AUD", "BRL", "CAD", "CHF", "CNY", "CZK", "DKK", "EUR", "GBP", "HKD"))
CURRENCIES |= {"HUF", "ILS", "JPY", "MXN", "MYR", "NOK", "NZD", "PHP", "PLN", "SEK", "SGD"}
CURRENCIES |= {"THB", "TWD", "USD"}
WHOLE_UNITS = frozenset({"HUF", "JPY", "TWD"})
STATUSES = {
    "COMPLETED": "succeeded",
    "PENDING": "pending",
    "FAILED": "failed",
    "CANCELLED": "canceled",
}
TOKEN_MARGIN_SECONDS = 60.0

# What a person reads on the card for PayPal's refusals of a refund (its 422 issues).
DECLINES = {
    "REFUND_AMOUNT_EXCEEDED": "PayPal says the refund is more than is left on the payment.",
    "CAPTURE_FULLY_REFUNDED": "PayPal says the payment is already fully refunded.",
    "REFUND_TIME_LIMIT_EXCEEDED": "PayPal no longer allows refunds of this payment "
    "(its refund time limit has passed); refund the customer another way.",
    "REFUND_FAILED_INSUFFICIENT_FUNDS": "PayPal could not refund: the merchant's PayPal balance "
    "and linked bank account do not cover it. Add funds, then approve again.",
    "PAYER_ACCOUNT_LOCKED_OR_CLOSED": "PayPal declined: the customer's PayPal account is locked "
    "or closed and cannot take the refund; refund the customer another way.",
    "PAYEE_ACCOUNT_LOCKED_OR_CLOSED": "PayPal declined: the merchant's PayPal account is locked "
    "or closed.",
    "PAYEE_ACCOUNT_RESTRICTED": "PayPal declined: the merchant's PayPal account is restricted.",
    "TRANSACTION_DISPUTED": "PayPal declined: the payment is under dispute; settle the dispute.",
    "REFUND_NOT_PERMITTED_DUE_TO_CHARGEBACK": "PayPal declined: the customer filed a chargeback.",
    "PENDING_CAPTURE": "PayPal declined: the payment is still pending; approve again once "
    "PayPal completes it.",
    "REFUND_NOT_ALLOWED": "PayPal does not allow a refund of this payment.",
    "PARTIAL_REFUND_NOT_ALLOWED": "PayPal allows only a full refund of this payment.",
    "MAX_NUMBER_OF_REFUNDS_EXCEEDED": "PayPal allows no more refunds of this payment.",
}


def paypal_decimals(currency: str) -> int:
    return 0 if currency.upper() in WHOLE_UNITS else 2


def to_paypal(amount: int, currency: str) -> str:
    """ISO 4217 minor units -> PayPal's decimal string, or `AmountRefused`."""
    code = currency.strip().upper()
    if code not in CURRENCIES:
        raise AmountRefused(f"PayPal does not process payments in {code}.")
    if amount <= 0:
        raise AmountRefused(f"A refund must be more than zero; got {amount} minor units.")
    major = money.to_major(amount, code)
    places = paypal_decimals(code)
    if major != round(major, places):
        raise AmountRefused(
            f"PayPal counts {code} in whole units; {money.format_money(amount, code)} "
            "has a fraction PayPal cannot send."
        )
    return f"{major:.{places}f}"


def from_paypal(value: str, currency: str) -> int:
    """PayPal's decimal string -> ISO 4217 minor units (a fraction below them rounds down)."""
    code = currency.upper()
    return int(Decimal(value).scaleb(money.exponent(code)))


class PayPalProcessor:
    name = "paypal"
    lists_every_refund = False

    def __init__(
        self,
        *,
        client_id: str,
        client_secret: str,
        api_base: str,
        timeout_seconds: float = 15.0,
        webhook_id: str | None = None,
    ) -> None:
        self.client_id, self.client_secret = client_id, client_secret
        self.webhook_id = webhook_id
        self.timeout_seconds = timeout_seconds
        self.http = httpx.Client(
            base_url=api_base.rstrip("/"),
            timeout=httpx.Timeout(timeout_seconds, connect=min(5.0, timeout_seconds)),
        )
        self._token: tuple[str, float] | None = None  # value, monotonic expiry
        self._token_lock = threading.Lock()

    @staticmethod
    def owns(reference: str) -> bool:
        return PAYPAL_ID.fullmatch(reference) is not None

    # ------------------------------------------------------------ the processor protocol

    def payment(self, payment_id: str) -> PaymentFacts:
        """Facts from a capture (the PayPal transaction) or an order with one capture."""
        if not self.owns(payment_id):
            raise PaymentNotFound(
                "payment_not_found", f"{payment_id} is not a PayPal capture or order id."
            )
        try:
            capture = self._get(f"/v2/payments/captures/{payment_id}", payment_id=payment_id)
        except PaymentNotFound:  # an order's id, then
            order = self._get(f"/v2/checkout/orders/{payment_id}", payment_id=payment_id)
            capture = _only_capture(order)
        else:
            order = self._order_of(capture)
        amount = capture["amount"]
        currency = amount["currency_code"]
        # the payer as `payment_source.paypal` names them (`payer` is deprecated, still sent)
        payer = (order.get("payment_source") or {}).get("paypal") or order.get("payer") or {}
        name = payer.get("name") or {}
        full_name = " ".join(p for p in (name.get("given_name"), name.get("surname")) if p)
        return PaymentFacts(
            id=capture["id"],
            amount=0
            if capture.get("status") in ("DECLINED", "FAILED", "PENDING")
            else from_paypal(amount["value"], currency),
            currency=currency.lower(),
            customer_email=payer.get("email_address"),
            customer_name=full_name or None,
            created_at=_time(capture["create_time"]),
            refunds=tuple(_refunds_of(order, capture["id"])),
            chargebacks_365d=_disputed(capture),
            processor=self.name,
        )

    def list_refunds(self, payment_id: str) -> list[ProcessorRefund]:
        capture = self._get(f"/v2/payments/captures/{payment_id}", payment_id=payment_id)
        return _refunds_of(self._order_of(capture), payment_id)

    def create_refund(
        self,
        *,
        payment_id: str,
        amount: int,
        currency: str,
        idempotency_key: str,
        metadata: dict[str, str],
    ) -> ProcessorRefund:
        execution_id = metadata.get("execution_id") or idempotency_key
        body = {
            "amount": {"value": to_paypal(amount, currency), "currency_code": currency.upper()},
            "custom_id": execution_id,
        }
        raw = self._call(
            "POST",
            f"/v2/payments/captures/{payment_id}/refund",
            json=body,
            headers={"PayPal-Request-Id": execution_id, "Prefer": "return=representation"},
            payment_id=payment_id,
        )
        return _refund(raw, payment_id)

    def retrieve_refund(self, refund_id: str) -> ProcessorRefund:
        return _refund(self._get(f"/v2/payments/refunds/{refund_id}", refund_id=refund_id))

    def refusal(self, amount: int, currency: str, payment_id: str = "") -> str | None:
        try:
            to_paypal(amount, currency)
        except RefundDeclined as exc:
            return exc.message
        return None

    def list_refunds_since(
        self, since: datetime, until: datetime | None = None, payments: Iterable[str] = ()
    ) -> list[ProcessorRefund]:
        """PayPal lists no refunds across payments (Payments v2 and Orders v2): the refunds of
        the payments we name, created in the window."""
        found = []
        for payment_id in payments:
            try:
                refunds = self.list_refunds(payment_id)
            except PaymentNotFound:
                continue
            found += [
                r
                for r in refunds
                if r.created_at is None
                or (r.created_at >= since and (until is None or r.created_at < until))
            ]
        return found

    # ------------------------------------------------------------ webhooks and checks

    def verify_webhook(self, headers: Mapping[str, str], event: dict[str, Any]) -> bool:
        """PayPal's own verification of a notification's signature, for our webhook id."""
        wanted = ("auth_algo", "cert_url", "transmission_id", "transmission_sig")
        fields = {name: headers.get(f"paypal-{name.replace('_', '-')}") for name in wanted}
        fields["transmission_time"] = headers.get("paypal-transmission-time")
        if not self.webhook_id or not all(fields.values()):
            return False
        answer = self._call(
            "POST",
            "/v1/notifications/verify-webhook-signature",
            json={**fields, "webhook_id": self.webhook_id, "webhook_event": event},
        )
        return answer.get("verification_status") == "SUCCESS"

    def check(self) -> str:
        """Whether PayPal answers with these credentials: a sentence, or `ProcessorError`."""
        self._access_token(renew=True)
        return f"PayPal answers at {self.http.base_url} and accepts these credentials."

    # ------------------------------------------------------------ HTTP

    def _get(
        self, path: str, *, payment_id: str | None = None, refund_id: str | None = None
    ) -> dict[str, Any]:
        return self._call("GET", path, payment_id=payment_id, refund_id=refund_id)

    def _order_of(self, capture: dict[str, Any]) -> dict[str, Any]:
        related = (capture.get("supplementary_data") or {}).get("related_ids") or {}
        order_id = related.get("order_id")
        if not order_id:
            raise PaymentNotFound(
                "payment_not_supported",
                f"PayPal capture {capture['id']} belongs to no order; Refund Desk finds a "
                "capture's refunds through its order, so it cannot refund this one exactly once.",
            )
        return self._get(f"/v2/checkout/orders/{order_id}", payment_id=capture["id"])

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        payment_id: str | None = None,
        refund_id: str | None = None,
    ) -> dict[str, Any]:
        for attempt in (1, 2):
            token = self._access_token(renew=attempt == 2)
            try:
                response = self.http.request(
                    method,
                    path,
                    json=json,
                    headers={"Authorization": f"Bearer {token}", **(headers or {})},
                )
            except httpx.TransportError as exc:
                raise ProcessorTimeout(
                    "processor_timeout", f"PayPal did not answer: {type(exc).__name__} {exc}"
                ) from None
            if response.status_code == 401 and attempt == 1:
                continue  # the token expired or was revoked: PayPal did nothing
            if response.is_success:
                return _json(response)
            _raise_ours(response, payment_id=payment_id, refund_id=refund_id)
        raise AssertionError("unreachable")

    def _access_token(self, *, renew: bool = False) -> str:
        with self._token_lock:
            if self._token and not renew and time.monotonic() < self._token[1]:
                return self._token[0]
            try:
                response = self.http.post(
                    "/v1/oauth2/token",
                    data={"grant_type": "client_credentials"},
                    auth=(self.client_id, self.client_secret),
                )
            except httpx.TransportError as exc:
                raise ProcessorUnavailable(
                    "processor_unreachable", f"PayPal did not answer: {type(exc).__name__} {exc}"
                ) from None
            if response.status_code in (400, 401):
                raise ProcessorUnavailable(
                    "processor_auth_failed",
                    "PayPal refused PAYPAL_CLIENT_ID and PAYPAL_CLIENT_SECRET "
                    f"({_json(response).get('error_description') or response.status_code}).",
                )
            if not response.is_success:
                _raise_ours(response, payment_id=None, refund_id=None)
            body = _json(response)
            lifetime = float(body.get("expires_in") or 0) - TOKEN_MARGIN_SECONDS
            self._token = (str(body["access_token"]), time.monotonic() + max(lifetime, 0.0))
            return self._token[0]


# ---------------------------------------------------------------- shapes


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _link_id(links: list[dict[str, Any]] | None, rel: str) -> str | None:
    for link in links or ():
        if link.get("rel") == rel and isinstance(link.get("href"), str):
            return str(link["href"]).rstrip("/").rsplit("/", 1)[-1]
    return None


def _refund(raw: dict[str, Any], payment_id: str | None = None) -> ProcessorRefund:
    amount = raw.get("amount") or {}
    currency = str(amount.get("currency_code") or "")
    custom_id = raw.get("custom_id")
    return ProcessorRefund(
        id=raw["id"],
        payment_id=_link_id(raw.get("links"), "up") or payment_id or "",
        amount=from_paypal(amount["value"], currency) if amount else 0,
        currency=currency.lower(),
        status=STATUSES.get(str(raw.get("status")), "pending"),
        metadata={"execution_id": custom_id} if custom_id else {},
        created_at=_time(raw["create_time"]) if raw.get("create_time") else None,
    )


def _purchase_payments(order: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [
        item
        for unit in order.get("purchase_units") or ()
        for item in (unit.get("payments") or {}).get(kind) or ()
    ]


def _refunds_of(order: dict[str, Any], capture_id: str) -> list[ProcessorRefund]:
    """The order's refunds of this capture (a refund's `up` link names its capture)."""
    only_one = len(_purchase_payments(order, "captures")) == 1
    return [
        _refund(raw, capture_id)
        for raw in _purchase_payments(order, "refunds")
        if (_link_id(raw.get("links"), "up") or (capture_id if only_one else None)) == capture_id
    ]


def _disputed(capture: dict[str, Any]) -> int:
    """1 when PayPal holds this capture over a dispute (as Stripe's adapter reads its charge's
    `disputed`); the Disputes API would say more, but the desk does not call it."""
    reason = (capture.get("status_details") or {}).get("reason")
    return 1 if reason in ("BUYER_COMPLAINT", "CHARGEBACK") else 0


def _only_capture(order: dict[str, Any]) -> dict[str, Any]:
    captures = _purchase_payments(order, "captures")
    if len(captures) != 1:
        ids = ", ".join(c["id"] for c in captures) or "none"
        raise PaymentNotFound(
            "payment_ambiguous" if captures else "payment_not_captured",
            f"PayPal order {order.get('id')} has {len(captures)} captures ({ids}); "
            "name the capture to refund.",
        )
    return captures[0]


# ---------------------------------------------------------------- errors


def _raise_ours(
    response: httpx.Response, *, payment_id: str | None, refund_id: str | None
) -> NoReturn:
    status, body = response.status_code, _json(response)
    name = str(body.get("name") or "")
    issues = [str(d.get("issue")) for d in body.get("details") or () if isinstance(d, dict)]
    said = str(body.get("message") or name or status)
    debug = f" (debug_id {body['debug_id']})" if body.get("debug_id") else ""
    if status == 429:
        raise ProcessorUnavailable("processor_rate_limited", "PayPal is rate limiting.")
    if status in (401, 403):
        raise ProcessorUnavailable("processor_auth_failed", f"PayPal refused us: {said}{debug}")
    if status == 409:
        raise ProcessorUnavailable(
            "request_in_progress", f"PayPal is still processing this request: {said}{debug}"
        )
    if status == 404:
        if refund_id:
            raise RefundNotFound("refund_not_found", f"PayPal has no refund {refund_id}.")
        raise PaymentNotFound(
            "payment_not_found", f"PayPal has no payment {payment_id or ''}.".replace(" .", ".")
        )
    if status >= 500:
        raise ProcessorTimeout(
            "processor_error", f"PayPal failed ({status}); the outcome is unknown: {said}{debug}"
        )
    issue = next((i for i in issues if i in DECLINES), issues[0] if issues else name)
    sentence = DECLINES.get(issue) or f"PayPal declined: {said}"
    if status in (400, 422):
        raise RefundDeclined(issue.lower() or "refund_declined", f"{sentence}{debug}")
    raise ProcessorError("processor_error", f"PayPal answered {status}: {said}{debug}")
