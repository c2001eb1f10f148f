"""The embedded sandbox processor: payments and refunds as a ledger in the database.

It stands where Stripe stands, behind the same protocol, and is treated as remote: it runs its
own transactions, never the caller's. Like Stripe it honours idempotency keys (a second create
with a key it has seen returns the first refund); `honour_idempotency_keys = False` makes it
behave like localstripe, which does not, and the tests use that to show that exactly-once comes
from our execution record alone. Faults live in a table, so the CLI can switch them on for a
running server:

    down                   every call fails as unavailable (nothing happens)
    timeout-after-success  the refund is recorded, then the call times out
    decline                refunds are declined
    crash-after-success    the refund is recorded, then the process exits at once
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlmodel import Session, col

from refund_desk import clock
from refund_desk.cases.ports import (
    PaymentFacts,
    PaymentNotFound,
    ProcessorRefund,
    ProcessorTimeout,
    ProcessorUnavailable,
    RefundDeclined,
    RefundNotFound,
)
from refund_desk.storage.db import Database
from refund_desk.storage.models import SandboxFault, SandboxPayment, SandboxRefund

FAULT_MODES = ("none", "down", "timeout-after-success", "decline", "crash-after-success")
CRASH_EXIT_CODE = 86


def _power_cut() -> None:
    os._exit(CRASH_EXIT_CODE)


class SandboxProcessor:
    name = "sandbox"
    timeout_seconds = 1.0  # a local ledger: any call longer than this is a fault
    honour_idempotency_keys = True

    def __init__(self, db: Database, *, crash: Callable[[], None] = _power_cut) -> None:
        self.db = db
        self._crash = crash

    # ------------------------------------------------------------ admin (CLI, demo, tests)

    def forget_customer(self, email: str) -> int:
        """An erased customer leaves the sandbox's ledger too (it lives in our database)."""
        with self.db.write() as session:
            rows = session.scalars(
                select(SandboxPayment).where(
                    func.lower(col(SandboxPayment.email)) == email.strip().lower()
                )
            ).all()
            for row in rows:
                row.email, row.name = "", None
                session.add(row)
            return len(rows)

    def create_payment(
        self,
        *,
        amount: int,
        currency: str,
        email: str,
        name: str | None = None,
        chargebacks: int = 0,
        created_at: datetime | None = None,
    ) -> str:
        return self.create_payments(
            1,
            amount=amount,
            currency=currency,
            email=email,
            name=name,
            chargebacks=chargebacks,
            created_at=created_at,
        )[0]

    def create_payments(
        self,
        count: int,
        *,
        amount: int,
        currency: str,
        email: str,
        name: str | None = None,
        chargebacks: int = 0,
        created_at: datetime | None = None,
    ) -> list[str]:
        """`count` payments alike (seeding a load test), in one transaction; their ids."""
        if amount <= 0:
            raise ValueError("a payment amount must be positive")
        if count < 1:
            raise ValueError("the count must be at least 1")
        at = created_at or clock.now()
        payments = [
            SandboxPayment(
                id="py_" + secrets.token_hex(12),
                amount=amount,
                currency=currency.lower(),
                email=email,
                name=name,
                chargebacks=chargebacks,
                created_at=at,
            )
            for _ in range(count)
        ]
        with self.db.write() as session:
            session.add_all(payments)
        return [p.id for p in payments]

    def set_fault(self, mode: str, times: int | None = None) -> None:
        if mode not in FAULT_MODES:
            raise ValueError(f"unknown fault {mode!r}; one of {', '.join(FAULT_MODES)}")
        with self.db.write() as session:
            fault = session.get(SandboxFault, 1) or SandboxFault(id=1)
            fault.mode, fault.remaining = mode, (None if mode == "none" else times)
            session.add(fault)

    def show_payment(self, payment_id: str) -> dict[str, Any]:
        facts = self.payment(payment_id, _faults=False)
        return {
            "id": facts.id,
            "amount": facts.amount,
            "currency": facts.currency,
            "email": facts.customer_email,
            "name": facts.customer_name,
            "created_at": facts.created_at.isoformat(),
            "refunded": facts.refunded_amount(),
            "refunds": [
                {
                    "id": r.id,
                    "amount": r.amount,
                    "currency": r.currency,
                    "status": r.status,
                    "metadata": r.metadata,
                    "created_at": r.created_at.isoformat() if r.created_at else None,
                }
                for r in facts.refunds
            ],
        }

    # ------------------------------------------------------------ the processor protocol

    def payment(self, payment_id: str, *, _faults: bool = True) -> PaymentFacts:
        with self.db.read() as session:
            down = _faults and self._armed(session, ("down",)) is not None
            if not down:
                return self._facts(session, payment_id)
        self._take_fault(("down",))
        return self.payment(payment_id)

    def refusal(self, amount: int, currency: str) -> str | None:
        return None if amount > 0 else "A refund amount must be positive."

    def list_refunds(self, payment_id: str) -> list[ProcessorRefund]:
        with self.db.read() as session:
            if self._armed(session, ("down",)) is None:
                return self._refunds(session, payment_id)
        self._take_fault(("down",))
        return self.list_refunds(payment_id)

    def create_refund(
        self,
        *,
        payment_id: str,
        amount: int,
        currency: str,
        idempotency_key: str,
        metadata: dict[str, str],
    ) -> ProcessorRefund:
        with self.db.write() as session:  # a fault that applies is used up in this commit
            fault = self._use_fault(
                session, ("down", "decline", "timeout-after-success", "crash-after-success")
            )
            if fault in ("down", "decline"):
                refund = None
            else:
                refund = self._refund_in(session, payment_id, amount, currency,
                                         idempotency_key, metadata)  # fmt: skip
        if fault == "down":
            raise ProcessorUnavailable("processor_unavailable", "The processor is unavailable.")
        if fault == "decline":
            raise RefundDeclined("refund_declined", "The processor declined the refund.")
        assert refund is not None
        if fault == "crash-after-success":
            self._crash()
        if fault == "timeout-after-success":
            raise ProcessorTimeout("processor_timeout", "The processor did not answer in time.")
        return self._to_refund(refund)

    def _refund_in(
        self,
        session: Session,
        payment_id: str,
        amount: int,
        currency: str,
        idempotency_key: str,
        metadata: dict[str, str],
    ) -> SandboxRefund:
        payment = session.scalars(self._locked(session, payment_id)).first()
        if payment is None:
            raise PaymentNotFound("payment_not_found", f"No payment {payment_id} exists.")
        if self.honour_idempotency_keys:
            seen = session.scalars(
                select(SandboxRefund).where(
                    col(SandboxRefund.payment_id) == payment_id,
                    col(SandboxRefund.idempotency_key) == idempotency_key,
                )
            ).first()
            if seen is not None:
                return seen
        if currency.lower() != payment.currency:
            raise RefundDeclined("currency_mismatch", "Refund currency differs from payment.")
        if amount <= 0:
            raise RefundDeclined("invalid_amount", "A refund amount must be positive.")
        refunded = sum(
            r.amount for r in self._refunds(session, payment_id) if r.status == "succeeded"
        )
        if amount > payment.amount - refunded:
            raise RefundDeclined(
                "amount_too_large", "The refund is more than what is left on the payment."
            )
        refund = SandboxRefund(
            id="re_" + secrets.token_hex(12),
            payment_id=payment_id,
            amount=amount,
            currency=payment.currency,
            status="succeeded",
            idempotency_key=idempotency_key,
            meta=dict(metadata),
            created_at=clock.now(),
        )
        session.add(refund)
        session.flush()
        return refund

    def retrieve_refund(self, refund_id: str) -> ProcessorRefund:
        with self.db.read() as session:
            if self._armed(session, ("down",)) is None:
                row = session.get(SandboxRefund, refund_id)
                if row is None:
                    raise RefundNotFound("refund_not_found", f"No refund {refund_id} exists.")
                return self._to_refund(row)
        self._take_fault(("down",))
        return self.retrieve_refund(refund_id)

    def list_refunds_since(
        self, since: datetime, until: datetime | None = None
    ) -> list[ProcessorRefund]:
        with self.db.read() as session:
            if self._armed(session, ("down",)) is None:
                stmt = select(SandboxRefund).where(col(SandboxRefund.created_at) >= since)
                if until is not None:
                    stmt = stmt.where(col(SandboxRefund.created_at) < until)
                rows = session.scalars(stmt.order_by(col(SandboxRefund.created_at))).all()
                return [self._to_refund(r) for r in rows]
        self._take_fault(("down",))
        return self.list_refunds_since(since, until)

    # ------------------------------------------------------------ internals

    @staticmethod
    def _locked(session: Session, payment_id: str) -> Any:
        stmt = select(SandboxPayment).where(col(SandboxPayment.id) == payment_id)
        return stmt.with_for_update() if session.get_bind().dialect.name == "postgresql" else stmt

    def _refunds(self, session: Session, payment_id: str) -> list[ProcessorRefund]:
        rows = session.scalars(
            select(SandboxRefund)
            .where(col(SandboxRefund.payment_id) == payment_id)
            .order_by(col(SandboxRefund.created_at))
        ).all()
        return [self._to_refund(r) for r in rows]

    @staticmethod
    def _to_refund(row: SandboxRefund) -> ProcessorRefund:
        return ProcessorRefund(
            id=row.id,
            payment_id=row.payment_id,
            amount=row.amount,
            currency=row.currency,
            status=row.status,
            metadata={str(k): str(v) for k, v in row.meta.items()},
            created_at=row.created_at,
        )

    def _facts(self, session: Session, payment_id: str) -> PaymentFacts:
        payment = session.get(SandboxPayment, payment_id)
        if payment is None:
            raise PaymentNotFound("payment_not_found", f"No payment {payment_id} exists.")
        since = clock.now() - timedelta(days=365)
        return PaymentFacts(
            id=payment.id,
            amount=payment.amount,
            currency=payment.currency,
            customer_email=payment.email,
            customer_name=payment.name,
            created_at=payment.created_at,
            refunds=tuple(self._refunds(session, payment_id)),
            chargebacks_365d=payment.chargebacks if payment.created_at >= since else 0,
        )

    @staticmethod
    def _armed(session: Session, applies_to: tuple[str, ...]) -> str | None:
        fault = session.get(SandboxFault, 1)
        return fault.mode if fault is not None and fault.mode in applies_to else None

    def _take_fault(self, applies_to: tuple[str, ...]) -> str | None:
        """Consume one use of the current fault if it applies to this call."""
        with self.db.read() as session:
            if self._armed(session, applies_to) is None:
                return None  # the common case costs a read, not a write lock
        with self.db.write() as session:
            mode = self._use_fault(session, applies_to)
        if mode == "down":
            raise ProcessorUnavailable("processor_unavailable", "The processor is unavailable.")
        return mode

    @staticmethod
    def _use_fault(session: Session, applies_to: tuple[str, ...]) -> str | None:
        """One use of the current fault, in the caller's write transaction, if it applies."""
        fault = session.get(SandboxFault, 1)
        if fault is None or fault.mode == "none" or fault.mode not in applies_to:
            return None
        mode = fault.mode
        if fault.remaining is not None:
            fault.remaining -= 1
            if fault.remaining <= 0:
                fault.mode, fault.remaining = "none", None
            session.add(fault)
        return mode
