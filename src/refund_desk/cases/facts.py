"""Assemble the policy context from the system of record, our own ledger and the advice.
Money facts are integer minor units; the policy engine converts them for its expressions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, func, or_, select
from sqlmodel import Session, col

from refund_desk import clock
from refund_desk.cases.lifecycle import FINAL, Status
from refund_desk.cases.ports import PaymentFacts
from refund_desk.crypto import normalize_email
from refund_desk.storage.models import Case, Execution, Payment

OPEN_EXECUTION = "reserved"


# Statements of every case's decision, built once (SQLAlchemy reuses their compiled form).
_OUR_MONEY_OUT = (  # reserved (in flight or not yet sent) or succeeded
    select(col(Execution.id), col(Execution.amount)).where(
        col(Execution.payment_id) == bindparam("payment_id"),
        or_(col(Execution.status) == OPEN_EXECUTION, col(Execution.status) == "succeeded"),
    )
)
_HISTORY = (  # one pass over the customer's cases
    select(
        func.count().filter(
            col(Case.status) == Status.refunded, col(Case.created_at) >= bindparam("since")
        ),
        func.count().filter(
            # not final; each status its own comparison, so the SQL is the same at every call
            *(col(Case.status) != str(s) for s in sorted(FINAL)),
            col(Case.id) != bindparam("exclude"),
        ),
    ).where(col(Case.email_hash) == bindparam("email_hash"))
)


@dataclass(frozen=True)
class Refundable:
    captured: int
    refunded: int  # the processor's refunds not ours, plus our own executions' money out
    reserved_ids: frozenset[str]  # our executions counted (reserved or succeeded)

    @property
    def left(self) -> int:
        return max(0, self.captured - self.refunded)


def refundable(session: Session, payment: PaymentFacts, *, unseen: bool = False) -> Refundable:
    """captured - the processor's refunds that are not ours - every execution of ours that
    moved money or may (succeeded, or reserved).

    Called under the payment's lock, so an execution of another case made after `payment` was
    read counts, and a refund of ours the processor lists is counted once, from our record.
    `unseen`: the payment's row was inserted by this transaction; no execution refers to it.
    """
    if unseen:
        return Refundable(
            payment.amount, payment.refunded_amount(excluding=frozenset()), frozenset()
        )
    # a reservation made in this transaction counts
    session.flush()
    ours = session.connection().execute(_OUR_MONEY_OUT, {"payment_id": payment.id}).all()
    ids = frozenset(r[0] for r in ours)
    out = sum(r[1] for r in ours)
    return Refundable(payment.amount, payment.refunded_amount(excluding=ids) + out, ids)


def left_on_record(session: Session, payment_id: str) -> int | None:
    """What is still refundable by our own record, without asking the processor: it overstates
    only by refunds made elsewhere since the payment was last seen; the executor re-checks."""
    row = session.get(Payment, payment_id)
    if row is None:
        return None
    session.flush()
    ours = session.connection().execute(_OUR_MONEY_OUT, {"payment_id": payment_id}).all()
    return max(0, row.amount - row.refunded - sum(r[1] for r in ours))


def customer_verified(email: str, payment: PaymentFacts) -> bool:
    return bool(payment.customer_email) and normalize_email(email) == normalize_email(
        payment.customer_email or ""
    )


def customer_history(
    session: Session, *, email_hash: str, now: datetime, exclude: str
) -> dict[str, int]:
    # the customer's other cases as this transaction left them (`exclude`'s change waits)
    session.flush()
    whose = {"email_hash": email_hash, "since": now - timedelta(days=90), "exclude": exclude}
    refunds_90d, open_cases = session.connection().execute(_HISTORY, whose).one()
    return {"refunds_90d": int(refunds_90d or 0), "open_cases": int(open_cases or 0)}


def policy_context(
    session: Session, case: Case, payment: PaymentFacts, money: Refundable, now: datetime
) -> dict[str, Any]:
    """What the policy evaluates for `case`, the customer's other cases read in `session`."""
    history = customer_history(session, email_hash=case.email_hash, now=now, exclude=case.id)
    advice = case.advice or {}
    return {
        "request": {
            "amount": case.amount,
            "currency": case.currency,
            "reason": case.reason,
            "source": case.source,
            "possible_duplicate": case.possible_duplicate,
            "amount_source": case.amount_source,
            "reason_source": case.reason_source,
        },
        "order": {
            "amount": money.captured,
            "refunded": money.refunded,
            "refundable": money.left,
            "currency": payment.currency.upper(),
            "age_days": max(0, (now - payment.created_at).days),
        },
        "customer": {
            "verified": case.customer_verified,
            "chargebacks_365d": payment.chargebacks_365d,
            "refunds_90d": history["refunds_90d"],
            "open_cases": history["open_cases"],
        },
        "advisor": {
            "confidence": advice.get("confidence"),
            "injection_suspected": bool(advice.get("injection_suspected", False)),
        },
        "evidence": {  # on the case row: files and links, checked once a person vouched
            "count": len(case.evidence or []),
            "checked": sum(
                1 for i in case.evidence or [] if i.get("provenance") == "verified_document"
            ),
        },
    }


DUPLICATE_WINDOW = timedelta(hours=24)


def duplicate_of(
    session: Session, payment_id: str, amount: int, *, exclude: str | None = None
) -> str | None:
    """An open case for the payment (other than `exclude`), or a refund of the same amount
    on it within 24 hours: the case a new request may repeat."""
    open_case = session.scalar(
        select(col(Case.id))
        .where(
            col(Case.payment_id) == payment_id,
            col(Case.status).not_in([str(s) for s in FINAL]),
            col(Case.id) != (exclude or ""),
        )
        .order_by(col(Case.created_at))
        .limit(1)
    )
    if open_case:
        return str(open_case)
    since = clock.now() - DUPLICATE_WINDOW
    recent = session.scalar(
        select(col(Execution.case_id))
        .where(
            col(Execution.payment_id) == payment_id,
            col(Execution.amount) == amount,
            col(Execution.status).in_(["reserved", "succeeded"]),
            col(Execution.created_at) >= since,
            col(Execution.case_id) != (exclude or ""),
        )
        .limit(1)
    )
    return str(recent) if recent else None
