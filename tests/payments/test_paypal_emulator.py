"""The PayPal emulator, held to PayPal's own descriptions of its REST API (`shared/paypal/`).

Every exchange in these tests goes through `Checked`, an httpx client that validates each body it
sends against the request schema the description gives for that path and method, and each body it
gets against the response schema for that path, method and status, with no field the schema does
not declare. The conformance test drives every route and every fault and checks that each
(path, method, status) the descriptions list for what the emulator does was answered.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft4Validator
from referencing import Registry
from referencing.jsonschema import DRAFT4

from refund_desk import clock as desk_clock
from refund_desk.demo.paypal import ISSUES, Paid, PayPalEmulator, PayPalEmulatorServer

CAPTURE = "/v2/payments/captures/{capture_id}"
REFUND = "/v2/payments/captures/{capture_id}/refund"
REFUND_GET = "/v2/payments/refunds/{refund_id}"
ORDER = "/v2/checkout/orders/{id}"
VERIFY = "/v1/notifications/verify-webhook-signature"
FILES = {
    "/v2/payments/": "payments_payment_v2.json",
    "/v2/checkout/": "checkout_orders_v2.json",
    "/v1/notifications/": "notifications_webhooks_v1.json",
}
URN = "urn:paypal:"


def paypal_specs() -> Path | None:
    """PayPal's descriptions (`shared/paypal/`), beside the project or in a folder above it."""
    root = Path(__file__).resolve().parents[2]
    return next(
        (p / "shared" / "paypal" for p in root.parents if (p / "shared/paypal").is_dir()), None
    )


class Descriptions:
    """PayPal's three OpenAPI 3.0.3 descriptions as one JSON Schema registry.

    What is adapted from OpenAPI 3.0 to JSON Schema:
    - 3.0's schema object is draft 4/5 JSON Schema, so validation is Draft 4's: `$ref` replaces
      its siblings (3.0 ignores them; draft 2020-12 would apply them) and `exclusiveMinimum` is a
      boolean. Local `$ref`s are made absolute (`urn:paypal:<file>#/...`) so that any subschema
      validates on its own against the registry, and siblings of a `$ref` are dropped.
    - `nullable: true` becomes `"null"` among the types (none of these files uses it yet).
    - `readOnly`, `example`, `deprecated`, `discriminator` are annotations: ignored. PayPal's own
      formats (`ppaas_date_time_v3`, ...) are not checked (no FormatChecker); their patterns are.
    - No schema here forbids extra fields (`additionalProperties` is never false), so a misspelt
      field would pass: `undeclared` walks each body with its schema and names every field that
      no applicable schema declares (free-form objects, `additionalProperties: true`, excepted).
    - A status the operation lists without content (500) is checked against the file's
      `error_500`; 429 appears nowhere (not even in `default`, a oneOf of the other errors'
      names), so it is checked against the webhooks file's generic `error` (name, message,
      debug_id required), which is PayPal's general error shape.
    """

    def __init__(self, folder: Path) -> None:
        self.docs = {
            name: _adapt(json.loads((folder / name).read_text()), URN + name)
            for name in FILES.values()
        }
        self.registry: Registry[Any] = Registry().with_resources(
            (URN + name, DRAFT4.create_resource(doc)) for name, doc in self.docs.items()
        )

    def file(self, template: str) -> str:
        return next(name for prefix, name in FILES.items() if template.startswith(prefix))

    def component(self, name: str, schema: str) -> dict[str, Any]:
        return {"$ref": f"{URN}{name}#/components/schemas/{schema}"}

    def describes(self, template: str, method: str) -> bool:
        paths = self.docs[self.file(template)]["paths"] if template.startswith(tuple(FILES)) else {}
        return method.lower() in paths.get(template, {})

    def operation(self, template: str, method: str) -> dict[str, Any]:
        return dict(self.docs[self.file(template)]["paths"][template][method.lower()])

    def request(self, template: str, method: str) -> dict[str, Any]:
        return dict(
            self.operation(template, method)["requestBody"]["content"]["application/json"]["schema"]
        )

    def response(self, template: str, method: str, status: int) -> dict[str, Any]:
        responses = self.operation(template, method)["responses"]
        name = self.file(template)
        if status == 429:
            return self.component(FILES["/v1/notifications/"], "error")
        answer = responses.get(str(status)) or responses["default"]
        if "$ref" in answer:
            answer = self.follow(answer["$ref"])
        if "content" not in answer:
            return self.component(name, f"error_{status}")
        return dict(answer["content"]["application/json"]["schema"])

    def follow(self, ref: str) -> Any:
        name, _, pointer = ref.removeprefix(URN).partition("#")
        node: Any = self.docs[name]
        for part in pointer.strip("/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def errors(self, schema: dict[str, Any], instance: Any) -> list[str]:
        validator = Draft4Validator(schema, registry=self.registry)
        found = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(instance)]
        return found + [
            f"{at}: not in the description" for at in self.undeclared([schema], instance)
        ]

    def check(self, schema: dict[str, Any], instance: Any, what: str) -> None:
        problems = self.errors(schema, instance)
        assert not problems, f"{what}: {problems[:5]}\n{json.dumps(instance, indent=1)[:3000]}"

    def undeclared(self, schemas: list[dict[str, Any]], value: Any, at: str = "") -> list[str]:
        flat = [f for s in schemas for f in self._flatten(s, value)]
        found: list[str] = []
        if isinstance(value, dict):
            declared = [f["properties"] for f in flat if "properties" in f]
            if declared and not any(f.get("additionalProperties") for f in flat):
                for key, item in value.items():
                    subs = [p[key] for p in declared if key in p]
                    found += self.undeclared(subs, item, f"{at}/{key}") if subs else [f"{at}/{key}"]
        elif isinstance(value, list):
            subs = [f["items"] for f in flat if "items" in f]
            for i, item in enumerate(value):
                found += self.undeclared(subs, item, f"{at}/{i}")
        return found

    def _flatten(self, schema: dict[str, Any], value: Any) -> list[dict[str, Any]]:
        """The schemas that apply at one place: through $ref, allOf, and the anyOf/oneOf
        branches the value matches."""
        if "$ref" in schema:
            return self._flatten(self.follow(schema["$ref"]), value)
        out = [schema]
        for part in schema.get("allOf", []):
            out += self._flatten(part, value)
        for part in schema.get("anyOf", []) + schema.get("oneOf", []):
            if Draft4Validator(part, registry=self.registry).is_valid(value):
                out += self._flatten(part, value)
        return out


