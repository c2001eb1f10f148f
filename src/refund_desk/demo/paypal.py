"""PayPal on loopback, answering as PayPal's own descriptions of its REST API say it answers.

The descriptions (`shared/paypal/`: Payments v2, Orders v2, Webhooks v1) give the paths, the
shapes, the statuses and the error bodies; where they are silent (the token call, 429, what a
repeated `PayPal-Request-Id` answers) this follows PayPal's public documentation:

- `POST /v1/oauth2/token` (client credentials) issues Bearer tokens that every other call needs;
- a capture is refunded in its currency's decimals (none for HUF, JPY and TWD), never beyond what
  is left of it and never 180 days after it; the refund answers `return=minimal` unless the
  caller prefers `return=representation`, as the `Prefer` header's description says;
- the same `PayPal-Request-Id` answers the refund its first request made, whatever the body
  (in its current state) for 45 days; a request that made no refund leaves its id free;
- refund and capture events are signed (an HMAC under a key only this emulator holds, in the
  headers PayPal sends) and `POST /v1/notifications/verify-webhook-signature` checks them.

Knobs for the hard cases apply to the next refund requests: 429, 5xx or a 422 with a given issue
before anything is looked at (a repeated request id included); answer late or 5xx after a refund
is committed; make it PENDING until `settle_refund` ends it.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from refund_desk import clock as desk_clock

Json = dict[str, Any]
Sink = Callable[[bytes, dict[str, str]], Any]

# PayPal's currencies and their decimals (developer.paypal.com, "Currency codes").
TWO = "AUD BRL CAD CHF CNY CZK DKK EUR GBP HKD ILS MXN MYR NOK NZD PHP PLN SEK SGD THB USD"
CURRENCIES = {code: 2 for code in TWO.split()} | {"HUF": 0, "JPY": 0, "TWD": 0}
SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}
REFUND_DAYS = 180
REQUEST_ID_DAYS = 45  # "The server stores keys for 45 days."
TOKEN_SECONDS = 32400
MAX_REQUESTS = 5000
MONEY_VALUE = re.compile(r"^((-?[0-9]+)|(-?([0-9]+)?[.][0-9]+))$")  # the description's pattern
ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
ACCOUNT = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ"  # account ids: ^[2-9A-HJ-NP-Z]{13}$
MERCHANT = {"email_address": "merchant@example.com", "merchant_id": "7KNGBPH2U58GQ"}
SCOPE = " ".join(
    "https://uri.paypal.com/services/" + scope
    for scope in ("payments/payment/authcapture", "payments/refund", "applications/webhooks")
)

# Error names and messages by status, as the descriptions give them (429: PayPal's rate-limit
# guidelines; the descriptions do not list it).
ERRORS = {
    400: (
        "INVALID_REQUEST",
        "Request is not well-formed, syntactically incorrect, or violates schema.",
    ),
    401: (
        "AUTHENTICATION_FAILURE",
        "Authentication failed due to missing authorization header, or invalid authentication "
        "credentials.",
    ),
    404: ("RESOURCE_NOT_FOUND", "The specified resource does not exist."),
    422: (
        "UNPROCESSABLE_ENTITY",
        "The requested action could not be performed, semantically incorrect, or failed "
        "business validation.",
    ),
    429: ("RATE_LIMIT_REACHED", "Too many requests. Blocked due to rate limiting."),
    500: ("INTERNAL_SERVER_ERROR", "An internal server error occurred."),
    503: ("SERVICE_UNAVAILABLE", "Service Unavailable."),
}
NOT_FOUND = "Specified resource ID does not exist. Please check the resource ID and try again."
# 422 issues the description lists for `captures.refund`, with the description it fixes for
# each (ours where it leaves the text free): the ones this emulator raises and those worth a
# `decline_next`.
ISSUES = {
    "CANNOT_BE_ZERO_OR_NEGATIVE": "Must be greater than zero.",
    "DECIMAL_PRECISION": "The value has more decimal places than the currency supports.",
    "DECIMALS_NOT_SUPPORTED": "Currency does not support decimals.",
    "INVALID_CURRENCY_CODE": "Currency code is invalid or is not currently supported.",
    "CURRENCY_MISMATCH": "The currency of the amount does not match the currency expected.",
    "CAPTURE_FULLY_REFUNDED": "The capture has already been fully refunded",
    "REFUND_CAPTURE_CURRENCY_MISMATCH": "Refund must be in the same currency as the capture",
    "REFUND_NOT_ALLOWED": "Capture cannot be refunded.",
    "REFUND_TIME_LIMIT_EXCEEDED": "You are over the time limit to perform a refund on this capture",
    "REFUND_AMOUNT_EXCEEDED": "The refund amount must be less than or equal to the capture "
    "amount that has not yet been refunded.",
    "REFUND_FAILED_INSUFFICIENT_FUNDS": "Capture could not be refunded due to insufficient "
    "funds. Please check to see if you have sufficient funds in your PayPal account or if the "
    "bank account linked to your PayPal account is verified and has sufficient funds.",
    "MAX_NUMBER_OF_REFUNDS_EXCEEDED": "You have exceeded the maximum number of refund attempts "
    "for this capture.",
    "PENDING_CAPTURE": "Cannot initiate a refund as the capture is pending. Capture is "
    "typically pending when the payer has funded the transaction using e-check/bank funded.",
    "DUPLICATE_INVOICE_ID": "Invoice ID was previously used to refund a capture.",
    "PAYEE_ACCOUNT_RESTRICTED": "Payee account is restricted.",
    "REFUND_NOT_PERMITTED_DUE_TO_CHARGEBACK": "Refunds are not allowed on this capture due to a "
    "chargeback on the card or bank. Please contact the payee to resolve the chargeback.",
    "TRANSACTION_DISPUTED": "Partial refunds cannot be offered at this time because there is an "
    "open case on this transaction. Visit the PayPal Resolution Center to review this case.",
}
SUMMARIES = {
    "PAYMENT.CAPTURE.COMPLETED": "Payment completed for {}",
    "PAYMENT.CAPTURE.REFUNDED": "A {} capture payment was refunded",
    "PAYMENT.CAPTURE.REVERSED": "A {} capture payment was reversed",
    "PAYMENT.REFUND.PENDING": "A {} refund is pending",
    "PAYMENT.REFUND.FAILED": "A {} refund failed",
    "PAYMENT.REFUND.CANCELLED": "A {} refund was cancelled",
}
REFUND_EVENTS = {
    "PENDING": "PAYMENT.REFUND.PENDING",
    "COMPLETED": "PAYMENT.CAPTURE.REFUNDED",
    "FAILED": "PAYMENT.REFUND.FAILED",
    "CANCELLED": "PAYMENT.REFUND.CANCELLED",
}
SETTLES = {"PENDING": {"COMPLETED", "FAILED", "CANCELLED"}, "COMPLETED": {"FAILED"}}
VERIFY_FIELDS = "auth_algo cert_url transmission_id transmission_sig transmission_time webhook_id"


class ApiError(Exception):
    """An answer other than success: its status and PayPal's body for it."""

    def __init__(self, status: int, body: Json) -> None:
        super().__init__(f"{status} {body.get('name') or body.get('error')}: {body}")
        self.status, self.body = status, body


