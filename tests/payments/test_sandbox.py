"""The sandbox processor's own contract: its ledger, its faults and their uses, idempotency keys."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import delete

from refund_desk import clock
from refund_desk.cases.ports import (
    PaymentNotFound,
    ProcessorTimeout,
    ProcessorUnavailable,
    RefundDeclined,
    RefundNotFound,
)
from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.storage.db import Database
from refund_desk.storage.models import SandboxFault
from tests.conftest import SimulatedCrash, _raise_crash


@pytest.fixture()
def sandbox(any_db_url: str) -> Iterator[SandboxProcessor]:
    db = Database.from_url(any_db_url)
    yield SandboxProcessor(db, crash=_raise_crash)
    db.dispose()


def _refund(sandbox: SandboxProcessor, payment: str, amount: int, key: str = "k1") -> str:
    made = sandbox.create_refund(
        payment_id=payment,
        amount=amount,
        currency="USD",
        idempotency_key=key,
        metadata={"execution_id": key},
    )
    return made.id


def test_a_payment_and_its_refunds(sandbox: SandboxProcessor) -> None:
    created = clock.now() - timedelta(days=3)
    payment = sandbox.create_payment(
        amount=3000, currency="USD", email="a@example.com", name="A", chargebacks=2,
        created_at=created,
    )  # fmt: skip
    first = _refund(sandbox, payment, 1000, "k1")
    with clock.travel(timedelta(seconds=1)):
        second = _refund(sandbox, payment, 500, "k2")
    facts = sandbox.payment(payment)
    assert (facts.id, facts.amount, facts.currency) == (payment, 3000, "usd")
    assert (facts.customer_email, facts.customer_name) == ("a@example.com", "A")
    assert facts.created_at == created and facts.chargebacks_365d == 2
    assert [r.id for r in facts.refunds] == [first, second]  # oldest first
    assert facts.refunded_amount() == 1500
    [one, two] = sandbox.list_refunds(payment)
    assert (one.id, one.payment_id, one.amount, one.currency) == (first, payment, 1000, "usd")
    assert (one.status, one.metadata) == ("succeeded", {"execution_id": "k1"})
    assert sandbox.retrieve_refund(second) == two
    assert sandbox.show_payment(payment)["refunded"] == 1500


def test_old_chargebacks_and_unknown_ids(sandbox: SandboxProcessor) -> None:
    old = sandbox.create_payment(
        amount=100, currency="usd", email="b@example.com", chargebacks=3,
        created_at=clock.now() - timedelta(days=400),
    )  # fmt: skip
    assert sandbox.payment(old).chargebacks_365d == 0
    assert sandbox.payment(old).refunds == ()
    assert sandbox.list_refunds(old) == []
    assert sandbox.list_refunds("py_missing") == []
    with pytest.raises(PaymentNotFound):
        sandbox.payment("py_missing")
    with pytest.raises(RefundNotFound):
        sandbox.retrieve_refund("re_missing")
    with pytest.raises(PaymentNotFound):
        _refund(sandbox, "py_missing", 10)


def test_refunds_the_ledger_refuses(sandbox: SandboxProcessor) -> None:
    payment = sandbox.create_payment(amount=1000, currency="usd", email="c@example.com")
    _refund(sandbox, payment, 600, "k1")
    codes = []
    for amount, currency in ((500, "usd"), (0, "usd"), (100, "eur")):
        with pytest.raises(RefundDeclined) as declined:
            sandbox.create_refund(payment_id=payment, amount=amount, currency=currency,
                                  idempotency_key="k2", metadata={})  # fmt: skip
        codes.append(declined.value.code)
    assert codes == ["amount_too_large", "invalid_amount", "currency_mismatch"]
    _refund(sandbox, payment, 400, "k2")  # exactly what is left
    assert sandbox.payment(payment).refunded_amount() == 1000


def test_idempotency_keys_honoured_or_not(sandbox: SandboxProcessor) -> None:
    payment = sandbox.create_payment(amount=1000, currency="usd", email="d@example.com")
    first = _refund(sandbox, payment, 300, "same")
    assert _refund(sandbox, payment, 300, "same") == first
    sandbox.honour_idempotency_keys = False  # like localstripe
    assert _refund(sandbox, payment, 300, "same") != first
    assert len(sandbox.list_refunds(payment)) == 2


def test_down_fails_every_call_for_its_uses(sandbox: SandboxProcessor) -> None:
    payment = sandbox.create_payment(amount=1000, currency="usd", email="e@example.com")
    refund = _refund(sandbox, payment, 100)
    sandbox.set_fault("down", times=4)
    for call in (
        lambda: sandbox.payment(payment),
        lambda: sandbox.list_refunds(payment),
        lambda: sandbox.retrieve_refund("re_missing"),  # down before "not found"
        lambda: _refund(sandbox, payment, 100, "k2"),
    ):
        with pytest.raises(ProcessorUnavailable):
            call()
    assert sandbox.show_payment(payment)["refunded"] == 100  # the admin view ignores faults
    assert sandbox.retrieve_refund(refund).amount == 100  # the four uses are gone
    sandbox.set_fault("down")  # until changed
    for _ in range(3):
        with pytest.raises(ProcessorUnavailable):
            sandbox.list_refunds_since(clock.now() - timedelta(days=1))
    sandbox.set_fault("none")
    assert [r.id for r in sandbox.list_refunds_since(clock.now() - timedelta(days=1))] == [refund]


def test_refund_faults_leave_reads_alone(sandbox: SandboxProcessor) -> None:
    payment = sandbox.create_payment(amount=1000, currency="usd", email="f@example.com")
    sandbox.set_fault("decline", times=1)
    assert sandbox.payment(payment).refunds == ()  # reads do not use it up
    with pytest.raises(RefundDeclined) as declined:
        _refund(sandbox, payment, 100)
    assert declined.value.code == "refund_declined"
    assert sandbox.list_refunds(payment) == []
    assert len(sandbox.list_refunds(payment)) == 0
    _refund(sandbox, payment, 100)  # used up: the next one goes through


def test_after_success_faults_record_the_refund(sandbox: SandboxProcessor) -> None:
    payment = sandbox.create_payment(amount=1000, currency="usd", email="g@example.com")
    sandbox.set_fault("timeout-after-success", times=2)
    with pytest.raises(RefundDeclined):  # refused by the ledger: the fault is not used
        _refund(sandbox, payment, 5000, "big")
    with pytest.raises(ProcessorTimeout):
        _refund(sandbox, payment, 100, "k1")
    with pytest.raises(ProcessorTimeout):  # the same key: the first refund, and a timeout
        _refund(sandbox, payment, 100, "k1")
    assert len(sandbox.list_refunds(payment)) == 1
    sandbox.set_fault("crash-after-success", times=1)
    with pytest.raises(SimulatedCrash):
        _refund(sandbox, payment, 200, "k2")
    assert [r.amount for r in sandbox.list_refunds(payment)] == [100, 200]
    _refund(sandbox, payment, 300, "k3")
    assert sandbox.payment(payment).refunded_amount() == 600


def test_a_fault_is_set_without_its_row(sandbox: SandboxProcessor) -> None:
    payment = sandbox.create_payment(amount=1000, currency="usd", email="h@example.com")
    with sandbox.db.write() as session:
        session.execute(delete(SandboxFault))
    assert sandbox.payment(payment).amount == 1000  # no row: no fault
    _refund(sandbox, payment, 100)
    sandbox.set_fault("down", times=1)
    with pytest.raises(ProcessorUnavailable):
        sandbox.payment(payment)
    assert sandbox.payment(payment).refunded_amount() == 100