def _adapt(node: Any, uri: str) -> Any:
    if isinstance(node, list):
        return [_adapt(item, uri) for item in node]
    if not isinstance(node, dict):
        return node
    if isinstance(node.get("$ref"), str):
        ref = node["$ref"]
        return {"$ref": uri + ref if ref.startswith("#") else ref}
    out = {key: _adapt(value, uri) for key, value in node.items()}
    if out.pop("nullable", False) is True and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


@cache
def descriptions() -> Descriptions | None:
    folder = paypal_specs()
    return Descriptions(folder) if folder else None


def required_descriptions() -> Descriptions:
    specs = descriptions()
    if specs is None:
        pytest.skip("PayPal's descriptions are not beside the project (shared/paypal/ is absent)")
    return specs


class Checked:
    """An httpx client on the emulator; every exchange is checked against the descriptions
    (when they are there) and remembered as (path template, method, status)."""

    def __init__(self, server: PayPalEmulatorServer, specs: Descriptions | None) -> None:
        self.http = httpx.Client(base_url=server.url, timeout=5)
        self.specs = specs
        self.seen: set[tuple[str, str, int]] = set()
        self.emulator = server.emulator
        self.token = ""
        self.renew()

    def renew(self) -> None:
        """A new token, as a client does when its own has expired."""
        answer = self.get_token(self.emulator.client_id, self.emulator.client_secret)
        self.token = answer.json()["access_token"]

    def get_token(
        self, client_id: str, secret: str, grant: str | None = "client_credentials"
    ) -> httpx.Response:
        form = {"grant_type": grant} if grant else {}
        response = self.http.post("/v1/oauth2/token", data=form, auth=(client_id, secret))
        body = response.json()
        # Not in the descriptions (only `tokenUrl` is): PayPal's documented fields instead.
        if response.status_code == 200:
            assert set(body) == {
                "scope",
                "access_token",
                "token_type",
                "app_id",
                "expires_in",
                "nonce",
            }
            assert body["token_type"] == "Bearer" and isinstance(body["expires_in"], int)
        else:
            assert set(body) == {"error", "error_description"}
        self.seen.add(("/v1/oauth2/token", "POST", response.status_code))
        return response

    def call(
        self,
        method: str,
        template: str,
        body: Any = None,
        *,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        token: str | None = "",
        **params: str,
    ) -> httpx.Response:
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token or self.token}"
        path = template.format(**params)
        response = self.http.request(method, path, json=body, content=content, headers=sent)
        status = response.status_code
        self.seen.add((template, method, status))
        if self.specs is not None and self.specs.describes(template, method):
            if body is not None:  # a 400 exactly when the description's schema refuses the body
                refused = self.specs.errors(self.specs.request(template, method), body)
                assert bool(refused) == (status == 400), (status, refused, body)
            schema = self.specs.response(template, method, status)
            self.specs.check(schema, response.json(), f"{method} {template} {status}")
        elif self.specs is not None:  # a route PayPal does not have: the 404 of Payments
            payments = FILES["/v2/payments/"]
            self.specs.check(
                {
                    "allOf": [
                        self.specs.component(payments, "error_404"),
                        self.specs.component(payments, "404"),
                    ]
                },
                response.json(),
                path,
            )
        return response

    def refund(self, paid: Paid, body: Any = None, **headers: str) -> httpx.Response:
        names = {"request_id": "PayPal-Request-Id", "prefer": "Prefer"}
        sent = {names[k]: v for k, v in headers.items()}
        return self.call("POST", REFUND, body, headers=sent, capture_id=paid.capture_id)

    def close(self) -> None:
        self.http.close()


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2025, 3, 3, 9, 30, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture()
def clock() -> Clock:
    return Clock()


