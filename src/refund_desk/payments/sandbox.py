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

and, beside whichever of those plays, `ignore-idempotency-keys`: from then until `none`, a
repeated idempotency key makes a new refund, as a processor that does not honour keys would
(a crash test run from outside then shows exactly-once from our record alone).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeAlias

from sqlalchemy import Connection, bindparam, func, insert, select, update
from sqlmodel import col

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

FAULT_MODES = (
    "none",
    "down",
    "timeout-after-success",
    "decline",
    "crash-after-success",
    "ignore-idempotency-keys",
)
IGNORE_KEYS = "ignore-idempotency-keys"  # not a mode of its own: it stays beside the others
CRASH_EXIT_CODE = 86
_REFUND_FAULTS = ("down", "decline", "timeout-after-success", "crash-after-success")

# ---------------------------------------------------------------- the ledger's statements
#
# Built once, as Core, cheaper than the ORM on every refund's path. The first statement of
# every call carries the fault (`fault_mode`, `fault_remaining`), so a call checks it without a
# statement of its own, unless that statement finds no rows: then `_FAULT` reads it.

_payments = SandboxPayment.__table__  # type: ignore[attr-defined]
_refunds = SandboxRefund.__table__  # type: ignore[attr-defined]
_faults = SandboxFault.__table__  # type: ignore[attr-defined]

_THE_FAULT = _faults.c.id == 1  # one row, written by `set_fault` (the CLI) at any time
_FAULT_COLUMNS = (
    select(_faults.c.mode).where(_THE_FAULT).scalar_subquery().label("fault_mode"),
    select(_faults.c.remaining).where(_THE_FAULT).scalar_subquery().label("fault_remaining"),
    select(_faults.c.ignore_keys).where(_THE_FAULT).scalar_subquery().label("ignore_keys"),
)
# Always one row; empty columns where there is no fault row.
_FAULT = select(*_FAULT_COLUMNS)
# SET from the parameters given: mode and remaining, or ignore_keys.
_SET_FAULT = update(_faults).where(_THE_FAULT)

# A refund's columns under the names `_to_refund` reads.
_REFUND = tuple(
    _refunds.c[name]
    for name in ("id", "payment_id", "amount", "currency", "status", "meta", "created_at")
)
_REFUND_BY_ID = select(*_FAULT_COLUMNS, *_REFUND).where(_refunds.c.id == bindparam("refund_id"))
_REFUNDS_SINCE = (
    select(*_FAULT_COLUMNS, *_REFUND)
    .where(_refunds.c.created_at >= bindparam("since"))
    .order_by(_refunds.c.created_at)
)
_REFUNDS_BETWEEN = _REFUNDS_SINCE.where(_refunds.c.created_at < bindparam("until"))

# A payment and its refunds in one statement: one row per refund, or one with the refund's
# columns empty. The payment's id is read as `payment_id`, which a refund row's is too.
_PAYMENT = (
    select(
        *_FAULT_COLUMNS,
        *(
            _payments.c[name].label(f"payment_{name}")
            for name in ("id", "amount", "currency", "email", "name", "chargebacks", "created_at")
        ),
        *(c for c in _REFUND if c.name != "payment_id"),
    )
    .select_from(_payments.outerjoin(_refunds, _refunds.c.payment_id == _payments.c.id))
    .where(_payments.c.id == bindparam("payment_id"))
    .order_by(_refunds.c.created_at)
)

# The refund's own transaction: the payment locked (FOR UPDATE on PostgreSQL; SQLite's
# BEGIN IMMEDIATE already holds the database), then its refunds read after the lock.
_LOCK_PAYMENT = (
    select(*_FAULT_COLUMNS, _payments.c.amount, _payments.c.currency)
    .where(_payments.c.id == bindparam("payment_id"))
    .with_for_update(of=_payments)
)
_REFUNDS_OF = (
    select(*_REFUND, _refunds.c.idempotency_key)
    .where(_refunds.c.payment_id == bindparam("payment_id"))
    .order_by(_refunds.c.created_at)
)
_INSERT_REFUND = insert(_refunds)

