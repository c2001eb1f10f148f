"""Ports: the small protocols that `cases` drives and adapters implement.

The workflow core never imports a vendor SDK. The payment processor (sandbox, Stripe) and the
advisor (offline, OpenAI-compatible) plug in here; their errors are translated into the
`ProcessorError` family at the adapter, so the core reasons about *kinds* of failure:

    ProcessorError              code + sentence; `transient` says whether a retry may help
    ├── ProcessorUnavailable    transient: nothing happened, try again later
    ├── ProcessorTimeout        transient, outcome unknown: look up before trying again
    ├── RefundDeclined          permanent: the processor said no
    ├── PaymentNotFound         permanent: no such payment at the processor
    └── RefundNotFound          permanent: no such refund at the processor
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from refund_desk.policy.context import REASONS as POLICY_REASONS


class Provenance(StrEnum):
    """Where a consequential fact came from."""

    customer_input = "customer_input"
    system_of_record = "system_of_record"
    verified_document = "verified_document"
    third_party = "third_party"
    model_inference = "model_inference"
    human_entry = "human_entry"


@dataclass(frozen=True)
class ProcessorRefund:
    id: str
    payment_id: str
    amount: int  # minor units
    currency: str  # lower-case ISO 4217, as processors spell it
    status: str  # succeeded | pending | requires_action | failed | canceled
    metadata: dict[str, str] = field(default_factory=dict)
    created_at: datetime | None = None


@dataclass(frozen=True)
class PaymentFacts:
    """What the system of record says about a payment right now."""

    id: str
    amount: int  # captured, minor units
    currency: str  # lower-case
    customer_email: str | None
    customer_name: str | None
    created_at: datetime
    refunds: tuple[ProcessorRefund, ...] = ()
    chargebacks_365d: int | None = None  # None: the processor cannot tell
    processor: str = ""  # the name of the processor that holds it

    def refunded_amount(self, *, excluding: frozenset[str] = frozenset()) -> int:
        """Money already refunded or on its way, leaving out refunds of the given executions."""
        return sum(
            r.amount
            for r in self.refunds
            if r.status not in ("failed", "canceled")
            and r.metadata.get("execution_id") not in excluding
        )


class ProcessorError(Exception):
    transient = False

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ProcessorUnavailable(ProcessorError):
    transient = True


class ProcessorTimeout(ProcessorError):
    transient = True


class RefundDeclined(ProcessorError):
    pass


class AmountRefused(RefundDeclined):
    """The processor would refuse this amount or currency; nothing was sent."""

    def __init__(self, message: str) -> None:
        super().__init__("amount_not_accepted", message)


class PaymentNotFound(ProcessorError):
    pass


class RefundNotFound(ProcessorError):
    pass


class Processor(Protocol):
    name: str
    timeout_seconds: float
    # False where the processor cannot list refunds across payments (PayPal): reconciliation
    # then names the payments it knows.
    lists_every_refund: bool

    def owns(self, reference: str) -> bool:
        """Whether a payment or refund id has this processor's shape."""

    def payment(self, payment_id: str) -> PaymentFacts: ...

    def list_refunds(self, payment_id: str) -> list[ProcessorRefund]: ...

    def create_refund(
        self,
        *,
        payment_id: str,
        amount: int,
        currency: str,
        idempotency_key: str,
        metadata: dict[str, str],
    ) -> ProcessorRefund: ...

    def retrieve_refund(self, refund_id: str) -> ProcessorRefund: ...

    def refusal(self, amount: int, currency: str, payment_id: str = "") -> str | None:
        """Why the processor would refuse a refund of this amount, before asking it; or None."""

    def check(self) -> str:
        """Whether the processor answers with our credentials: a sentence, or `ProcessorError`."""

    def list_refunds_since(
        self, since: datetime, until: datetime | None = None, payments: Iterable[str] = ()
    ) -> list[ProcessorRefund]:
        """Every refund the processor holds created in [since, until): for any payment where
        the processor can list them all, else for the `payments` named (ours with it)."""


TITLES = {"sandbox": "Sandbox", "stripe": "Stripe", "paypal": "PayPal"}


def processor_title(name: str | None) -> str:
    """A processor's name as people write it ("PayPal")."""
    return TITLES.get(name or "", name or "")


REASONS = POLICY_REASONS  # one list: the reasons the policy can speak of


INTENTS = ("refund", "policy_question")
"""`refund`: the customer asks for money; `policy_question`: they ask about the policy (tier 1)."""


@dataclass(frozen=True)
class PolicyText:
    """A published rule as an advisor may see it: the merchant's own words, no customer data."""

    rule: str
    say: str
    when: str = ""


@dataclass(frozen=True)
class AdviceRequest:
    """What the advisor may see. Text is redacted by the advisor before it leaves the process."""

    message: str
    currency: str | None = None
    known_names: tuple[str, ...] = ()  # names known from the payment: masked before any model
    known_emails: tuple[str, ...] = ()
    policy: tuple[PolicyText, ...] = ()  # the pinned policy's rules that have a `say`


@dataclass(frozen=True)
class Advice:
    """The advisor's output. Every field here has provenance `model_inference`."""

    reason: str  # one of REASONS
    confidence: float  # 0..1, for the classification
    order_ref: str | None = None  # a payment/order id found in the text
    amount_minor: int | None = None  # an amount found in the text, in `currency` minor units
    currency: str | None = None
    summary: str = ""
    injection_suspected: bool = False
    provider: str = "offline"
    tokens_used: int = 0
    intent: str = "refund"  # one of INTENTS
    cited_rules: tuple[str, ...] = ()  # for a policy question: the rule ids that answer it
    model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # the model failed with this error code and the offline advisor answered instead
    fallback: str | None = None
    fallback_format_error: bool = False  # the failed model did answer, outside the format
    language: str | None = None  # ISO 639-1, as the offline advisor detected it
    language_learned: bool = True  # False: a language the offline advisor has not learned


class AdvisorError(Exception):
    """The advisor gave no usable advice; `format_error` says an answer came but did not parse."""

    def __init__(
        self, code: str, message: str, *, format_error: bool = False, tokens_used: int = 0
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.format_error = format_error
        self.tokens_used = tokens_used


class Advisor(Protocol):
    name: str

    def advise(self, request: AdviceRequest) -> Advice: ...
