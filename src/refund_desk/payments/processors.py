"""Several processors behind the one port, for a merchant whose customers pay with more than one.

A payment's id names its processor by its shape (`pi_…` and `ch_…` Stripe, upper-case letters
and digits PayPal, `py_…` the sandbox), and so does a refund's; each call goes to the one that
owns the id. Nothing here decides anything: the executor, the webhooks and reconciliation keep
working on one `Processor`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from refund_desk.cases.ports import (
    PaymentFacts,
    PaymentNotFound,
    Processor,
    ProcessorRefund,
    RefundNotFound,
)


class Processors:
    def __init__(self, members: Sequence[Processor]) -> None:
        self.members = tuple(members)
        self.name = ",".join(m.name for m in self.members)
        self.timeout_seconds = max(m.timeout_seconds for m in self.members)
        self.lists_every_refund = all(m.lists_every_refund for m in self.members)

    def owner(self, reference: str) -> Processor | None:
        return next((m for m in self.members if m.owns(reference)), None)

    def owns(self, reference: str) -> bool:
        return self.owner(reference) is not None

    def _of_payment(self, payment_id: str) -> Processor:
        member = self.owner(payment_id)
        if member is None:
            raise PaymentNotFound(
                "payment_not_found",
                f"{payment_id} is not a payment id of {' or '.join(self.name.split(','))}.",
            )
        return member

    def payment(self, payment_id: str) -> PaymentFacts:
        return self._of_payment(payment_id).payment(payment_id)

    def list_refunds(self, payment_id: str) -> list[ProcessorRefund]:
        return self._of_payment(payment_id).list_refunds(payment_id)

    def create_refund(
        self,
        *,
        payment_id: str,
        amount: int,
        currency: str,
        idempotency_key: str,
        metadata: dict[str, str],
    ) -> ProcessorRefund:
        return self._of_payment(payment_id).create_refund(
            payment_id=payment_id,
            amount=amount,
            currency=currency,
            idempotency_key=idempotency_key,
            metadata=metadata,
        )

    def retrieve_refund(self, refund_id: str) -> ProcessorRefund:
        member = self.owner(refund_id)
        if member is None:
            raise RefundNotFound("refund_not_found", f"{refund_id} is no processor's refund id.")
        return member.retrieve_refund(refund_id)

    def refusal(self, amount: int, currency: str, payment_id: str = "") -> str | None:
        member = self.owner(payment_id)
        return member.refusal(amount, currency, payment_id) if member else None

    def check(self) -> str:
        return " ".join(m.check() for m in self.members)

    def list_refunds_since(
        self, since: datetime, until: datetime | None = None, payments: Iterable[str] = ()
    ) -> list[ProcessorRefund]:
        named = list(payments)
        return [
            refund
            for member in self.members
            for refund in member.list_refunds_since(
                since, until, [p for p in named if member.owns(p)]
            )
        ]
