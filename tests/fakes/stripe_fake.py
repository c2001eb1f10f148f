"""A fake Stripe API on loopback that keeps the documented rules localstripe does not.

- idempotency: the same key with the same parameters answers with the first response; the
  same key with other parameters is a 400 `idempotency_error`; a key still in flight is a 409;
- a refund above what is left on the charge fails (`amount_too_large`,
  `charge_already_refunded`); three-decimal amounts must end in 0;
- refund events are signed like Stripe's (`Stripe-Signature: t=…,v1=…`) and delivered to a
  sink the test chooses.

Knobs for the hard cases: stall a response after the refund is committed (a client timeout
with the refund made), answer 500 after committing, make the next refund `pending`, and move a
refund to another status later (as Stripe does when a bank returns the money).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

Sink = Callable[[bytes, dict[str, str]], Any]


def sign(payload: bytes, secret: str, timestamp: int | None = None) -> str:
    t = int(time.time()) if timestamp is None else timestamp
    mac = hmac.new(secret.encode(), f"{t}.".encode() + payload, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def unflatten(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """`metadata[case_id]=x&expand[0]=customer` -> nested dicts and lists, as Stripe reads it."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        parts = key.replace("]", "").split("[")
        node: Any = out
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(node, list):
                if last:
                    node.append(value)
                else:
                    node.append({})
                    node = node[-1]
                continue
            if last:
                node[part] = value
            else:
                nxt = parts[i + 1]
                node = node.setdefault(part, [] if nxt.isdigit() else {})
    return out


class ApiError(Exception):
    def __init__(self, status: int, type_: str, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.body = (
            status,
            {"error": {"type": type_, "message": message, **({"code": code} if code else {})}},
        )


@dataclass
class Knobs:
    stall_refund_seconds: float = 0.0  # commit the refund, then answer this much later
    error_after_refund: int | None = None  # commit the refund, then answer with this status
    next_refund_status: str = "succeeded"
    times: int = 1


@dataclass
class FakeStripe:
    webhook_secret: str = "whsec_" + "f" * 32
    customers: dict[str, dict[str, Any]] = field(default_factory=dict)
    intents: dict[str, dict[str, Any]] = field(default_factory=dict)
    charges: dict[str, dict[str, Any]] = field(default_factory=dict)
    refunds: dict[str, dict[str, Any]] = field(default_factory=dict)
    keys: dict[str, tuple[str, int, dict[str, Any]] | None] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    outbox: list[bytes] = field(default_factory=list)
    knobs: Knobs = field(default_factory=Knobs)
    ignore_keys: bool = False  # as a processor that does not honour idempotency keys
    lock: threading.Lock = field(default_factory=threading.Lock)
    clock: Callable[[], int] = field(default=lambda: int(time.time()))

    # ------------------------------------------------------------ test set-up

    def pay(self, amount: int, currency: str = "usd", email: str = "ada@example.com") -> str:
        with self.lock:
            customer = {"id": _id("cus"), "object": "customer", "email": email, "name": "Ada"}
            self.customers[customer["id"]] = customer
            charge = {
                "id": _id("ch"),
                "object": "charge",
                "amount": amount,
                "amount_captured": amount,
                "captured": True,
                "currency": currency,
                "status": "succeeded",
                "customer": customer["id"],
                "billing_details": {"email": email, "name": "Ada"},
                "disputed": False,
                "created": self.clock(),
            }
            intent = {
                "id": _id("pi"),
                "object": "payment_intent",
                "amount": amount,
                "amount_received": amount,
                "currency": currency,
                "customer": customer["id"],
                "latest_charge": charge["id"],
                "status": "succeeded",
                "created": self.clock(),
            }
            charge["payment_intent"] = intent["id"]
            self.charges[charge["id"]] = charge
            self.intents[intent["id"]] = intent
        return str(intent["id"])

    def set_refund_status(self, refund_id: str, status: str, failure_reason: str = "") -> None:
        """What Stripe does later: a bank returns the money, a pending refund settles."""
        with self.lock:
            refund = self.refunds[refund_id]
            refund["status"] = status
            if failure_reason:
                refund["failure_reason"] = failure_reason
            kind = "refund.failed" if status == "failed" else "refund.updated"
            self._emit(kind, refund)

    def event(self, kind: str, obj: dict[str, Any], event_id: str | None = None) -> bytes:
        return json.dumps(
            {
                "id": event_id or _id("evt"),
                "object": "event",
                "type": kind,
                "created": self.clock(),
                "data": {"object": obj},
            }
        ).encode()

    def signed(self, payload: bytes, timestamp: int | None = None) -> dict[str, str]:
        return {
            "Stripe-Signature": sign(payload, self.webhook_secret, timestamp),
            "Content-Type": "application/json",
        }

    def deliver(self, sink: Sink) -> list[Any]:
        """Send every pending event, signed, to the sink (a test client's post, say)."""
        with self.lock:
            events, self.outbox = self.outbox, []
        return [sink(body, self.signed(body)) for body in events]

    def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        self.outbox.append(self.event(kind, dict(obj)))

    # ------------------------------------------------------------ the API

    def handle(self, method: str, path: str, params: dict[str, Any], key: str | None) -> Any:
        self.requests.append((method, path))
        parts = path.strip("/").split("/")[1:]  # drop "v1"
        if method == "POST" and parts == ["refunds"]:
            return self._idempotent(key, params, lambda: self._create_refund(params))
        if method == "GET" and parts == ["refunds"]:
            return self._list_refunds(params)
        if method == "GET" and len(parts) == 2 and parts[0] == "refunds":
            return self._get(self.refunds, parts[1])
        if method == "GET" and len(parts) == 2 and parts[0] == "payment_intents":
            return self._expand(self._get(self.intents, parts[1]), params)
        if method == "GET" and len(parts) == 2 and parts[0] == "charges":
            return self._expand(self._get(self.charges, parts[1]), params)
        raise ApiError(404, "invalid_request_error", f"Unrecognized request URL ({path}).")

    def _idempotent(self, key: str | None, params: dict[str, Any], run: Callable[[], Any]) -> Any:
        if key is None or self.ignore_keys:
            return run()
        fingerprint = json.dumps(params, sort_keys=True)
        with self.lock:
            if key in self.keys:
                seen = self.keys[key]
                if seen is None:
                    raise ApiError(
                        409,
                        "invalid_request_error",
                        "There is currently another in-progress request using this Idempotent Key.",
                        "idempotency_key_in_use",
                    )
                if seen[0] != fingerprint:
                    raise ApiError(
                        400,
                        "idempotency_error",
                        "Keys for idempotent requests can only be used with the same "
                        "parameters they were first used with.",
                    )
                if seen[1] != 200:
                    raise ApiError(seen[1], **_error_args(seen[2]))
                return seen[2]
            self.keys[key] = None  # in flight
        try:
            result = run()
        except ApiError as exc:
            with self.lock:
                self.keys[key] = (fingerprint, exc.status, exc.body)
            raise
        with self.lock:
            self.keys[key] = (fingerprint, 200, result)
        return result

    def _create_refund(self, params: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if "payment_intent" in params:
                intent = self._get(self.intents, params["payment_intent"])
                charge = self.charges[intent["latest_charge"]]
            else:
                charge = self._get(self.charges, params.get("charge", ""))
            left = charge["amount_captured"] - sum(
                r["amount"]
                for r in self.refunds.values()
                if r["charge"] == charge["id"] and r["status"] not in ("failed", "canceled")
            )
            amount = int(params.get("amount", left))
            if left <= 0:
                raise ApiError(
                    400,
                    "invalid_request_error",
                    f"Charge {charge['id']} has already been refunded.",
                    "charge_already_refunded",
                )
            if amount > left:
                raise ApiError(
                    400,
                    "invalid_request_error",
                    f"Refund amount ({amount}) is greater than unrefunded amount on charge "
                    f"({left})",
                    "amount_too_large",
                )
            if charge["currency"] in ("bhd", "jod", "kwd", "omr", "tnd") and amount % 10:
                raise ApiError(
                    400, "invalid_request_error", "Invalid amount.", "amount_not_compatible"
                )
            refund = {
                "id": _id("re"),
                "object": "refund",
                "amount": amount,
                "currency": charge["currency"],
                "charge": charge["id"],
                "payment_intent": charge.get("payment_intent"),
                "metadata": dict(params.get("metadata") or {}),
                "status": self.knobs.next_refund_status,
                "created": self.clock(),
            }
            self.refunds[refund["id"]] = refund
            self._emit("refund.created", refund)
            if refund["status"] == "succeeded":
                self._emit("charge.refunded", charge)
            stall, error = self.knobs.stall_refund_seconds, self.knobs.error_after_refund
            self.knobs.times -= 1
            if self.knobs.times <= 0:
                self.knobs = Knobs()
        if stall:
            time.sleep(stall)
        if error:
            raise ApiError(error, "api_error", "Something went wrong on Stripe's end.")
        return dict(refund)

    def _list_refunds(self, params: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            items = sorted(self.refunds.values(), key=lambda r: r["created"], reverse=True)
            if "payment_intent" in params:
                items = [r for r in items if r["payment_intent"] == params["payment_intent"]]
            if "charge" in params:
                items = [r for r in items if r["charge"] == params["charge"]]
            start = 0
            if "starting_after" in params:
                ids = [r["id"] for r in items]
                start = ids.index(params["starting_after"]) + 1
            limit = int(params.get("limit", 10))
            page = items[start : start + limit]
            return {
                "object": "list",
                "url": "/v1/refunds",
                "has_more": start + limit < len(items),
                "data": [dict(r) for r in page],
            }

    def _get(self, table: dict[str, dict[str, Any]], object_id: str) -> dict[str, Any]:
        if object_id not in table:
            raise ApiError(
                404,
                "invalid_request_error",
                f"No such object: '{object_id}'",
                "resource_missing",
            )
        return dict(table[object_id])

    def _expand(self, obj: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
        expand = params.get("expand") or []
        for name in expand:
            if name == "customer" and isinstance(obj.get("customer"), str):
                obj["customer"] = dict(self.customers[obj["customer"]])
            if name == "latest_charge" and isinstance(obj.get("latest_charge"), str):
                obj["latest_charge"] = dict(self.charges[obj["latest_charge"]])
        return obj


def _error_args(body: dict[str, Any]) -> dict[str, Any]:
    error = body["error"]
    return {"type_": error["type"], "message": error["message"], "code": error.get("code")}


class FakeStripeServer:
    """The fake on a loopback port, one thread per request (so a 409 can happen)."""

    def __init__(self, fake: FakeStripe | None = None) -> None:
        self.fake = fake or FakeStripe()
        fake_ref = self.fake

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, method: str) -> None:
                url = urlsplit(self.path)
                pairs = parse_qsl(url.query)
                if method == "POST":
                    length = int(self.headers.get("Content-Length") or 0)
                    pairs += parse_qsl(self.rfile.read(length).decode())
                params = unflatten(pairs)
                key = self.headers.get("Idempotency-Key")
                try:
                    status, body = 200, fake_ref.handle(method, url.path, params, key)
                except ApiError as exc:
                    status, body = exc.status, exc.body
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test): the refund exists anyway

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