@pytest.fixture()
def emulator(clock: Clock) -> PayPalEmulator:
    return PayPalEmulator(clock=clock)


@pytest.fixture()
def server(emulator: PayPalEmulator) -> Iterator[PayPalEmulatorServer]:
    server = PayPalEmulatorServer(emulator)
    yield server
    server.stop()


@pytest.fixture()
def paypal(server: PayPalEmulatorServer) -> Iterator[Checked]:
    client = Checked(server, descriptions())
    yield client
    client.close()


def usd(value: str, currency: str = "USD") -> dict[str, Any]:
    return {"amount": {"currency_code": currency, "value": value}}


def issue(response: httpx.Response) -> str:
    assert response.status_code in (400, 422), response.text
    return str(response.json()["details"][0]["issue"])


def delivered(emulator: PayPalEmulator) -> list[tuple[bytes, dict[str, str]]]:
    sent: list[tuple[bytes, dict[str, str]]] = []
    emulator.deliver(lambda body, headers: sent.append((body, headers)))
    return sent


def verification(body: bytes, headers: dict[str, str], webhook_id: str) -> dict[str, Any]:
    """What a receiver posts to verify-webhook-signature for a notification it got."""
    return {
        "auth_algo": headers["PAYPAL-AUTH-ALGO"],
        "cert_url": headers["PAYPAL-CERT-URL"],
        "transmission_id": headers["PAYPAL-TRANSMISSION-ID"],
        "transmission_sig": headers["PAYPAL-TRANSMISSION-SIG"],
        "transmission_time": headers["PAYPAL-TRANSMISSION-TIME"],
        "webhook_id": webhook_id,
        "webhook_event": json.loads(body),
    }


def verify(paypal: Checked, request: dict[str, Any]) -> str:
    response = paypal.call("POST", VERIFY, request)
    assert response.status_code == 200, response.text
    return str(response.json()["verification_status"])


# ---------------------------------------------------------------- conformance


