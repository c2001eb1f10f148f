"""The hard cases against a fake that keeps Stripe's documented rules, through the real SDK."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select

from refund_desk.cases.ports import (
    PaymentNotFound,
    ProcessorError,
    ProcessorUnavailable,
    RefundDeclined,
    RefundNotFound,
)
from refund_desk.payments import stripe_api
from refund_desk.payments.stripe_api import StripeProcessor
from refund_desk.storage.models import AuditRecord, Execution
from tests.fakes.stripe_fake import FakeStripeServer
from tests.helpers import ACME
from tests.payments.conftest import StripeHarness, fast_processor


@pytest.fixture()
def processor(fake_stripe: FakeStripeServer) -> StripeProcessor:
    return fast_processor(fake_stripe.url)


def _refund(processor: StripeProcessor, payment: str, amount: int, key: str = "k1") -> str:
    return processor.create_refund(
        payment_id=payment,
        amount=amount,
        currency="usd",
        idempotency_key=key,
        metadata={"case_id": "c1", "execution_id": "e1"},
    ).id


def test_same_key_same_parameters_answers_the_same_refund(
    fake_stripe: FakeStripeServer, processor: StripeProcessor
) -> None:
    payment = fake_stripe.fake.pay(3000)
    assert _refund(processor, payment, 1000) == _refund(processor, payment, 1000)
    assert len(fake_stripe.fake.refunds) == 1


def test_same_key_other_parameters_is_a_permanent_error(
    fake_stripe: FakeStripeServer, processor: StripeProcessor
) -> None:
    payment = fake_stripe.fake.pay(3000)
    _refund(processor, payment, 1000)
    with pytest.raises(ProcessorError) as error:
        _refund(processor, payment, 1500)
    assert error.value.code == "idempotency_conflict" and not error.value.transient


def test_concurrent_use_of_one_key_is_transient(
    fake_stripe: FakeStripeServer, processor: StripeProcessor
) -> None:
    payment = fake_stripe.fake.pay(3000)
    fake_stripe.fake.knobs.stall_refund_seconds = 0.6
    first = threading.Thread(target=_refund, args=(processor, payment, 1000))
    first.start()
    while not fake_stripe.fake.refunds:
        threading.Event().wait(0.01)
    with pytest.raises(ProcessorUnavailable) as busy:
        _refund(processor, payment, 1000)
    first.join()
    assert busy.value.code == "idempotency_key_in_use" and busy.value.transient
    assert len(fake_stripe.fake.refunds) == 1


def test_refund_above_what_is_left_is_declined(
    fake_stripe: FakeStripeServer, processor: StripeProcessor
) -> None:
    payment = fake_stripe.fake.pay(3000)
    _refund(processor, payment, 2500, key="a")
    with pytest.raises(RefundDeclined) as declined:
        _refund(processor, payment, 1000, key="b")
    assert declined.value.code == "amount_too_large"


def test_missing_objects_are_named(processor: StripeProcessor) -> None:
    with pytest.raises(PaymentNotFound):
        processor.payment("pi_missing")
    with pytest.raises(PaymentNotFound):
        processor.payment("order-17")
    with pytest.raises(RefundNotFound):
        processor.retrieve_refund("re_missing")


def test_unreachable_stripe_is_an_unknown_outcome() -> None:
    processor = fast_processor("http://127.0.0.1:9", timeout=0.5)
    with pytest.raises(ProcessorError) as error:
        processor.payment("pi_x")
    assert error.value.code == "processor_timeout" and error.value.transient


def test_sdk_never_retries_on_its_own(fake_stripe: FakeStripeServer) -> None:
    processor = fast_processor(fake_stripe.url)
    payment = fake_stripe.fake.pay(3000)
    fake_stripe.fake.knobs.error_after_refund = 500
    with pytest.raises(ProcessorError) as error:
        _refund(processor, payment, 1000, key="x")
    assert error.value.transient
    posts = [r for r in fake_stripe.fake.requests if r == ("POST", "/v1/refunds")]
    assert len(posts) == 1


def test_listing_since_pages_through_everything(
    fake_stripe: FakeStripeServer, processor: StripeProcessor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stripe_api, "PAGE", 2)
    payment = fake_stripe.fake.pay(10_000)
    made = {_refund(processor, payment, 100, key=f"k{i}") for i in range(5)}
    since = processor.payment(payment).created_at
    assert {r.id for r in processor.list_refunds_since(since)} == made


# ---------------------------------------------------------------- the executor on the fake


@pytest.mark.parametrize("fault", ["stall", "server_error"])
def test_unknown_outcome_after_commit_ends_with_one_refund(
    on_fake: StripeHarness, fake_stripe: FakeStripeServer, fault: str
) -> None:
    payment = fake_stripe.fake.pay(3000)
    if fault == "stall":  # the refund is made; the SDK times out waiting for the answer
        fake_stripe.fake.knobs.stall_refund_seconds = 1.5
    else:
        fake_stripe.fake.knobs.error_after_refund = 500
    body = on_fake.post(on_fake.request(payment, "20.00")).json()
    assert body["status"] == "executing"
    assert len(fake_stripe.fake.refunds) == 1
    on_fake.sweep()
    assert on_fake.get(body["id"])["status"] == "refunded"
    assert len(fake_stripe.fake.refunds) == 1
    posts = [r for r in fake_stripe.fake.requests if r == ("POST", "/v1/refunds")]
    assert len(posts) == 1, "the retry looked the refund up instead of sending it again"


def test_pending_refund_is_tracked_until_final(
    on_fake: StripeHarness, fake_stripe: FakeStripeServer
) -> None:
    payment = fake_stripe.fake.pay(3000)
    fake_stripe.fake.knobs.next_refund_status = "pending"
    body = on_fake.post(on_fake.request(payment, "20.00")).json()
    assert body["status"] == "executing"
    for _ in range(3):
        on_fake.sweep(batches=1)
    with on_fake.runtime.db.read() as session:
        pending = session.scalars(
            select(AuditRecord).where(AuditRecord.action == "execution.pending")
        ).all()
        [execution] = session.scalars(select(Execution)).all()
    assert len(pending) == 1, "a pending refund is on the record once, not once per poll"
    assert execution.processor_status == "pending" and execution.status == "reserved"
    fake_stripe.fake.set_refund_status(execution.processor_refund_id or "", "succeeded")
    on_fake.sweep()
    assert on_fake.get(body["id"])["status"] == "refunded"


def test_kwd_amount_stripe_would_refuse_is_refused_at_intake_before_any_call(
    on_fake: StripeHarness, fake_stripe: FakeStripeServer
) -> None:
    on_fake.publish(ACME.read_text().replace("currency: USD", "currency: KWD"))
    payment = fake_stripe.fake.pay(12_340, "kwd")
    before = on_fake.counts()
    response = on_fake.post(on_fake.request(payment, "5.125", currency="KWD"))
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "amount_not_accepted"
    assert "5.125 KWD is not accepted" in error["fields"]["amount"]
    assert on_fake.counts() == before
    assert ("POST", "/v1/refunds") not in fake_stripe.fake.requests
    assert fake_stripe.fake.refunds == {}


def test_with_stripe_and_job_processes_intake_is_not_gated_by_default(
    on_fake: StripeHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A capture asks Stripe about the payment over the network and mostly waits: a default
    # limit of one or two captures at a time would make intake as slow as Stripe's answers.
    from refund_desk.web.app import create_app

    monkeypatch.setattr(on_fake.runtime.settings, "job_processes", 1)
    assert create_app(on_fake.runtime, scheduler=False).state.intake_gate.limit is None
    monkeypatch.setattr(on_fake.runtime.settings, "intake_concurrency", 3)
    assert create_app(on_fake.runtime, scheduler=False).state.intake_gate.limit == 3
