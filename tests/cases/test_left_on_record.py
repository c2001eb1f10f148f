"""What is still refundable by our own record (the card and the partial-approval cap) agrees
with what the processor's facts say, an unresolved reservation included."""

from __future__ import annotations

from refund_desk.cases.facts import left_on_record, refundable
from refund_desk.runtime import Runtime
from tests.helpers import Harness


def test_a_refund_made_but_unrecorded_is_counted_once(any_runtime: Runtime) -> None:
    desk = Harness(any_runtime)
    desk.publish()
    payment = desk.payment("30.00")
    desk.sandbox.set_fault("timeout-after-success", times=1)
    first = desk.post(desk.request(payment, "20.00")).json()
    assert first["status"] == "executing"  # paid at the processor, our reservation still open
    desk.post(desk.request(payment, "5.00"))  # the intake sees the payment again
    with any_runtime.db.read() as session:
        truth = refundable(session, any_runtime.desk.processor.payment(payment)).left
        assert left_on_record(session, payment) == truth == 1000


def test_refunds_made_elsewhere_count_as_seen(any_runtime: Runtime) -> None:
    desk = Harness(any_runtime)
    desk.publish()
    payment = desk.payment("30.00")
    any_runtime.desk.processor.create_refund(  # not ours: no execution of ours names it
        payment_id=payment, amount=700, currency="usd", idempotency_key="elsewhere", metadata={}
    )
    desk.post(desk.request(payment, "5.00"))
    with any_runtime.db.read() as session:
        truth = refundable(session, any_runtime.desk.processor.payment(payment)).left
        assert left_on_record(session, payment) == truth