def test_every_route_and_fault_answers_as_paypals_descriptions_say(
    server: PayPalEmulatorServer, clock: Clock
) -> None:
    specs = required_descriptions()
    paypal = Checked(server, specs)
    emulator = server.emulator
    paid, yen = emulator.pay("100.00"), emulator.pay("5000", "JPY")
    old = emulator.pay("10.00", created=clock.now - timedelta(days=181))

    # captures, orders, refunds that are and are not there
    assert paypal.call("GET", CAPTURE, capture_id=paid.capture_id).status_code == 200
    assert paypal.call("GET", CAPTURE, capture_id="0" * 17).status_code == 404
    assert paypal.call("GET", ORDER, id=paid.order_id).status_code == 200
    assert paypal.call("GET", ORDER, id="0" * 17).status_code == 404
    assert paypal.call("GET", REFUND_GET, refund_id="0" * 17).status_code == 404
    assert paypal.call("POST", REFUND, usd("1.00"), capture_id="0" * 17).status_code == 404

    # refunds: minimal by default, the representation, a repeated request id, a pending one
    full = {
        **usd("10.00"),
        "custom_id": "case-1.exec-1",
        "invoice_id": "INV-1",
        "note_to_payer": "Sorry",
    }
    minimal = paypal.refund(paid, full, request_id="exec-1")
    assert minimal.status_code == 201 and set(minimal.json()) == {"id", "status", "links"}
    shown = paypal.refund(paid, usd("5.00"), request_id="exec-2", prefer="return=representation")
    assert shown.status_code == 201 and shown.json()["seller_payable_breakdown"]
    assert paypal.refund(paid, full, request_id="exec-1").json()["id"] == minimal.json()["id"]
    emulator.next_refund_pending()
    pending = paypal.refund(paid, usd("1.00"), prefer="return=representation").json()
    assert pending["status_details"] == {"reason": "ECHECK"}
    for refund in (minimal.json(), shown.json(), pending):
        assert paypal.call("GET", REFUND_GET, refund_id=refund["id"]).status_code == 200
    assert paypal.call("GET", ORDER, id=paid.order_id).json()["purchase_units"][0]["payments"][
        "refunds"
    ]

    # 422: what the emulator checks itself, then every issue a decline can name
    assert issue(paypal.refund(paid, usd("500.00"))) == "REFUND_AMOUNT_EXCEEDED"
    assert issue(paypal.refund(paid, usd("1.001"))) == "DECIMAL_PRECISION"
    assert issue(paypal.refund(paid, usd("0.00"))) == "CANNOT_BE_ZERO_OR_NEGATIVE"
    assert issue(paypal.refund(paid, usd("-1.00"))) == "CANNOT_BE_ZERO_OR_NEGATIVE"
    assert issue(paypal.refund(paid, usd("1.00", "EUR"))) == "REFUND_CAPTURE_CURRENCY_MISMATCH"
    assert issue(paypal.refund(paid, usd("1.00", "XYZ"))) == "INVALID_CURRENCY_CODE"
    assert (
        issue(paypal.refund(paid, {**usd("1.00"), "invoice_id": "INV-1"})) == "DUPLICATE_INVOICE_ID"
    )
    assert issue(paypal.refund(yen, usd("100.00", "JPY"))) == "DECIMALS_NOT_SUPPORTED"
    assert issue(paypal.refund(old)) == "REFUND_TIME_LIMIT_EXCEEDED"
    assert paypal.refund(yen).status_code == 201
    assert issue(paypal.refund(yen)) == "CAPTURE_FULLY_REFUNDED"
    listed = specs.follow(f"{URN}payments_payment_v2.json#/components/schemas/captures.refund-422")
    titles = {branch["title"] for branch in listed["properties"]["details"]["items"]["anyOf"]}
    assert set(ISSUES) <= titles
    for name in ISSUES:
        emulator.decline_next(name)
        assert issue(paypal.refund(paid, usd("1.00"))) == name

    # 400: bodies the description's request schema refuses (checked in `call`), and not JSON
    assert (
        issue(paypal.refund(paid, {"amount": {"currency_code": "USD"}}))
        == "MISSING_REQUIRED_PARAMETER"
    )
    assert issue(paypal.refund(paid, usd("ten"))) == "INVALID_PARAMETER_SYNTAX"
    assert issue(paypal.refund(paid, usd("1.00", "US"))) == "INVALID_STRING_LENGTH"
    assert issue(paypal.refund(paid, {"custom_id": "x" * 128})) == "INVALID_STRING_LENGTH"
    broken = paypal.call("POST", REFUND, content=b"{", capture_id=paid.capture_id)
    assert issue(broken) == "INVALID_PARAMETER_SYNTAX"

    # faults
    emulator.rate_limit()
    assert paypal.refund(paid, usd("1.00")).status_code == 429
    emulator.error_before_refund()
    assert paypal.refund(paid, usd("1.00")).status_code == 503
    emulator.error_after_refund()
    assert paypal.refund(paid, usd("1.00")).status_code == 500
    emulator.stall_after_refund(0.2)
    assert paypal.refund(paid, usd("1.00")).status_code == 201

    # 401 on every route: no token, an unknown one, expired ones
    routes: list[tuple[str, str, dict[str, str]]] = [
        ("GET", CAPTURE, {"capture_id": paid.capture_id}),
        ("POST", REFUND, {"capture_id": paid.capture_id}),
        ("GET", REFUND_GET, {"refund_id": minimal.json()["id"]}),
        ("GET", ORDER, {"id": paid.order_id}),
        ("POST", VERIFY, {}),
    ]
    for method, template, params in routes:
        assert paypal.call(method, template, token=None, **params).status_code == 401
        assert paypal.call(method, template, token="A21AAnot-a-token", **params).status_code == 401
    emulator.expire_tokens()
    assert paypal.call("GET", CAPTURE, capture_id=paid.capture_id).status_code == 401
    paypal.renew()
    assert paypal.get_token(emulator.client_id, "wrong").status_code == 401

    # webhooks: each event as the webhooks description says, its resource as Payments says
    emulator.settle_refund(pending["id"], "COMPLETED")
    emulator.reverse(paid.capture_id)
    events = delivered(emulator)
    resources = {"refund": "refund", "capture": "capture-2"}
    payments = FILES["/v2/payments/"]
    for body, headers in events:
        event = json.loads(body)
        specs.check(
            specs.component(FILES["/v1/notifications/"], "event"), event, event["event_type"]
        )
        specs.check(
            specs.component(payments, resources[event["resource_type"]]),
            event["resource"],
            event["event_type"],
        )
        assert verify(paypal, verification(body, headers, emulator.webhook_id)) == "SUCCESS"
    body, headers = events[0]
    assert verify(paypal, verification(body, headers, "OTHERWEBHOOK1")) == "FAILURE"
    assert paypal.call("POST", VERIFY, {"webhook_id": emulator.webhook_id}).status_code == 400
    kinds = {json.loads(body)["event_type"] for body, _ in events}
    assert kinds == {
        "PAYMENT.CAPTURE.COMPLETED",
        "PAYMENT.CAPTURE.REFUNDED",
        "PAYMENT.REFUND.PENDING",
        "PAYMENT.CAPTURE.REVERSED",
    }

    assert paypal.call("GET", "/v2/payments/nothing-here").status_code == 404
    statuses = {
        ("/v1/oauth2/token", "POST"): (200, 401),
        (CAPTURE, "GET"): (200, 401, 404),
        (REFUND, "POST"): (201, 400, 401, 404, 422, 429, 500, 503),
        (REFUND_GET, "GET"): (200, 401, 404),
        (ORDER, "GET"): (200, 401, 404),
        (VERIFY, "POST"): (200, 400, 401),
    }
    expected = {
        (path, method, status) for (path, method), codes in statuses.items() for status in codes
    }
    assert expected <= paypal.seen, expected - paypal.seen
    paypal.close()


