"""A small harness over a runtime: publish a policy, make payments, call the HTTP API."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from refund_desk import clock, money
from refund_desk.api_keys import create_api_key
from refund_desk.cases import tokens
from refund_desk.cases.desk import Desk
from refund_desk.cases.ports import AdviceRequest, AdvisorError
from refund_desk.governance.versions import publish
from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import AuditRecord, Case
from refund_desk.web.app import create_app

ACME = Path(__file__).parent / "fixtures" / "acme.yaml"
CUSTOMER = "ada@example.com"


class FailingAdvisor:
    name = "failing"
    model = "none"

    def advise(self, request: AdviceRequest) -> Any:
        raise AdvisorError("advisor_unavailable", "The advisor is down.")


class Harness:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.client = TestClient(create_app(runtime, scheduler=False))
        self.key = create_api_key(runtime.db, "tests")

    @property
    def sandbox(self) -> SandboxProcessor:
        sandbox = self.runtime.sandbox
        assert isinstance(sandbox, SandboxProcessor)
        return sandbox

    def publish(self, source: str | None = None) -> int:
        with self.runtime.db.write() as session:
            row = publish(
                session,
                self.runtime.desk.audit,
                source=source or ACME.read_text(),
                actor=Actor("cli", "tests"),
            )
        return row.version

    def payment(
        self,
        amount: str = "30.00",
        currency: str = "USD",
        *,
        email: str = CUSTOMER,
        age_days: int = 3,
        chargebacks: int = 0,
    ) -> str:
        return self.sandbox.create_payment(
            amount=money.to_minor(amount, currency),
            currency=currency,
            email=email,
            name="Ada Lovelace",
            chargebacks=chargebacks,
            created_at=clock.now() - timedelta(days=age_days),
        )

    def post(
        self,
        body: Any,
        *,
        key: str | None = None,
        idempotency_key: str | None = None,
        raw: bytes | None = None,
    ) -> Any:
        headers = {"Authorization": f"Bearer {key or self.key}"}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        if raw is not None:
            return self.client.post("/api/v1/refund-requests", content=raw, headers=headers)
        return self.client.post("/api/v1/refund-requests", json=body, headers=headers)

    def get(self, case_id: str) -> dict[str, Any]:
        response = self.client.get(
            f"/api/v1/cases/{case_id}", headers={"Authorization": f"Bearer {self.key}"}
        )
        assert response.status_code == 200, response.text
        return dict(response.json())

    def request(self, payment: str, amount: str | None = "20.00", **extra: Any) -> dict[str, Any]:
        body = {
            "payment": payment,
            "email": CUSTOMER,
            "currency": "USD",
            "message": "The vase arrived broken, shattered in the box.",
            **extra,
        }
        if amount is not None:
            body["amount"] = amount
        return body

    def refunds_at_processor(self, payment: str) -> list[dict[str, Any]]:
        return list(self.sandbox.show_payment(payment)["refunds"])

    def counts(self) -> tuple[int, int]:
        with self.runtime.db.read() as session:
            cases = session.scalar(select(func.count()).select_from(Case)) or 0
            audit = session.scalar(select(func.count()).select_from(AuditRecord)) or 0
        return cases, audit

    def sweep(self, seconds_ahead: float = 3600, *, batches: int = 50) -> int:
        """Run what is due `seconds_ahead` from now (each job at most once per batch)."""
        return self.runtime.desk.jobs.sweep(
            now=clock.now() + timedelta(seconds=seconds_ahead), max_batches=batches
        )


def published(runtime: Runtime) -> Harness:
    """A harness on `runtime` with the acme policy published."""
    harness = Harness(runtime)
    harness.publish()
    return harness


class LiveServer:
    """The real app under uvicorn on a loopback port, in a background thread; with
    `scheduler`, its sweeper and worker thread run the jobs as a server's do."""

    def __init__(self, runtime: Runtime, *, scheduler: bool = False) -> None:
        import socket
        import threading

        import uvicorn

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            create_app(runtime, scheduler=scheduler),
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            limit_concurrency=1000,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        import time

        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self, timeout: float = 10) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=timeout)


def button_token(desk: Desk, case: Case, action: str) -> str:
    """The signed token a card's button carries for ``case`` as it is now."""
    return tokens.issue(
        desk.secret,
        case_id=case.id,
        action=action,
        amount=case.amount,
        currency=case.currency,
        revision=case.revision,
        policy_version=case.policy_version,
        now=desk.now(),
    )
