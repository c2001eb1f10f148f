"""The real SDK's request shapes against localstripe: happy paths and exactly-once on crash.

localstripe ignores idempotency keys, so one refund after a crash or a timeout proves that the
executor looked the refund up before it tried again.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from refund_desk.cases.ports import AmountRefused, ProcessorRefund, ProcessorTimeout
from refund_desk.payments.stripe_api import StripeProcessor
from refund_desk.storage.models import Execution
from refund_desk.web.metrics import TimedProcessor
from tests.conftest import SimulatedCrash
from tests.payments.conftest import (
    LocalStripe,
    StripeHarness,
    fast_processor,
    stripe_runtime,
)


def test_auto_approved_case_makes_exactly_one_refund_at_localstripe(
    on_localstripe: StripeHarness, localstripe: LocalStripe
) -> None:
    processor = on_localstripe.runtime.desk.processor
    assert isinstance(processor, TimedProcessor) and isinstance(processor.inner, StripeProcessor)
    payment = localstripe.pay(3000)
    body = on_localstripe.post(on_localstripe.request(payment, "20.00")).json()
    assert body["status"] == "refunded", body
    [refund] = localstripe.refunds(payment)
    assert refund["amount"] == 2000 and refund["currency"] == "usd"
    assert refund["metadata"]["case_id"] == body["id"]
    with on_localstripe.runtime.db.read() as session:
        [execution] = session.scalars(select(Execution)).all()
    assert refund["metadata"]["execution_id"] == execution.id
    assert execution.processor_refund_id == refund["id"]
    on_localstripe.sweep()
    assert len(localstripe.refunds(payment)) == 1


class AfterCreate:
    """The real processor, whose first refund call succeeds and then 'fails' on our side."""

    def __init__(self, real: StripeProcessor, failure: BaseException) -> None:
        self.real, self.failure = real, failure
        self.name, self.timeout_seconds = real.name, real.timeout_seconds
        self.created = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def create_refund(self, **kwargs: object) -> ProcessorRefund:
        refund = self.real.create_refund(**kwargs)  # type: ignore[arg-type]
        self.created += 1
        if self.created == 1:
            raise self.failure
        return refund


@pytest.mark.parametrize(
    "failure",
    [
        ProcessorTimeout("processor_timeout", "Stripe did not answer in time."),
        SimulatedCrash(),
    ],
    ids=["timeout", "crash"],
)
def test_failure_between_refund_call_and_commit_still_one_refund(
    any_db_url: str, localstripe: LocalStripe, failure: BaseException
) -> None:
    processor = AfterCreate(fast_processor(localstripe.url, timeout=5.0), failure)
    runtime = stripe_runtime(any_db_url, localstripe.url, processor)  # type: ignore[arg-type]
    desk = StripeHarness(runtime)
    desk.publish()
    payment = localstripe.pay(3000)
    if isinstance(failure, SimulatedCrash):
        with pytest.raises(SimulatedCrash):
            desk.post(desk.request(payment, "20.00"))
    else:
        assert desk.post(desk.request(payment, "20.00")).json()["status"] == "executing"
    assert len(localstripe.refunds(payment)) == 1  # the refund exists; we do not know it yet
    desk.sweep(seconds_ahead=3600)  # after the lease of the crashed run expired
    [refund] = localstripe.refunds(payment)
    case_id = refund["metadata"]["case_id"]
    assert desk.get(case_id)["status"] == "refunded"
    assert processor.created == 1, "the executor looked the refund up instead of re-creating it"
    runtime.db.dispose()


@pytest.mark.parametrize(
    ("currency", "paid", "refund"),
    [("jpy", 5000, 1234), ("kwd", 12340, 5120), ("bhd", 1000, 990), ("usd", 2599, 1)],
)
def test_amounts_round_trip_exactly(
    localstripe: LocalStripe, currency: str, paid: int, refund: int
) -> None:
    processor = fast_processor(localstripe.url, timeout=5.0)
    payment = localstripe.pay(paid, currency)
    facts = processor.payment(payment)
    assert (facts.amount, facts.currency) == (paid, currency)  # same units at Stripe and ISO
    made = processor.create_refund(
        payment_id=payment,
        amount=refund,
        currency=currency,
        idempotency_key=f"k-{payment}",
        metadata={"case_id": "c", "execution_id": "e"},
    )
    assert made.amount == refund
    [raw] = localstripe.refunds(payment)
    assert raw["amount"] == refund
    assert processor.payment(payment).refunded_amount() == refund


def test_kwd_amount_stripe_would_refuse_is_refused_before_sending(
    localstripe: LocalStripe,
) -> None:
    processor = fast_processor(localstripe.url)
    payment = localstripe.pay(12340, "kwd")
    with pytest.raises(AmountRefused) as refused:
        processor.create_refund(
            payment_id=payment,
            amount=5125,
            currency="kwd",
            idempotency_key="k",
            metadata={},
        )
    assert refused.value.code == "amount_not_accepted"
    assert "5.125 KWD" in refused.value.message and "5.120 KWD" in refused.value.message
    assert localstripe.refunds(payment) == []


def test_listing_refunds_since_covers_every_payment(localstripe: LocalStripe) -> None:
    processor = fast_processor(localstripe.url)
    first, second = localstripe.pay(1000), localstripe.pay(2000)
    ids = {localstripe.refund_directly(first, 100), localstripe.refund_directly(second, 200)}
    refunds = processor.list_refunds_since(
        processor.payment(first).created_at - timedelta(seconds=1)
    )
    assert ids <= {r.id for r in refunds}