def test_the_descriptions_check_catches_a_misspelt_or_mistyped_field() -> None:
    specs = required_descriptions()
    refund = specs.component(FILES["/v2/payments/"], "refund")
    good = {"id": "1JU08902781691411", "status": "COMPLETED", "amount": usd("1.00")["amount"]}
    assert specs.errors(refund, good) == []
    assert specs.errors(refund, {**good, "amout": good["amount"]}) == [
        "/amout: not in the description"
    ]
    assert specs.errors(refund, {**good, "amount": {"currency_code": "USD", "value": 1}})
    assert specs.errors(refund, {**good, "status": "SUCCEEDED"})


# ---------------------------------------------------------------- behaviours


def test_the_same_request_id_answers_the_first_refund_whatever_the_body_for_45_days(
    paypal: Checked, emulator: PayPalEmulator, clock: Clock
) -> None:
    paid = emulator.pay("30.00")
    first = paypal.refund(paid, usd("10.00"), request_id="exec-1")
    again = paypal.refund(paid, usd("12.00"), request_id="exec-1", prefer="return=representation")
    assert again.status_code == 201
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["amount"] == {"currency_code": "USD", "value": "10.00"}
    assert len(emulator.refunds(paid.capture_id)) == 1
    clock.now += timedelta(days=45)
    paypal.renew()
    assert paypal.refund(paid, usd("10.00"), request_id="exec-1").json()["id"] == first.json()["id"]
    clock.now += timedelta(seconds=1)  # the key is forgotten: a new refund
    assert paypal.refund(paid, usd("10.00"), request_id="exec-1").json()["id"] != first.json()["id"]
    assert len(emulator.refunds(paid.capture_id)) == 2


def test_with_request_ids_ignored_each_request_makes_a_refund(
    paypal: Checked, emulator: PayPalEmulator
) -> None:
    emulator.ignore_request_id = True
    paid = emulator.pay("30.00")
    first = paypal.refund(paid, usd("10.00"), request_id="exec-1")
    second = paypal.refund(paid, usd("10.00"), request_id="exec-1")
    assert first.json()["id"] != second.json()["id"]
    assert len(emulator.refunds(paid.capture_id)) == 2


def test_a_refund_beyond_what_is_left_is_refused_and_none_after_the_whole_is_back(
    paypal: Checked, emulator: PayPalEmulator
) -> None:
    paid = emulator.pay("30.00")
    assert paypal.refund(paid, usd("20.00")).status_code == 201
    exceeded = paypal.refund(paid, usd("10.01"))
    assert issue(exceeded) == "REFUND_AMOUNT_EXCEEDED"
    assert exceeded.json()["name"] == "UNPROCESSABLE_ENTITY"
    assert exceeded.json()["debug_id"] == exceeded.headers["Paypal-Debug-Id"]
    capture = paypal.call("GET", CAPTURE, capture_id=paid.capture_id).json()
    assert capture["status"] == "PARTIALLY_REFUNDED"
    rest = paypal.refund(paid, prefer="return=representation").json()  # no amount: the rest
    assert rest["amount"]["value"] == "10.00"
    assert rest["seller_payable_breakdown"]["total_refunded_amount"]["value"] == "30.00"
    assert issue(paypal.refund(paid, usd("0.01"))) == "CAPTURE_FULLY_REFUNDED"
    assert issue(paypal.refund(paid)) == "CAPTURE_FULLY_REFUNDED"
    assert paypal.call("GET", CAPTURE, capture_id=paid.capture_id).json()["status"] == "REFUNDED"


