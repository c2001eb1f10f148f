"""The processors at the network edge, behind one test interface, so the exactly-once tests run
against each: Stripe (our rule-keeping fake, the real SDK) and PayPal (the emulator, httpx)."""

from __future__ import annotations

from typing import Any

from refund_desk import money
from refund_desk.cases.ports import Processor
from refund_desk.demo.paypal import PayPalEmulator, PayPalEmulatorServer
from refund_desk.payments.paypal_api import PayPalProcessor
from refund_desk.runtime import Runtime, build
from refund_desk.storage.db import Database
from tests.conftest import make_settings
from tests.fakes.stripe_fake import FakeStripeServer
from tests.helpers import CUSTOMER, Harness

STRIPE_KEY = "sk_test_refund_desk"
STRIPE_WEBHOOK_SECRET = "whsec_" + "f" * 32


class Remote:
    """One processor on loopback: make payments, read what it holds, inject faults."""

    name: str

    def settings(self) -> dict[str, str]:
        raise NotImplementedError

    def processor(self, timeout: float = 1.0) -> Processor:
        raise NotImplementedError

    def pay(self, amount: str, currency: str = "USD", email: str = CUSTOMER) -> str:
        raise NotImplementedError

    def refunds(self, payment: str) -> list[tuple[int, str]]:
        """(amount in ISO minor units, our status word) of each refund the processor holds."""
        raise NotImplementedError

    def creates(self) -> int:
        """Refund creates the processor received."""
        raise NotImplementedError

    def stall_after_refund(self, seconds: float) -> None:
        raise NotImplementedError

    def error_after_refund(self) -> None:
        raise NotImplementedError

    def ignore_request_ids(self) -> None:
        raise NotImplementedError

    def next_refund_pending(self) -> None:
        raise NotImplementedError

    def complete_pending(self, payment: str) -> None:
        """Every pending refund of the payment succeeds (its webhook left undelivered)."""
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def runtime(self, url: str, processor: Processor | None = None) -> Runtime:
        settings = make_settings(url, **self.settings())
        return build(settings, db=Database.from_url(url), processor=processor or self.processor())


class StripeRemote(Remote):
    name = "stripe"

    def __init__(self) -> None:
        self.server = FakeStripeServer()
        self.server.fake.webhook_secret = STRIPE_WEBHOOK_SECRET
        self.fake = self.server.fake

    def settings(self) -> dict[str, str]:
        return {
            "REFUND_DESK_PROCESSOR": "stripe",
            "STRIPE_API_KEY": STRIPE_KEY,
            "STRIPE_API_BASE": self.server.url,
            "STRIPE_WEBHOOK_SECRET": STRIPE_WEBHOOK_SECRET,
        }

    def processor(self, timeout: float = 1.0) -> Processor:
        from refund_desk.payments.stripe_api import StripeProcessor

        return StripeProcessor.connect(
            STRIPE_KEY, api_base=self.server.url, timeout_seconds=timeout
        )

    def pay(self, amount: str, currency: str = "USD", email: str = CUSTOMER) -> str:
        return self.fake.pay(money.to_minor(amount, currency), currency.lower(), email)

    def refunds(self, payment: str) -> list[tuple[int, str]]:
        return [
            (int(r["amount"]), str(r["status"]))
            for r in self.fake.refunds.values()
            if r["payment_intent"] == payment
        ]

    def creates(self) -> int:
        return sum(r == ("POST", "/v1/refunds") for r in self.fake.requests)

    def stall_after_refund(self, seconds: float) -> None:
        self.fake.knobs.stall_refund_seconds = seconds

    def error_after_refund(self) -> None:
        self.fake.knobs.error_after_refund = 500

    def ignore_request_ids(self) -> None:
        self.fake.ignore_keys = True

    def next_refund_pending(self) -> None:
        self.fake.knobs.next_refund_status = "pending"

    def complete_pending(self, payment: str) -> None:
        for refund in self.fake.refunds.values():
            if refund["payment_intent"] == payment and refund["status"] == "pending":
                refund["status"] = "succeeded"

    def stop(self) -> None:
        self.server.stop()


class PayPalRemote(Remote):
    name = "paypal"
    STATUSES = {"COMPLETED": "succeeded", "PENDING": "pending", "FAILED": "failed"}

    def __init__(self) -> None:
        self.server = PayPalEmulatorServer(PayPalEmulator())
        self.emulator = self.server.emulator

    def settings(self) -> dict[str, str]:
        return {
            "REFUND_DESK_PROCESSOR": "paypal",
            "PAYPAL_CLIENT_ID": self.emulator.client_id,
            "PAYPAL_CLIENT_SECRET": self.emulator.client_secret,
            "PAYPAL_API_BASE": self.server.url,
            "PAYPAL_WEBHOOK_ID": self.emulator.webhook_id,
        }

    def processor(self, timeout: float = 1.0) -> PayPalProcessor:
        return PayPalProcessor(
            client_id=self.emulator.client_id,
            client_secret=self.emulator.client_secret,
            api_base=self.server.url,
            timeout_seconds=timeout,
            webhook_id=self.emulator.webhook_id,
        )

    def pay(self, amount: str, currency: str = "USD", email: str = CUSTOMER) -> str:
        return self.emulator.pay(amount, currency, email=email).capture_id

    def refunds(self, payment: str) -> list[tuple[int, str]]:
        return [
            (
                money.to_minor(r["amount"]["value"], r["amount"]["currency_code"]),
                self.STATUSES.get(r["status"], r["status"].lower()),
            )
            for r in self.emulator.refunds(payment)
        ]

    def creates(self) -> int:
        return sum(
            method == "POST" and path.endswith("/refund")
            for method, path, _, _ in self.emulator.requests
        )

    def stall_after_refund(self, seconds: float) -> None:
        self.emulator.stall_after_refund(seconds)

    def error_after_refund(self) -> None:
        self.emulator.error_after_refund(500)

    def ignore_request_ids(self) -> None:
        self.emulator.ignore_request_id = True

    def next_refund_pending(self) -> None:
        self.emulator.next_refund_pending()

    def complete_pending(self, payment: str) -> None:
        for refund in self.emulator.refunds(payment):
            if refund["status"] == "PENDING":
                self.emulator.settle_refund(refund["id"], "COMPLETED")

    def stop(self) -> None:
        self.server.stop()


REMOTES = {"stripe": StripeRemote, "paypal": PayPalRemote}


class RemoteHarness(Harness):
    """The test harness with a processor at the network edge instead of the sandbox."""

    def __init__(self, runtime: Runtime, remote: Remote) -> None:
        super().__init__(runtime)
        self.remote = remote

    def payment(self, amount: str = "30.00", currency: str = "USD", **_: Any) -> str:
        return self.remote.pay(amount, currency)

    def refunds_at_processor(self, payment: str) -> list[dict[str, Any]]:
        return [{"amount": a, "status": s} for a, s in self.remote.refunds(payment)]

    def webhook(self, path: str, body: bytes, headers: dict[str, str]) -> Any:
        return self.client.post(path, content=body, headers=headers)