_Row: TypeAlias = Any  # a row of any of the statements above (SQLAlchemy's `Row`)


def _power_cut() -> None:
    os._exit(CRASH_EXIT_CODE)


class SandboxProcessor:
    name = "sandbox"
    lists_every_refund = True
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
        """One payment; its id."""
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
            ledger = session.connection()
            if mode == IGNORE_KEYS:  # beside the fault that plays, until `none`
                fault: dict[str, Any] = {"ignore_keys": True}
            elif mode == "none":
                fault = {"mode": mode, "remaining": None, "ignore_keys": False}
            else:
                fault = {"mode": mode, "remaining": times}
            if ledger.execute(_SET_FAULT, fault).rowcount == 0:
                ledger.execute(insert(_faults), {"id": 1, "mode": "none", **fault})

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
        rows = self._read(_PAYMENT, {"payment_id": payment_id}, faults=_faults)
        if not rows:
            raise PaymentNotFound("payment_not_found", f"No payment {payment_id} exists.")
        payment = rows[0]
        since = clock.now() - timedelta(days=365)
        return PaymentFacts(
            id=payment.payment_id,
            amount=payment.payment_amount,
            currency=payment.payment_currency,
            customer_email=payment.payment_email,
            customer_name=payment.payment_name,
            created_at=payment.payment_created_at,
            refunds=tuple(self._to_refund(row) for row in rows if row.id is not None),
            chargebacks_365d=(
                payment.payment_chargebacks if payment.payment_created_at >= since else 0
            ),
            processor=self.name,
        )

    @staticmethod
    def owns(reference: str) -> bool:
        return reference.startswith(("py_", "re_"))

    def refusal(self, amount: int, currency: str, payment_id: str = "") -> str | None:
        return None if amount > 0 else "A refund amount must be positive."

    def list_refunds(self, payment_id: str) -> list[ProcessorRefund]:
        rows = self._read(_PAYMENT, {"payment_id": payment_id})
        return [self._to_refund(row) for row in rows if row.id is not None]

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
            ledger = session.connection()
            payment = ledger.execute(_LOCK_PAYMENT, {"payment_id": payment_id}).first()
            fault = _use_fault(ledger, _fault_in(ledger, payment), _REFUND_FAULTS)
            if fault in ("down", "decline"):
                refund = None
            elif payment is None:
                raise PaymentNotFound("payment_not_found", f"No payment {payment_id} exists.")
            else:
                honour = self.honour_idempotency_keys and not payment.ignore_keys
                refund = self._refund_in(ledger, payment, payment_id, amount, currency,
                                         idempotency_key, metadata, honour)  # fmt: skip
        if fault == "down":
            raise ProcessorUnavailable("processor_unavailable", "The processor is unavailable.")
        if fault == "decline":
            raise RefundDeclined("refund_declined", "The processor declined the refund.")
        assert refund is not None
        if fault == "crash-after-success":
            self._crash()
        if fault == "timeout-after-success":
            raise ProcessorTimeout("processor_timeout", "The processor did not answer in time.")
        return refund

    def _refund_in(
        self,
        ledger: Connection,
        payment: _Row,
        payment_id: str,
        amount: int,
        currency: str,
        idempotency_key: str,
        metadata: dict[str, str],
        honour_keys: bool,
    ) -> ProcessorRefund:
        """The refund, made on the payment locked in this transaction (or the one its key made)."""
        refunds = ledger.execute(_REFUNDS_OF, {"payment_id": payment_id}).all()
        if honour_keys:
            for seen in refunds:
                if seen.idempotency_key == idempotency_key:
                    return self._to_refund(seen)
        if currency.lower() != payment.currency:
            raise RefundDeclined("currency_mismatch", "Refund currency differs from payment.")
        if amount <= 0:
            raise RefundDeclined("invalid_amount", "A refund amount must be positive.")
        refunded = sum(r.amount for r in refunds if r.status == "succeeded")
        if amount > payment.amount - refunded:
            raise RefundDeclined(
                "amount_too_large", "The refund is more than what is left on the payment."
            )
        refund = ProcessorRefund(
            id="re_" + secrets.token_hex(12),
            payment_id=payment_id,
            amount=amount,
            currency=payment.currency,
            status="succeeded",
            metadata=dict(metadata),
            created_at=clock.now(),
        )
        ledger.execute(
            _INSERT_REFUND,
            {
                "id": refund.id,
                "payment_id": payment_id,
                "amount": amount,
                "currency": refund.currency,
                "status": refund.status,
                "idempotency_key": idempotency_key,
                "meta": dict(metadata),
                "created_at": refund.created_at,
            },
        )
        return refund

    def check(self) -> str:
        return "The sandbox keeps its payments in this database; no money moves."

    def retrieve_refund(self, refund_id: str) -> ProcessorRefund:
        rows = self._read(_REFUND_BY_ID, {"refund_id": refund_id})
        if not rows:
            raise RefundNotFound("refund_not_found", f"No refund {refund_id} exists.")
        return self._to_refund(rows[0])

    def list_refunds_since(
        self, since: datetime, until: datetime | None = None, payments: Iterable[str] = ()
    ) -> list[ProcessorRefund]:
        if until is None:
            rows = self._read(_REFUNDS_SINCE, {"since": since})
        else:
            rows = self._read(_REFUNDS_BETWEEN, {"since": since, "until": until})
        return [self._to_refund(row) for row in rows]

    # ------------------------------------------------------------ internals

    def _read(
        self,
        statement: Any,
        params: dict[str, Any],
        *,
        faults: bool = True,
    ) -> Sequence[_Row]:
        """The rows of one read of the ledger, in a transaction of its own; unless the
        processor is `down`, when the call uses up one of the fault's uses and fails."""
        while True:
            with self.db.look() as ledger:  # its statements need not share a snapshot
                rows = ledger.execute(statement, params).all()
                if not faults:
                    return rows
                if _fault_in(ledger, rows[0] if rows else None).fault_mode != "down":
                    return rows
            with self.db.write() as session:  # a read only sees it; a write takes a use
                ledger = session.connection()
                used = _use_fault(ledger, ledger.execute(_FAULT).one(), ("down",))
            if used == "down":
                raise ProcessorUnavailable("processor_unavailable", "The processor is unavailable.")
            # changed since the read (another process set a fault): read again

    @staticmethod
    def _to_refund(row: _Row | SandboxRefund) -> ProcessorRefund:
        """A refund from a ledger row: one of the statements' rows, or the model's."""
        return ProcessorRefund(
            id=row.id,
            payment_id=row.payment_id,
            amount=row.amount,
            currency=row.currency,
            status=row.status,
            metadata={str(k): str(v) for k, v in row.meta.items()},
            created_at=row.created_at,
        )


def _fault_in(ledger: Connection, first: _Row | None) -> _Row:
    """The fault's columns: carried by the call's first row, or read by themselves."""
    return first if first is not None else ledger.execute(_FAULT).one()


def _use_fault(ledger: Connection, fault: _Row, applies_to: tuple[str, ...]) -> str | None:
    """One use of the fault (a row with `fault_mode`, `fault_remaining`), in the caller's write
    transaction, if it applies to the call; the mode used. The last use sets it to `none`."""
    if fault.fault_mode not in applies_to:
        return None
    mode: str = fault.fault_mode
    if fault.fault_remaining is not None:
        left = fault.fault_remaining - 1
        used_up = {"mode": "none", "remaining": None}
        ledger.execute(_SET_FAULT, {"mode": mode, "remaining": left} if left > 0 else used_up)
    return mode
