"""`POST /webhooks/stripe`: signed, idempotent on event id, re-fetching the refund from Stripe.

One fixture file per Stripe event (tests/payments/fixtures/); the ids are filled in per test.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from refund_desk.storage.models import AuditRecord, Execution, Job, ProcessorEvent
from tests.fakes.stripe_fake import FakeStripeServer, sign
from tests.payments.conftest import WEBHOOK_SECRET, StripeHarness

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str, **ids: str) -> bytes:
    text = (FIXTURES / f"{name}.json").read_text()
    ids.setdefault("event", f"evt_{time.monotonic_ns()}")
    for key, value in ids.items():
        text = text.replace(f"__{key.upper()}__", value)
    return text.encode()


def signed(body: bytes, *, secret: str = WEBHOOK_SECRET, age: int = 0) -> dict[str, str]:
    return {
        "Stripe-Signature": sign(body, secret, int(time.time()) - age),
        "Content-Type": "application/json",
    }


def refunded_case(desk: StripeHarness, fake: FakeStripeServer) -> dict[str, Any]:
    payment = fake.fake.pay(3000)
    body = desk.post(desk.request(payment, "20.00")).json()
    assert body["status"] == "refunded"
    [refund] = fake.fake.refunds.values()
    fake.fake.deliver(desk.webhook)  # refund.created, charge.refunded: nothing to change
    assert desk.get(body["id"])["status"] == "refunded"
    return {
        "case": body["id"],
        "payment": payment,
        "refund": refund["id"],
        "charge": refund["charge"],
    }


def counts(desk: StripeHarness) -> tuple[int, int, int]:
    with desk.runtime.db.read() as session:
        return (
            session.scalar(select(func.count()).select_from(AuditRecord)) or 0,
            session.scalar(select(func.count()).select_from(Job)) or 0,
            session.scalar(select(func.count()).select_from(ProcessorEvent)) or 0,
        )


def notifications(desk: StripeHarness, event: str) -> list[dict[str, Any]]:
    with desk.runtime.db.read() as session:
        jobs = session.scalars(select(Job).where(Job.kind == "notify")).all()
    return [j.payload for j in jobs if j.payload["event"] == event]


def test_signed_refund_failed_reopens_the_case_and_tells_the_thread(
    on_fake: StripeHarness, fake_stripe: FakeStripeServer
) -> None:
    ids = refunded_case(on_fake, fake_stripe)
    # Stripe fails the refund later (the card was closed); its event says so, signed.
    fake_stripe.fake.set_refund_status(ids["refund"], "failed", "expired_or_canceled_card")
    [response] = fake_stripe.fake.deliver(on_fake.webhook)
    assert response.status_code == 200, response.text
    case = on_fake.get(ids["case"])
    assert case["status"] == "parked"
    assert ids["refund"] in case["park_reason"] and "failed" in case["park_reason"]
    assert "Nothing is re-sent" in case["park_reason"]
    # the customer's message (an API request without a callback: recorded) comes with it
    assert [r["action"] for r in case["audit"]][-2:] == ["execution.reversed", "customer.told"]
    assert [n["case_id"] for n in notifications(on_fake, "case.parked")] == [ids["case"]]
    with on_fake.runtime.db.read() as session:
        [execution] = session.scalars(select(Execution)).all()
    assert (execution.status, execution.error_code) == ("failed", "refund_failed")
    on_fake.sweep()
    assert len(fake_stripe.fake.refunds) == 1, "compensation never re-sends by itself"


def test_bad_signature_is_400_and_changes_nothing(
    on_fake: StripeHarness, fake_stripe: FakeStripeServer
) -> None:
    ids = refunded_case(on_fake, fake_stripe)
    fake_stripe.fake.refunds[ids["refund"]]["status"] = "failed"
    before = counts(on_fake)
    body = fixture("refund.failed", **ids)
    for headers in (
        signed(body, secret="whsec_not_ours_" + "0" * 20),
        signed(body, age=10 * 60),  # outside the 5-minute tolerance
        {"Content-Type": "application/json"},
        {**signed(body), "Stripe-Signature": "t=1,v1=00"},
    ):
        response = on_fake.webhook(body, headers)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] in ("invalid_signature", "missing_signature")
    assert counts(on_fake) == before
    assert on_fake.get(ids["case"])["status"] == "refunded"


def test_same_event_twice_changes_nothing_the_second_time(
    on_fake: StripeHarness, fake_stripe: FakeStripeServer
) -> None:
    ids = refunded_case(on_fake, fake_stripe)
    fake_stripe.fake.refunds[ids["refund"]]["status"] = "failed"
    body = fixture("refund.failed", **ids)
    first = on_fake.webhook(body, signed(body))
    assert first.json()["duplicate"] is False
    after_first = counts(on_fake)
    second = on_fake.webhook(body, signed(body))
    assert second.status_code == 200 and second.json()["duplicate"] is True
    assert counts(on_fake) == after_first
    assert on_fake.get(ids["case"])["status"] == "parked"


def test_out_of_order_events_never_move_a_refund_backwards(
    on_fake: StripeHarness, fake_stripe: FakeStripeServer
) -> None:
    ids = refunded_case(on_fake, fake_stripe)
    fake_stripe.fake.refunds[ids["refund"]]["status"] = "failed"
    failed = fixture("refund.failed", **ids)
    assert on_fake.webhook(failed, signed(failed)).status_code == 200
    # A stale "created: pending" and "updated: succeeded" arrive after the failure.
    for name in ("refund.created", "refund.updated"):
        late = fixture(name, **ids)
        assert on_fake.webhook(late, signed(late)).status_code == 200
    case = on_fake.get(ids["case"])
    assert case["status"] == "parked"
    assert [r["action"] for r in case["audit"]].count("execution.reversed") == 1


def test_refund_updated_settles_a_pending_refund(
    on_fake: StripeHarness, fake_stripe: FakeStripeServer
) -> None:
    on_fake.runtime.desk.jobs_elsewhere = False
    payment = fake_stripe.fake.pay(3000)
    fake_stripe.fake.knobs.next_refund_status = "pending"
    body = on_fake.post(on_fake.request(payment, "20.00")).json()
    assert body["status"] == "executing"
    [refund] = fake_stripe.fake.refunds.values()
    fake_stripe.fake.set_refund_status(refund["id"], "succeeded")
    responses = fake_stripe.fake.deliver(on_fake.webhook)
    assert {r.status_code for r in responses} == {200}
    assert on_fake.get(body["id"])["status"] == "refunded"


def test_charge_refunded_settles_our_refunds_on_that_charge(
    on_fake: StripeHarness, fake_stripe: FakeStripeServer
) -> None:
    payment = fake_stripe.fake.pay(3000)
    fake_stripe.fake.knobs.next_refund_status = "pending"
    body = on_fake.post(on_fake.request(payment, "20.00")).json()
    [refund] = fake_stripe.fake.refunds.values()
    refund["status"] = "succeeded"  # quietly, as if the refund.updated event were lost
    event = fixture("charge.refunded", payment=payment, charge=refund["charge"])
    assert on_fake.webhook(event, signed(event)).status_code == 200
    assert on_fake.get(body["id"])["status"] == "refunded"


def test_dispute_puts_a_note_on_the_case(
    on_fake: StripeHarness, fake_stripe: FakeStripeServer
) -> None:
    ids = refunded_case(on_fake, fake_stripe)
    event = fixture("charge.dispute.created", **ids)
    assert on_fake.webhook(event, signed(event)).status_code == 200
    case = on_fake.get(ids["case"])
    assert case["status"] == "refunded"  # a note, no money moves
    [note] = [r for r in case["audit"] if r["action"] == "processor.dispute_opened"]
    assert note["payload"]["amount"] == "30.00 USD"
    assert "ada@" not in json.dumps(note)
    [message] = notifications(on_fake, "case.note")
    assert message["case_id"] == ids["case"] and "dispute" in message["data"]["text"]


def test_unknown_event_is_acknowledged_and_logged(
    on_fake: StripeHarness, caplog: pytest.LogCaptureFixture
) -> None:
    before = counts(on_fake)
    event = fixture("customer.created")
    with caplog.at_level("INFO"):
        response = on_fake.webhook(event, signed(event))
    assert response.status_code == 200
    assert "customer.created" in caplog.text
    audit, jobs, events = counts(on_fake)
    assert (audit, jobs, events) == (before[0], before[1], before[2] + 1)


def test_without_a_webhook_secret_the_route_is_an_unknown_route(
    on_fake: StripeHarness,
) -> None:
    on_fake.runtime.settings = on_fake.runtime.settings.model_copy(
        update={"stripe_webhook_secret": None}
    )
    event = fixture("customer.created")
    response = on_fake.webhook(event, signed(event))
    assert response.status_code == 404  # was 503 `webhook_not_configured`
    assert response.json() == {"error": {"code": "not_found", "message": "Not Found", "fields": {}}}