def fail(status: int, *details: Json, name: str = "", message: str = "") -> ApiError:
    default_name, default_message = ERRORS.get(status, ERRORS[500])
    body: Json = {"name": name or default_name, "message": message or default_message}
    if details:
        body["details"] = list(details)
    body["debug_id"] = secrets.token_hex(7)[:13]
    anchor = details[0]["issue"] if details else body["name"]
    body["links"] = [
        {
            "href": f"https://developer.paypal.com/docs/api/payments/v2/#error-{anchor}",
            "rel": "information_link",
            "method": "GET",
        }
    ]
    return ApiError(status, body)


def declined(issue: str, field: str = "", value: str = "") -> ApiError:
    detail: Json = {"field": field, "value": value, "location": "body"} if field else {}
    return fail(422, {**detail, "issue": issue, "description": ISSUES[issue]})


def invalid(issue: str, field: str, description: str) -> ApiError:
    return fail(
        400, {"field": field, "location": "body", "issue": issue, "description": description}
    )


def _id(length: int = 17, alphabet: str = ALNUM) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(length))


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def money(value: Decimal, currency: str) -> dict[str, str]:
    return {"currency_code": currency, "value": f"{value:.{CURRENCIES[currency]}f}"}


def _amount(item: Json) -> Decimal:
    return Decimal(item["amount"]["value"])