@pytest.mark.parametrize("currency", ["JPY", "HUF", "TWD"])
def test_currencies_without_decimals_take_none(
    paypal: Checked, emulator: PayPalEmulator, currency: str
) -> None:
    paid = emulator.pay("5000", currency)
    capture = paypal.call("GET", CAPTURE, capture_id=paid.capture_id).json()
    assert capture["amount"] == {"currency_code": currency, "value": "5000"}
    assert issue(paypal.refund(paid, usd("100.00", currency))) == "DECIMALS_NOT_SUPPORTED"
    assert issue(paypal.refund(paid, usd("100.5", currency))) == "DECIMALS_NOT_SUPPORTED"
    made = paypal.refund(paid, usd("100", currency), prefer="return=representation").json()
    assert made["amount"]["value"] == "100"
    with pytest.raises(ValueError):
        emulator.pay("10.50", currency)


def test_two_decimal_currencies_take_at_most_two(paypal: Checked, emulator: PayPalEmulator) -> None:
    paid = emulator.pay("20", "EUR")
    assert emulator.refunds(paid.capture_id) == []
    capture = paypal.call("GET", CAPTURE, capture_id=paid.capture_id).json()
    assert capture["amount"]["value"] == "20.00"
    assert issue(paypal.refund(paid, usd("1.005", "EUR"))) == "DECIMAL_PRECISION"
    made = paypal.refund(paid, usd("1.5", "EUR"), prefer="return=representation").json()
    assert made["amount"] == {"currency_code": "EUR", "value": "1.50"}


def test_refunds_stop_180_days_after_the_capture(
    paypal: Checked, emulator: PayPalEmulator, clock: Clock
) -> None:
    paid = emulator.pay("10.00")
    clock.now += timedelta(days=180)
    paypal.renew()
    assert paypal.refund(paid, usd("1.00")).status_code == 201
    clock.now += timedelta(seconds=1)
    refused = paypal.refund(paid, usd("1.00"))
    assert issue(refused) == "REFUND_TIME_LIMIT_EXCEEDED"
    assert refused.json()["details"][0]["description"] == ISSUES["REFUND_TIME_LIMIT_EXCEEDED"]


def test_tokens_are_needed_and_expire(
    paypal: Checked, emulator: PayPalEmulator, clock: Clock
) -> None:
    paid = emulator.pay("10.00")
    assert paypal.call("GET", CAPTURE, capture_id=paid.capture_id).status_code == 200
    missing = paypal.call("GET", CAPTURE, token=None, capture_id=paid.capture_id)
    assert missing.status_code == 401 and missing.json()["name"] == "AUTHENTICATION_FAILURE"
    clock.now += timedelta(seconds=32400)
    assert paypal.call("GET", CAPTURE, capture_id=paid.capture_id).status_code == 401
    paypal.renew()
    assert paypal.call("GET", CAPTURE, capture_id=paid.capture_id).status_code == 200
    emulator.expire_tokens()
    assert paypal.call("GET", CAPTURE, capture_id=paid.capture_id).status_code == 401
    wrong = paypal.get_token(emulator.client_id, "not-the-secret")
    assert wrong.status_code == 401
    assert wrong.json() == {
        "error": "invalid_client",
        "error_description": "Client Authentication failed",
    }
    no_grant = paypal.get_token(emulator.client_id, emulator.client_secret, grant=None)
    assert no_grant.status_code == 400 and no_grant.json()["error"] == "unsupported_grant_type"


def test_only_a_notification_as_sent_verifies(paypal: Checked, emulator: PayPalEmulator) -> None:
    paid = emulator.pay("10.00")
    paypal.refund(paid, usd("4.00"))
    events = delivered(emulator)
    assert [json.loads(b)["event_type"] for b, _ in events] == [
        "PAYMENT.CAPTURE.COMPLETED",
        "PAYMENT.CAPTURE.REFUNDED",
    ]
    body, headers = events[1]
    assert headers["PAYPAL-AUTH-ALGO"] == "SHA256withRSA"
    assert headers["Content-Type"] == "application/json"
    good = verification(body, headers, emulator.webhook_id)
    assert verify(paypal, good) == "SUCCESS"
    event = json.loads(body)
    event["resource"]["amount"]["value"] = "40.00"
    assert verify(paypal, {**good, "webhook_event": event}) == "FAILURE"
    for field in (
        "auth_algo",
        "cert_url",
        "transmission_id",
        "transmission_sig",
        "transmission_time",
    ):
        value = good[field]
        altered = value[:-1] + ("2" if value[-1] != "2" else "3")  # one character changed
        assert verify(paypal, {**good, field: altered}) == "FAILURE", field
    assert verify(paypal, {**good, "webhook_id": "OTHERWEBHOOK1"}) == "FAILURE"
    other = verification(*events[0], emulator.webhook_id)  # another notification's headers
    assert verify(paypal, {**other, "webhook_event": good["webhook_event"]}) == "FAILURE"
    forged_body, forged_headers = emulator.signed({**json.loads(body), "id": "WH-FORGED"})
    assert (
        verify(paypal, verification(forged_body, forged_headers, emulator.webhook_id)) == "SUCCESS"
    )
    missing = paypal.call(
        "POST", VERIFY, {k: v for k, v in good.items() if k != "transmission_sig"}
    )
    assert missing.status_code == 400
    assert missing.json()["name"] == "VALIDATION_ERROR"
    assert missing.json()["details"][0]["field"] == "transmission_sig"


