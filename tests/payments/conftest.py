"""Stripe at the network edge: localstripe (real third-party code) and our rule-keeping fake."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from refund_desk.cases.ports import Processor
from refund_desk.payments.stripe_api import StripeProcessor
from refund_desk.runtime import Runtime, build
from refund_desk.storage.db import Database
from tests.conftest import make_settings
from tests.fakes.stripe_fake import FakeStripeServer
from tests.helpers import CUSTOMER, Harness
from tests.payments.remotes import REMOTES, Remote

ROOT = Path(__file__).resolve().parents[2]
API_KEY = "sk_test_refund_desk"
WEBHOOK_SECRET = "whsec_" + "f" * 32


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalStripe:
    """localstripe in a child process, on loopback, its state file in a temporary folder."""

    def __init__(self, state_dir: Path) -> None:
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = (state_dir / "localstripe.log").open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.localstripe_server", str(port), str(state_dir)],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("localstripe did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        self.http.close()
        self.process.terminate()
        self.process.wait(timeout=10)
        self.log.close()

    def _post(self, path: str, data: dict[str, str]) -> dict[str, Any]:
        response = self.http.post(path, data=data)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def pay(self, amount: int, currency: str = "usd", email: str = CUSTOMER) -> str:
        """A paid PaymentIntent for a customer with this email; amount in Stripe's units."""
        customer = self._post("/v1/customers", {"email": email, "name": "Ada Lovelace"})
        card = self._post(
            "/v1/payment_methods",
            {
                "type": "card",
                "card[number]": "4242424242424242",
                "card[exp_month]": "12",
                "card[exp_year]": "2030",
                "card[cvc]": "123",
            },
        )
        intent = self._post(
            "/v1/payment_intents",
            {
                "amount": str(amount),
                "currency": currency,
                "customer": customer["id"],
                "payment_method": card["id"],
                "confirm": "true",
                "capture_method": "automatic",
            },
        )
        assert intent["status"] == "succeeded", intent
        return str(intent["id"])

    def refunds(self, payment_intent: str) -> list[dict[str, Any]]:
        response = self.http.get(
            "/v1/refunds", params={"payment_intent": payment_intent, "limit": "100"}
        )
        assert response.status_code == 200, response.text
        return list(response.json()["data"])

    def refund_directly(self, payment_intent: str, amount: int) -> str:
        """A refund made outside Refund Desk, as in the Stripe dashboard."""
        return str(
            self._post("/v1/refunds", {"payment_intent": payment_intent, "amount": str(amount)})[
                "id"
            ]
        )

    def flush(self) -> None:
        assert self.http.delete("/_config/data").status_code == 200


@pytest.fixture(params=sorted(REMOTES))
def remote(request: pytest.FixtureRequest) -> Iterator[Remote]:
    """Each processor at the network edge in turn (Stripe's fake, the PayPal emulator)."""
    made = REMOTES[request.param]()
    yield made
    made.stop()


@pytest.fixture(scope="session")
def localstripe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStripe]:
    server = LocalStripe(tmp_path_factory.mktemp("localstripe"))
    yield server
    server.stop()


@pytest.fixture()
def fake_stripe() -> Iterator[FakeStripeServer]:
    server = FakeStripeServer()
    server.fake.webhook_secret = WEBHOOK_SECRET
    yield server
    server.stop()


def stripe_settings(url: str, api_base: str) -> Any:
    return make_settings(
        url,
        REFUND_DESK_PROCESSOR="stripe",
        STRIPE_API_KEY=API_KEY,
        STRIPE_API_BASE=api_base,
        STRIPE_WEBHOOK_SECRET=WEBHOOK_SECRET,
    )


def stripe_runtime(url: str, api_base: str, processor: Processor | None = None) -> Runtime:
    """The real wiring from settings (`make_processor`), or a given processor around it."""
    return build(stripe_settings(url, api_base), db=Database.from_url(url), processor=processor)


def fast_processor(api_base: str, timeout: float = 1.0) -> StripeProcessor:
    return StripeProcessor.connect(API_KEY, api_base=api_base, timeout_seconds=timeout)


class StripeHarness(Harness):
    """The test harness with Stripe behind it instead of the sandbox."""

    def webhook(self, body: bytes, headers: dict[str, str]) -> Any:
        return self.client.post("/webhooks/stripe", content=body, headers=headers)


@pytest.fixture()
def on_localstripe(any_db_url: str, localstripe: LocalStripe) -> Iterator[StripeHarness]:
    runtime = stripe_runtime(any_db_url, localstripe.url)
    harness = StripeHarness(runtime)
    harness.publish()
    yield harness
    runtime.db.dispose()


@pytest.fixture()
def on_fake(any_db_url: str, fake_stripe: FakeStripeServer) -> Iterator[StripeHarness]:
    runtime = stripe_runtime(any_db_url, fake_stripe.url, fast_processor(fake_stripe.url))
    harness = StripeHarness(runtime)
    harness.publish()
    yield harness
    runtime.db.dispose()