def _canonical(event: Json) -> bytes:
    return json.dumps(event, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Paid:
    order_id: str
    capture_id: str


class PayPalEmulator:
    """PayPal's state (orders, captures, refunds, tokens, events) and its answers; thread-safe."""

    def __init__(
        self,
        *,
        client_id: str = "emulator-client",
        client_secret: str = "emulator-secret",
        webhook_id: str = "EMULATORWEBHOOK1",
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.client_id, self.client_secret, self.webhook_id = client_id, client_secret, webhook_id
        self.clock = clock or desk_clock.now
        self.base_url = "http://paypal.invalid"  # the server sets its own address
        self.cert_url = f"/v1/notifications/certs/CERT-360caa42-fca2a594-{secrets.token_hex(4)}"
        self.ignore_request_id = False
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.outbox: list[Json] = []
        self.lock = threading.Lock()
        self._key = secrets.token_bytes(32)  # signs webhooks; never leaves the emulator
        self._orders: dict[str, Json] = {}  # id -> {capture_id, payer, create_time}
        self._captures: dict[str, Json] = {}
        self._refunds: dict[str, Json] = {}
        self._refund_capture: dict[str, str] = {}
        self._tokens: dict[str, datetime] = {}
        self._request_ids: dict[str, tuple[str, datetime]] = {}  # -> refund id, when
        self._faults: dict[str, tuple[int, Any]] = {}

    # ------------------------------------------------------------ what tests and the demo do

    def pay(
        self,
        amount: str,
        currency: str = "USD",
        *,
        email: str = "ada@example.com",
        name: str = "Ada Lovelace",
        created: datetime | None = None,
    ) -> Paid:
        """A completed checkout: an order with one purchase unit and its capture."""
        gross = self._check_amount(amount, currency)
        if gross <= 0:
            raise ValueError(f"a payment of {amount} {currency}")
        when = _stamp(created or self.clock())
        given, _, surname = name.partition(" ")
        fee = (gross * Decimal("0.0349")).quantize(Decimal(1).scaleb(-CURRENCIES[currency]))
        fee += Decimal("0.49") if CURRENCIES[currency] else 49
        with self.lock:
            order_id, capture_id = _id(), _id()
            self._orders[order_id] = {
                "capture_id": capture_id,
                "create_time": when,
                "payer": {
                    "name": {"given_name": given, "surname": surname or given},
                    "email_address": email,
                    "payer_id": _id(13, ACCOUNT),
                },
            }
            self._captures[capture_id] = capture = {
                "id": capture_id,
                "status": "COMPLETED",
                "amount": money(gross, currency),
                "final_capture": True,
                "seller_protection": {
                    "status": "ELIGIBLE",
                    "dispute_categories": ["ITEM_NOT_RECEIVED", "UNAUTHORIZED_TRANSACTION"],
                },
                "seller_receivable_breakdown": {
                    "gross_amount": money(gross, currency),
                    "paypal_fee": money(fee, currency),
                    "net_amount": money(gross - fee, currency),
                },
                "supplementary_data": {"related_ids": {"order_id": order_id}},
                "payee": dict(MERCHANT),
                "create_time": when,
                "update_time": when,
            }
            self._emit("PAYMENT.CAPTURE.COMPLETED", "capture", capture)
        return Paid(order_id, capture_id)

    def refund_directly(self, capture_id: str, amount: str | None = None) -> str:
        """A refund made outside the desk (PayPal's dashboard): its id."""
        with self.lock:
            capture = self._capture(capture_id)
            currency = capture["amount"]["currency_code"]
            wanted = {"amount": {"currency_code": currency, "value": amount}} if amount else {}
            return str(self._create(capture, wanted, "COMPLETED")["id"])

    def reverse(self, capture_id: str) -> str:
        """What is left of the capture goes back to the payer (a chargeback or a bank return):
        a refund-shaped reversal, as PayPal sends it with PAYMENT.CAPTURE.REVERSED."""
        with self.lock:
            capture = self._capture(capture_id)
            left = self._left(capture)
            if left <= 0:
                raise ValueError(f"nothing is left of capture {capture_id} to reverse")
            refund = self._store(capture, left, "COMPLETED", {"note_to_payer": "Payment reversed"})
            self._emit("PAYMENT.CAPTURE.REVERSED", "refund", refund)
            return str(refund["id"])

    def settle_refund(self, refund_id: str, status: str) -> None:
        """A PENDING refund ends COMPLETED, FAILED or CANCELLED later (and a COMPLETED one may
        be FAILED later, as when a bank returns the money); emits the event."""
        with self.lock:
            refund = self._refunds[refund_id]
            if status not in SETTLES.get(refund["status"], ()):
                raise ValueError(f"a {refund['status']} refund cannot become {status}")
            refund["status"] = status
            refund.pop("status_details", None)
            refund["update_time"] = _stamp(self.clock())
            capture = self._captures[self._refund_capture[refund_id]]
            self._sync(capture)
            total = money(self._refunded(capture), capture["amount"]["currency_code"])
            refund["seller_payable_breakdown"]["total_refunded_amount"] = total
            self._emit(REFUND_EVENTS[status], "refund", refund)

    def refunds(self, capture_id: str) -> list[Json]:
        """The capture's refunds (reversals included) as PayPal shows them, oldest first."""
        with self.lock:
            return [self._refund_view(r) for r in self._refunds_of(capture_id)]

    def expire_tokens(self) -> None:
        """Every token issued so far now answers 401."""
        with self.lock:
            self._tokens.clear()

    # ------------------------------------------------------------ faults for the next creates

    def stall_after_refund(self, seconds: float, times: int = 1) -> None:
        self._arm("stall", times, seconds)

    def error_after_refund(self, status: int = 500, times: int = 1) -> None:
        self._arm("error_after", times, status)

    def error_before_refund(self, status: int = 503, times: int = 1) -> None:
        self._arm("error_before", times, status)

    def rate_limit(self, times: int = 1) -> None:
        self._arm("rate_limit", times, 429)

    def decline_next(self, issue: str, times: int = 1) -> None:
        if issue not in ISSUES:
            raise ValueError(f"{issue} is not an issue PayPal lists for refunding a capture")
        self._arm("decline", times, issue)

    def next_refund_pending(self, times: int = 1) -> None:
        self._arm("pending", times, True)

    def _arm(self, kind: str, times: int, value: Any) -> None:
        with self.lock:
            self._faults[kind] = (times, value)

    def _take(self, kind: str) -> Any:
        times, value = self._faults.pop(kind, (0, None))
        if times > 1:
            self._faults[kind] = (times - 1, value)
        return value

    # ------------------------------------------------------------ webhooks

    def deliver(self, sink: Sink) -> list[Any]:
        """Send every pending event, signed as PayPal signs, to the sink (a test client's post)."""
        with self.lock:
            events, self.outbox = self.outbox, []
            signed = [self.signed(self._event_view(e)) for e in events]
        return [sink(body, headers) for body, headers in signed]

    def signed(self, event: Json) -> tuple[bytes, dict[str, str]]:
        """Any event as a notification: its body and PayPal's headers, signed by this emulator."""
        transmission = {
            "PAYPAL-TRANSMISSION-ID": str(uuid.uuid4()),
            "PAYPAL-TRANSMISSION-TIME": _stamp(self.clock()),
            "PAYPAL-CERT-URL": self.base_url + self.cert_url,
            "PAYPAL-AUTH-ALGO": "SHA256withRSA",
        }
        signature = self._signature(*transmission.values(), self.webhook_id, event)
        headers = {**transmission, "PAYPAL-TRANSMISSION-SIG": signature}
        return json.dumps(event).encode(), {**headers, "Content-Type": "application/json"}

    def _signature(self, *fields: Any) -> str:
        *parts, event = fields
        message = "|".join([*map(str, parts), hashlib.sha256(_canonical(event)).hexdigest()])
        # Hex, not base64: the description's pattern for transmission_sig wants a word character
        # first, which a base64 signature lacks one time in 32.
        return hmac.new(self._key, message.encode(), hashlib.sha256).hexdigest()

    def _verify(self, body: Any) -> Json:
        if not isinstance(body, dict):
            body = {}
        missing = [
            f for f in [*VERIFY_FIELDS.split(), "webhook_event"] if body.get(f) in (None, "")
        ]
        if missing or not isinstance(body.get("webhook_event"), dict):
            details = [
                {"field": f, "location": "body", "issue": "MISSING_REQUIRED_PARAMETER",
                 "description": "Required field cannot be blank"}
                for f in missing or ["webhook_event"]
            ]  # fmt: skip
            error = fail(
                400, *details, name="VALIDATION_ERROR", message="Invalid request - see details"
            )
            error.body["information_link"] = (
                "https://developer.paypal.com/docs/api/webhooks/v1/#verify-webhook-signature"
            )
            raise error
        expected = self._signature(
            body["transmission_id"],
            body["transmission_time"],
            body["cert_url"],
            body["auth_algo"],
            body["webhook_id"],
            body["webhook_event"],
        )
        good = body["webhook_id"] == self.webhook_id and hmac.compare_digest(
            expected.encode(), str(body["transmission_sig"]).encode()
        )
        return {"verification_status": "SUCCESS" if good else "FAILURE"}

    def _emit(self, event_type: str, resource_type: str, resource: Json) -> None:
        code, value = resource["amount"]["currency_code"], resource["amount"]["value"]
        shown = " ".join(filter(None, [SYMBOLS.get(code), value, code]))  # "$ 0.99 USD"
        self.outbox.append(
            {
                "id": f"WH-{_id()}-{_id()}",
                "event_version": "1.0",
                "create_time": self.clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
                + "Z",
                "resource_type": resource_type,
                "resource_version": "2.0",
                "event_type": event_type,
                "summary": SUMMARIES[event_type].format(shown),
                "resource": copy.deepcopy(resource),
            }
        )

    def _event_view(self, event: Json) -> Json:
        resource = event["resource"]
        if event["resource_type"] == "capture":
            resource = self._capture_view(resource)
        else:
            resource = self._refund_view(resource)
        href = f"{self.base_url}/v1/notifications/webhooks-events/{event['id']}"
        links = [
            {"href": href, "rel": "self", "method": "GET"},
            {"href": f"{href}/resend", "rel": "resend", "method": "POST"},
        ]
        return {**event, "resource": resource, "links": links}

    # ------------------------------------------------------------ the API

    def handle(
        self, method: str, path: str, headers: dict[str, str], raw: bytes
    ) -> tuple[int, Any]:
        """One request: the status and JSON body to answer (a stall sleeps here, unlocked)."""
        lower = {k.lower(): v for k, v in headers.items()}
        body = _parse(raw, lower.get("content-type", ""))
        with self.lock:
            self.requests.append((method, path, dict(headers), body))
            del self.requests[:-MAX_REQUESTS]
        try:
            if (method, path) == ("POST", "/v1/oauth2/token"):
                return 200, self._token(lower, body)
            with self.lock:
                self._authenticate(lower)
            match method, path.strip("/").split("/"):
                case "GET", ["v2", "payments", "captures", capture_id]:
                    with self.lock:
                        return 200, self._capture_view(self._capture(capture_id))
                case "POST", ["v2", "payments", "captures", capture_id, "refund"]:
                    return self._refund(capture_id, lower, raw)
                case "GET", ["v2", "payments", "refunds", refund_id]:
                    with self.lock:
                        if refund_id not in self._refunds:
                            raise _not_found("refund_id", refund_id)
                        return 200, self._refund_view(self._refunds[refund_id])
                case "GET", ["v2", "checkout", "orders", order_id]:
                    with self.lock:
                        return 200, self._order_view(order_id)
                case "POST", ["v1", "notifications", "verify-webhook-signature"]:
                    return 200, self._verify(body)
            raise _not_found("path", path)
        except ApiError as error:
            return error.status, error.body

    def _token(self, headers: dict[str, str], form: Any) -> Json:
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        try:
            client_id, _, secret = base64.b64decode(credentials).decode().partition(":")
        except ValueError:
            client_id = secret = ""
        if scheme.lower() != "basic" or (client_id, secret) != (self.client_id, self.client_secret):
            raise ApiError(
                401,
                {"error": "invalid_client", "error_description": "Client Authentication failed"},
            )
        grant = form.get("grant_type") if isinstance(form, dict) else None
        if grant != "client_credentials":
            text = "Grant Type is NULL" if grant is None else "unsupported grant_type"
            raise ApiError(400, {"error": "unsupported_grant_type", "error_description": text})
        now = self.clock()
        token = "A21AA" + secrets.token_urlsafe(64)
        with self.lock:
            self._tokens[token] = now + timedelta(seconds=TOKEN_SECONDS)
        return {
            "scope": SCOPE,
            "access_token": token,
            "token_type": "Bearer",
            "app_id": "APP-80W284485P519543T",
            "expires_in": TOKEN_SECONDS,
            "nonce": _stamp(now) + secrets.token_urlsafe(32),
        }

    def _authenticate(self, headers: dict[str, str]) -> None:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        expires = self._tokens.get(token) if scheme.lower() == "bearer" else None
        if expires is None or expires <= self.clock():
            raise fail(401)

    def _refund(self, capture_id: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        prefer = headers.get("prefer", "return=minimal")
        key = None if self.ignore_request_id else headers.get("paypal-request-id")
        with self.lock:
            for kind in ("rate_limit", "error_before", "decline"):
                fault = self._take(kind)
                if fault is not None:
                    raise declined(fault) if kind == "decline" else fail(fault)
            capture = self._capture(capture_id)
            seen = self._request_ids.get(key) if key else None
            if seen and self.clock() - seen[1] <= timedelta(days=REQUEST_ID_DAYS):
                return 201, self._answer(self._refunds[seen[0]], prefer)
            refund = self._create(capture, _refund_request(raw), None)
            if key:
                self._request_ids[key] = (refund["id"], self.clock())
            stall, error = self._take("stall"), self._take("error_after")
            answer = self._answer(refund, prefer)
        if stall:
            time.sleep(stall)
        if error:
            raise fail(error)
        return 201, answer

    def _answer(self, refund: Json, prefer: str) -> Json:
        view = self._refund_view(refund)
        if "return=representation" in prefer:
            return view
        return {"id": view["id"], "status": view["status"], "links": view["links"]}

    # ------------------------------------------------------------ refunds (under the lock)

    def _create(self, capture: Json, wanted: Json, status: str | None) -> Json:
        """Check a refund request against the capture and make it (status None: the API's)."""
        currency = capture["amount"]["currency_code"]
        left = self._left(capture)
        amount = left
        if "amount" in wanted:
            value, code = wanted["amount"]["value"], wanted["amount"]["currency_code"]
            if code not in CURRENCIES:
                raise declined("INVALID_CURRENCY_CODE", "/amount/currency_code", code)
            if code != currency:
                raise declined("REFUND_CAPTURE_CURRENCY_MISMATCH", "/amount/currency_code", code)
            amount = self._check_amount(value, code, api=True)
            if amount <= 0:
                raise declined("CANNOT_BE_ZERO_OR_NEGATIVE", "/amount/value", value)
        created = datetime.fromisoformat(capture["create_time"])
        if self.clock() - created > timedelta(days=REFUND_DAYS):
            raise declined("REFUND_TIME_LIMIT_EXCEEDED")
        if left <= 0:
            raise declined("CAPTURE_FULLY_REFUNDED")
        if amount > left:
            raise declined("REFUND_AMOUNT_EXCEEDED", "/amount/value", wanted["amount"]["value"])
        invoice = wanted.get("invoice_id")
        if invoice and any(r.get("invoice_id") == invoice for r in self._refunds.values()):
            raise declined("DUPLICATE_INVOICE_ID", "/invoice_id", invoice)
        if status is None:
            status = "PENDING" if self._take("pending") else "COMPLETED"
        extra: Json = {
            k: wanted[k] for k in ("custom_id", "invoice_id", "note_to_payer") if k in wanted
        }
        refund = self._store(capture, amount, status, extra)
        self._emit(REFUND_EVENTS[status], "refund", refund)
        return refund

    def _store(self, capture: Json, amount: Decimal, status: str, extra: Json) -> Json:
        currency = capture["amount"]["currency_code"]
        now = _stamp(self.clock())
        refund: Json = {"id": _id(), "status": status}
        if status == "PENDING":
            refund["status_details"] = {"reason": "ECHECK"}
        refund |= {"amount": money(amount, currency), **extra}
        self._refunds[refund["id"]] = refund
        self._refund_capture[refund["id"]] = capture["id"]
        self._sync(capture)
        refund["seller_payable_breakdown"] = {
            "gross_amount": money(amount, currency),
            "paypal_fee": money(Decimal(0), currency),
            "net_amount": money(amount, currency),
            "total_refunded_amount": money(self._refunded(capture), currency),
        }
        refund |= {"payer": dict(MERCHANT), "create_time": now, "update_time": now}
        return refund

    def _check_amount(self, value: str, currency: str, api: bool = False) -> Decimal:
        """The currency's decimals: none for HUF, JPY, TWD (any point is refused), else two."""
        if currency not in CURRENCIES or not MONEY_VALUE.match(value):
            raise ValueError(f"{value!r} {currency!r} is not an amount PayPal takes")
        places = len(value.partition(".")[2])
        if "." in value and CURRENCIES[currency] == 0:
            if api:
                raise declined("DECIMALS_NOT_SUPPORTED", "/amount/value", value)
            raise ValueError(f"{currency} takes no decimals")
        if places > CURRENCIES[currency]:
            if api:
                raise declined("DECIMAL_PRECISION", "/amount/value", value)
            raise ValueError(f"{currency} takes {CURRENCIES[currency]} decimals")
        return Decimal(value)

    def _refunded(self, capture: Json, *statuses: str) -> Decimal:
        """What the capture's refunds in these statuses (COMPLETED by default) add up to."""
        wanted = statuses or ("COMPLETED",)
        return sum(
            (_amount(r) for r in self._refunds_of(capture["id"]) if r["status"] in wanted),
            Decimal(0),
        )

    def _left(self, capture: Json) -> Decimal:
        """What can still be refunded: a PENDING refund holds its amount."""
        return _amount(capture) - self._refunded(capture, "COMPLETED", "PENDING")

    def _sync(self, capture: Json) -> None:
        done = self._refunded(capture)
        status = "PARTIALLY_REFUNDED" if done < _amount(capture) else "REFUNDED"
        status = "COMPLETED" if done <= 0 else status
        if status != capture["status"]:
            capture["status"], capture["update_time"] = status, _stamp(self.clock())

    # ------------------------------------------------------------ views (under the lock)

    def _capture(self, capture_id: str) -> Json:
        if capture_id not in self._captures:
            raise _not_found("capture_id", capture_id)
        return self._captures[capture_id]

    def _link(self, path: str, rel: str, method: str = "GET") -> dict[str, str]:
        return {"href": self.base_url + path, "rel": rel, "method": method}

    def _capture_view(self, capture: Json) -> Json:
        path = f"/v2/payments/captures/{capture['id']}"
        order_id = capture["supplementary_data"]["related_ids"]["order_id"]
        return copy.deepcopy(capture) | {
            "links": [
                self._link(path, "self"),
                self._link(f"{path}/refund", "refund", "POST"),
                self._link(f"/v2/checkout/orders/{order_id}", "up"),
            ]
        }

    def _refund_view(self, refund: Json) -> Json:
        capture_id = self._refund_capture[refund["id"]]
        return copy.deepcopy(refund) | {
            "links": [
                self._link(f"/v2/payments/refunds/{refund['id']}", "self"),
                self._link(f"/v2/payments/captures/{capture_id}", "up"),
            ]
        }

    def _order_view(self, order_id: str) -> Json:
        if order_id not in self._orders:
            raise _not_found("order_id", order_id)
        order = self._orders[order_id]
        capture = self._captures[order["capture_id"]]
        shown = self._capture_view(capture)
        for field in ("supplementary_data", "payee"):  # the Orders description's capture lacks them
            shown.pop(field)
        payer = order["payer"]
        return {
            "id": order_id,
            "intent": "CAPTURE",
            "status": "COMPLETED",
            "payment_source": {
                "paypal": {
                    "email_address": payer["email_address"],
                    "account_id": payer["payer_id"],
                    "account_status": "VERIFIED",
                    "name": payer["name"],
                }
            },
            "payer": copy.deepcopy(payer),
            "purchase_units": [
                {
                    "reference_id": "default",
                    "amount": dict(capture["amount"]),
                    "payee": dict(MERCHANT),
                    "payments": {
                        "captures": [shown],
                        "refunds": [self._refund_view(r) for r in self._refunds_of(capture["id"])],
                    },
                }
            ],
            "create_time": order["create_time"],
            "update_time": capture["update_time"],
            "links": [self._link(f"/v2/checkout/orders/{order_id}", "self")],
        }

    def _refunds_of(self, capture_id: str) -> list[Json]:
        """The capture's refunds as stored, oldest first (views add the links)."""
        return [r for rid, r in self._refunds.items() if self._refund_capture[rid] == capture_id]


def _not_found(field: str, value: str) -> ApiError:
    detail = {"field": field, "value": value, "location": "path"}
    return fail(404, {**detail, "issue": "INVALID_RESOURCE_ID", "description": NOT_FOUND})


def _parse(raw: bytes, content_type: str) -> Any:
    """What the request carried: a form as a dict, JSON as parsed, else its text (or None)."""
    if not raw:
        return None
    text = raw.decode(errors="replace")
    if content_type.startswith("application/x-www-form-urlencoded"):
        return dict(parse_qsl(text))
    try:
        return json.loads(text)
    except ValueError:
        return text


def _refund_request(raw: bytes) -> Json:
    """The body of a refund request, checked against the description's `refund_request`."""
    if not raw.strip():
        return {}  # "For a full refund, include an empty payload"
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise invalid("INVALID_PARAMETER_SYNTAX", "/", "The body is not a JSON object.")
    if "amount" in body:
        amount = body["amount"]
        if not isinstance(amount, dict):
            raise invalid("INVALID_PARAMETER_SYNTAX", "/amount", "Must be an object.")
        for name in ("currency_code", "value"):
            if name not in amount:
                raise invalid("MISSING_REQUIRED_PARAMETER", f"/amount/{name}", "Required.")
        code, value = amount["currency_code"], amount["value"]
        if not isinstance(code, str) or len(code) != 3:
            raise invalid("INVALID_STRING_LENGTH", "/amount/currency_code", "Three letters.")
        if not isinstance(value, str) or len(value) > 32 or not MONEY_VALUE.match(value):
            raise invalid("INVALID_PARAMETER_SYNTAX", "/amount/value", "A number in a string.")
    for name, most in (("custom_id", 127), ("invoice_id", 127), ("note_to_payer", 255)):
        if name in body and not isinstance(body[name], str):
            raise invalid("INVALID_PARAMETER_SYNTAX", f"/{name}", "Must be a string.")
        if name in body and not 1 <= len(body[name]) <= most:
            raise invalid("INVALID_STRING_LENGTH", f"/{name}", f"1 to {most} characters.")
    return body


class PayPalEmulatorServer:
    """The emulator on a loopback port, one daemon thread per request."""

    def __init__(self, emulator: PayPalEmulator | None = None, *, port: int = 0) -> None:
        self.emulator = emulator or PayPalEmulator()
        paypal = self.emulator

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                headers = dict(self.headers.items())
                status, body = paypal.handle(self.command, urlsplit(self.path).path, headers, raw)
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    debug_id = body.get("debug_id") if isinstance(body, dict) else None
                    self.send_header("Paypal-Debug-Id", debug_id or secrets.token_hex(7)[:13])
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test): the refund exists anyway

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.emulator.base_url = self.url
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