def test_a_pending_refund_settles_later_and_a_completed_one_can_fail(
    paypal: Checked, emulator: PayPalEmulator
) -> None:
    paid = emulator.pay("50.00")
    emulator.next_refund_pending()
    pending = paypal.refund(paid, usd("20.00"), prefer="return=representation").json()
    assert pending["status"] == "PENDING"
    assert issue(paypal.refund(paid, usd("30.01"))) == "REFUND_AMOUNT_EXCEEDED"  # it is held
    capture = paypal.call("GET", CAPTURE, capture_id=paid.capture_id).json()
    assert capture["status"] == "COMPLETED"
    emulator.settle_refund(pending["id"], "COMPLETED")
    shown = paypal.call("GET", REFUND_GET, refund_id=pending["id"]).json()
    assert shown["status"] == "COMPLETED" and "status_details" not in shown
    assert (
        paypal.call("GET", CAPTURE, capture_id=paid.capture_id).json()["status"]
        == "PARTIALLY_REFUNDED"
    )
    emulator.settle_refund(pending["id"], "FAILED")  # the bank returned it
    assert paypal.call("GET", CAPTURE, capture_id=paid.capture_id).json()["status"] == "COMPLETED"
    with pytest.raises(ValueError):
        emulator.settle_refund(pending["id"], "COMPLETED")
    emulator.next_refund_pending()
    cancelled = paypal.refund(paid, usd("5.00")).json()
    emulator.settle_refund(cancelled["id"], "CANCELLED")
    kinds = [json.loads(b)["event_type"] for b, _ in delivered(emulator)]
    assert kinds == [
        "PAYMENT.CAPTURE.COMPLETED",
        "PAYMENT.REFUND.PENDING",
        "PAYMENT.CAPTURE.REFUNDED",
        "PAYMENT.REFUND.FAILED",
        "PAYMENT.REFUND.PENDING",
        "PAYMENT.REFUND.CANCELLED",
    ]
    assert paypal.refund(paid, usd("50.00")).status_code == 201  # failed and cancelled free it


def test_a_reversal_is_refund_shaped_and_takes_what_is_left(
    paypal: Checked, emulator: PayPalEmulator
) -> None:
    paid = emulator.pay("25.00")
    direct = emulator.refund_directly(paid.capture_id, "5.00")
    reversal = emulator.reverse(paid.capture_id)
    shown = paypal.call("GET", REFUND_GET, refund_id=reversal).json()
    assert shown["amount"]["value"] == "20.00" and shown["status"] == "COMPLETED"
    assert [r["id"] for r in emulator.refunds(paid.capture_id)] == [direct, reversal]
    events = [json.loads(b) for b, _ in delivered(emulator)]
    assert events[-1]["event_type"] == "PAYMENT.CAPTURE.REVERSED"
    assert events[-1]["resource_type"] == "refund" and events[-1]["resource"]["id"] == reversal
    assert paypal.call("GET", CAPTURE, capture_id=paid.capture_id).json()["status"] == "REFUNDED"
    with pytest.raises(ValueError):
        emulator.reverse(paid.capture_id)


def test_the_order_lists_its_capture_and_refunds_with_their_links(
    paypal: Checked, emulator: PayPalEmulator
) -> None:
    paid = emulator.pay("40.00", email="grace@example.com", name="Grace Hopper")
    made = paypal.refund(paid, {**usd("15.00"), "custom_id": "case-7"}).json()
    emulator.refund_directly(paid.capture_id, "5.00")
    order = paypal.call("GET", ORDER, id=paid.order_id).json()
    assert (order["status"], order["intent"]) == ("COMPLETED", "CAPTURE")
    assert order["payer"]["email_address"] == "grace@example.com"
    assert order["payer"]["name"] == {"given_name": "Grace", "surname": "Hopper"}
    unit = order["purchase_units"][0]
    assert unit["reference_id"] == "default"
    assert [c["id"] for c in unit["payments"]["captures"]] == [paid.capture_id]
    refunds = unit["payments"]["refunds"]
    assert (refunds[0]["id"], refunds[0].get("custom_id")) == (made["id"], "case-7")
    for refund in refunds:
        up = next(link for link in refund["links"] if link["rel"] == "up")
        assert up["href"].endswith(f"/v2/payments/captures/{paid.capture_id}")
    capture = paypal.call("GET", CAPTURE, capture_id=paid.capture_id).json()
    assert capture["supplementary_data"]["related_ids"]["order_id"] == paid.order_id
    rels = {link["rel"]: link for link in capture["links"]}
    assert rels["up"]["href"].endswith(f"/v2/checkout/orders/{paid.order_id}")
    assert rels["refund"]["method"] == "POST"
    for some_id in (paid.order_id, paid.capture_id, made["id"]):
        assert len(some_id) == 17 and some_id.isalnum() and some_id.upper() == some_id


def test_a_refund_answered_late_or_with_an_error_after_it_was_made_exists(
    paypal: Checked, emulator: PayPalEmulator, server: PayPalEmulatorServer
) -> None:
    paid = emulator.pay("30.00")
    emulator.stall_after_refund(1.0)
    impatient = httpx.Client(base_url=server.url, timeout=0.2)
    with pytest.raises(httpx.ReadTimeout):
        impatient.post(
            REFUND.format(capture_id=paid.capture_id),
            json=usd("10.00"),
            headers={"Authorization": f"Bearer {paypal.token}", "PayPal-Request-Id": "exec-1"},
        )
    impatient.close()
    assert len(emulator.refunds(paid.capture_id)) == 1
    again = paypal.refund(paid, usd("10.00"), request_id="exec-1")
    assert (
        again.status_code == 201
        and again.json()["id"] == emulator.refunds(paid.capture_id)[0]["id"]
    )

    emulator.error_after_refund(500)
    failed = paypal.refund(paid, usd("5.00"), request_id="exec-2")
    assert failed.status_code == 500 and failed.json()["name"] == "INTERNAL_SERVER_ERROR"
    assert len(emulator.refunds(paid.capture_id)) == 2
    assert paypal.refund(paid, usd("5.00"), request_id="exec-2").status_code == 201
    assert len(emulator.refunds(paid.capture_id)) == 2


def test_faults_before_a_refund_make_nothing_and_clear_themselves(
    paypal: Checked, emulator: PayPalEmulator
) -> None:
    paid = emulator.pay("30.00")
    emulator.error_before_refund(503, times=2)
    emulator.rate_limit()
    limited = paypal.refund(paid, usd("1.00"), request_id="exec-1")
    assert limited.status_code == 429 and limited.json()["name"] == "RATE_LIMIT_REACHED"
    for _ in range(2):
        unavailable = paypal.refund(paid, usd("1.00"), request_id="exec-1")
        assert unavailable.status_code == 503
        assert unavailable.json()["name"] == "SERVICE_UNAVAILABLE"
    emulator.decline_next("REFUND_FAILED_INSUFFICIENT_FUNDS")
    assert (
        issue(paypal.refund(paid, usd("1.00"), request_id="exec-1"))
        == "REFUND_FAILED_INSUFFICIENT_FUNDS"
    )
    assert emulator.refunds(paid.capture_id) == []
    assert paypal.refund(paid, usd("1.00"), request_id="exec-1").status_code == 201
    with pytest.raises(ValueError):
        emulator.decline_next("NOT_A_PAYPAL_ISSUE")


def test_the_log_keeps_each_request_with_its_headers_and_body(
    paypal: Checked, emulator: PayPalEmulator
) -> None:
    paid = emulator.pay("10.00")
    paypal.refund(paid, {**usd("2.00"), "custom_id": "case-3"}, request_id="exec-9")
    method, path, headers, body = emulator.requests[-1]
    assert (method, path) == ("POST", f"/v2/payments/captures/{paid.capture_id}/refund")
    assert headers["PayPal-Request-Id"] == "exec-9"
    assert body == {**usd("2.00"), "custom_id": "case-3"}
    assert emulator.requests[0][3] == {"grant_type": "client_credentials"}


def test_concurrent_refunds_never_exceed_the_capture(
    paypal: Checked, emulator: PayPalEmulator, server: PayPalEmulatorServer
) -> None:
    paid = emulator.pay("10.00")
    answers: list[int] = []

    def refund(n: int) -> None:
        with httpx.Client(base_url=server.url, timeout=5) as client:
            answer = client.post(
                REFUND.format(capture_id=paid.capture_id),
                json=usd("3.00"),
                headers={"Authorization": f"Bearer {paypal.token}", "PayPal-Request-Id": f"r{n}"},
            )
            answers.append(answer.status_code)

    threads = [threading.Thread(target=refund, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [201] * 3 + [422] * 5


def test_the_desk_clock_is_the_default() -> None:
    later = datetime(2030, 1, 1, tzinfo=UTC)
    previous = desk_clock.set_source(lambda: later)
    try:
        emulator = PayPalEmulator()
        paid = emulator.pay("1.00")
        assert emulator.signed({})[1]["PAYPAL-TRANSMISSION-TIME"] == "2030-01-01T00:00:00Z"
        assert paid.capture_id
    finally:
        desk_clock.set_source(previous)
