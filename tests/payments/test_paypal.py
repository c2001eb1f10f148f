"""PayPal as the desk sees it, through the emulator: orders and captures, the payer, PayPal's
decimals, its errors read as a person reads them, webhooks believed only once PayPal verified
them, reconciliation of refunds made outside the desk, and two processors side by side."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from refund_desk import clock
from refund_desk.cases.ports import AmountRefused, ProcessorUnavailable
from refund_desk.payments import reconcile
from refund_desk.payments.paypal_api import PayPalProcessor, to_paypal
from refund_desk.settings import load_settings
from refund_desk.storage.models import Execution, ProcessorEvent
from tests.cli_helpers import run
from tests.conftest import make_settings
from tests.payments.remotes import PayPalRemote, RemoteHarness


@pytest.fixture()
def paypal() -> Iterator[PayPalRemote]:
    remote = PayPalRemote()
    yield remote
    remote.stop()


@pytest.fixture()
def desk(sqlite_url: str, paypal: PayPalRemote) -> Iterator[RemoteHarness]:
    runtime = paypal.runtime(sqlite_url)
    harness = RemoteHarness(runtime, paypal)
    harness.publish()
    yield harness
    runtime.db.dispose()


def _execution(desk: RemoteHarness) -> Execution:
    with desk.runtime.db.read() as session:
        [execution] = session.scalars(select(Execution)).all()
        return execution


# ---------------------------------------------------------------- payments and amounts


def test_an_order_id_names_its_capture_and_the_payer_is_the_customer(
    desk: RemoteHarness, paypal: PayPalRemote
) -> None:
    paid = paypal.emulator.pay("30.00", email="ada@example.com")
    body = desk.post(desk.request(paid.order_id, "20.00")).json()
    assert body["status"] == "refunded", body
    case = desk.get(body["id"])
    assert case["payment"] == paid.capture_id  # the case is about the capture
    assert case["facts"]["customer"]["verified"] is True
    assert paypal.refunds(paid.capture_id) == [(2000, "succeeded")]


def test_a_requester_who_is_not_the_payer_is_not_verified(
    desk: RemoteHarness, paypal: PayPalRemote
) -> None:
    payment = paypal.pay("30.00", email="someone@example.com")
    body = desk.post(desk.request(payment, "20.00")).json()
    assert body["status"] != "refunded"
    assert desk.get(body["id"])["facts"]["customer"]["verified"] is False
    assert paypal.refunds(payment) == []


@pytest.mark.parametrize(
    ("amount", "currency", "sent"),
    [(1234, "USD", "12.34"), (3980, "JPY", "3980"), (150000, "HUF", "1500"), (9900, "TWD", "99")],
)
def test_amounts_go_out_in_paypals_decimals(amount: int, currency: str, sent: str) -> None:
    assert to_paypal(amount, currency) == sent


@pytest.mark.parametrize(
    ("amount", "currency", "said"),
    [(150050, "HUF", "whole units"), (1000, "KWD", "does not process"), (0, "USD", "more than")],
)
def test_amounts_paypal_cannot_take_are_refused_before_sending(
    amount: int, currency: str, said: str
) -> None:
    with pytest.raises(AmountRefused, match=said):
        to_paypal(amount, currency)


def test_a_huf_payment_refunds_whole_forints(desk: RemoteHarness, paypal: PayPalRemote) -> None:
    payment = paypal.pay("2000", "HUF")
    refused = desk.post(desk.request(payment, "1500.50", currency="HUF"))
    assert refused.status_code == 422
    assert "whole units" in json.dumps(refused.json())
    assert paypal.creates() == 0


# ---------------------------------------------------------------- PayPal's errors


@pytest.mark.parametrize(
    ("issue", "said"),
    [
        ("REFUND_TIME_LIMIT_EXCEEDED", "refund time limit"),
        ("REFUND_FAILED_INSUFFICIENT_FUNDS", "Add funds"),
        ("TRANSACTION_DISPUTED", "under dispute"),
    ],
)
def test_a_decline_parks_the_case_with_a_sentence(
    desk: RemoteHarness, paypal: PayPalRemote, issue: str, said: str
) -> None:
    payment = paypal.pay("30.00")
    paypal.emulator.decline_next(issue)
    body = desk.post(desk.request(payment, "20.00")).json()
    assert body["status"] == "parked", body
    assert said in body["park_reason"]
    assert paypal.refunds(payment) == []


def test_rate_limited_and_unavailable_are_retried_later(
    desk: RemoteHarness, paypal: PayPalRemote
) -> None:
    payment = paypal.pay("30.00")
    paypal.emulator.rate_limit()
    body = desk.post(desk.request(payment, "20.00")).json()
    assert body["status"] == "executing", body
    paypal.emulator.error_before_refund(503)
    desk.sweep()
    assert desk.get(body["id"])["status"] == "executing"
    desk.sweep()
    assert desk.get(body["id"])["status"] == "refunded"
    assert paypal.refunds(payment) == [(2000, "succeeded")]


def test_an_expired_token_is_fetched_again(desk: RemoteHarness, paypal: PayPalRemote) -> None:
    payment = paypal.pay("30.00")
    assert desk.post(desk.request(payment, "10.00")).json()["status"] == "refunded"
    paypal.emulator.expire_tokens()
    assert desk.post(desk.request(payment, "15.00")).json()["status"] == "refunded"


def test_wrong_credentials_say_so(paypal: PayPalRemote) -> None:
    processor = PayPalProcessor(
        client_id="nobody", client_secret="wrong", api_base=paypal.server.url
    )
    with pytest.raises(ProcessorUnavailable, match="PAYPAL_CLIENT_ID"):
        processor.check()
    assert "accepts these credentials" in paypal.processor().check()


def test_a_pending_refund_is_followed_and_one_that_fails_reopens_the_case(
    desk: RemoteHarness, paypal: PayPalRemote
) -> None:
    payment = paypal.pay("30.00")
    paypal.emulator.next_refund_pending()
    body = desk.post(desk.request(payment, "20.00")).json()
    assert body["status"] == "executing", body
    desk.sweep()
    assert _execution(desk).processor_status == "pending"
    paypal.emulator.settle_refund(_execution(desk).processor_refund_id or "", "FAILED")
    desk.sweep()  # the executor polls the pending refund to its end
    case = desk.get(body["id"])
    assert case["status"] != "refunded"
    assert _execution(desk).processor_status == "failed"


# ---------------------------------------------------------------- webhooks


def _deliver(desk: RemoteHarness, paypal: PayPalRemote) -> list[int]:
    return [
        r.status_code
        for r in paypal.emulator.deliver(
            lambda body, headers: desk.webhook("/webhooks/paypal", body, headers)
        )
    ]


def test_a_verified_refund_failure_reopens_a_refunded_case(
    desk: RemoteHarness, paypal: PayPalRemote
) -> None:
    payment = paypal.pay("30.00")
    body = desk.post(desk.request(payment, "20.00")).json()
    assert body["status"] == "refunded"
    assert set(_deliver(desk, paypal)) == {200}
    paypal.emulator.settle_refund(_execution(desk).processor_refund_id or "", "FAILED")
    assert _deliver(desk, paypal) == [200]
    desk.sweep()
    assert desk.get(body["id"])["status"] != "refunded"
    assert _execution(desk).processor_status == "failed"


def _events(desk: RemoteHarness) -> int:
    with desk.runtime.db.read() as session:
        return int(session.scalar(select(func.count()).select_from(ProcessorEvent)) or 0)


def test_a_replayed_event_changes_nothing(desk: RemoteHarness, paypal: PayPalRemote) -> None:
    payment = paypal.pay("30.00")
    desk.post(desk.request(payment, "20.00"))
    sent: list[tuple[bytes, dict[str, str]]] = []
    paypal.emulator.deliver(lambda body, headers: sent.append((body, headers)))
    assert sent
    first = [desk.webhook("/webhooks/paypal", b, h).json() for b, h in sent]
    again = [desk.webhook("/webhooks/paypal", b, h).json() for b, h in sent]
    assert not any(r["duplicate"] for r in first)
    assert all(r["duplicate"] for r in again)
    assert _events(desk) == len(sent)


def test_forged_or_altered_events_are_refused_and_change_nothing(
    desk: RemoteHarness, paypal: PayPalRemote
) -> None:
    payment = paypal.pay("30.00")
    desk.post(desk.request(payment, "20.00"))
    sent: list[tuple[bytes, dict[str, str]]] = []
    paypal.emulator.deliver(lambda body, headers: sent.append((body, headers)))
    body, headers = sent[0]
    event = json.loads(body)
    event["resource"]["status"] = "FAILED"
    altered = json.dumps(event).encode()
    assert desk.webhook("/webhooks/paypal", altered, headers).status_code == 400
    unsigned = {k: v for k, v in headers.items() if k.lower() != "paypal-transmission-sig"}
    assert desk.webhook("/webhooks/paypal", body, unsigned).status_code == 400
    assert desk.webhook("/webhooks/paypal", b"not json", headers).status_code == 400
    assert _events(desk) == 0
    assert _execution(desk).processor_status == "succeeded"


def test_an_unknown_event_is_acknowledged_and_does_nothing(
    desk: RemoteHarness, paypal: PayPalRemote
) -> None:
    body, headers = paypal.emulator.signed(
        {
            "id": "WH-UNKNOWN0000000001",
            "event_version": "1.0",
            "create_time": "2026-12-06T10:00:00Z",
            "resource_type": "checkout-order",
            "event_type": "CHECKOUT.ORDER.APPROVED",
            "summary": "An order was approved",
            "resource": {"id": "5O190127TN364715T"},
        }
    )
    answer = desk.webhook("/webhooks/paypal", body, headers)
    assert answer.status_code == 200 and answer.json()["duplicate"] is False
    assert _events(desk) == 1


def test_without_paypal_configured_the_route_is_not_there(desk: RemoteHarness) -> None:
    desk.runtime.paypal = None
    assert desk.webhook("/webhooks/paypal", b"{}", {}).status_code == 404


# ---------------------------------------------------------------- reconciliation


def test_reconcile_finds_a_refund_made_outside_the_desk(
    desk: RemoteHarness, paypal: PayPalRemote
) -> None:
    payment = paypal.pay("30.00")
    assert desk.post(desk.request(payment, "10.00")).json()["status"] == "refunded"
    outside = paypal.emulator.refund_directly(payment, "5.00")
    report = reconcile.reconcile(desk.runtime.desk, since=clock.now() - timedelta(days=1))
    assert [(f.kind, f.refund_id) for f in report.findings] == [("unknown_refund", outside)]
    assert report.refunds_seen == 2


# ---------------------------------------------------------------- two processors


def test_with_stripe_and_paypal_each_payment_goes_to_its_own(
    sqlite_url: str, paypal: PayPalRemote
) -> None:
    from tests.payments.remotes import StripeRemote

    stripe = StripeRemote()
    try:
        settings = {
            **stripe.settings(),
            **paypal.settings(),
            "REFUND_DESK_PROCESSOR": "stripe,paypal",
        }
        from refund_desk.runtime import build
        from refund_desk.storage.db import Database

        runtime = build(make_settings(sqlite_url, **settings), db=Database.from_url(sqlite_url))
        desk = RemoteHarness(runtime, paypal)
        desk.publish()
        at_stripe, at_paypal = stripe.pay("30.00"), paypal.pay("30.00")
        assert desk.post(desk.request(at_stripe, "20.00")).json()["status"] == "refunded"
        assert desk.post(desk.request(at_paypal, "10.00")).json()["status"] == "refunded"
        assert stripe.refunds(at_stripe) == [(2000, "succeeded")]
        assert paypal.refunds(at_paypal) == [(1000, "succeeded")]
        named = desk.post(desk.request(at_stripe, "5.00", processor="paypal"))
        assert named.status_code == 422 and named.json()["error"]["code"] == "processor_mismatch"
        runtime.db.dispose()
    finally:
        stripe.stop()


def test_a_processor_the_desk_does_not_use_is_refused(
    desk: RemoteHarness, paypal: PayPalRemote
) -> None:
    payment = paypal.pay("30.00")
    answer = desk.post(desk.request(payment, "5.00", processor="stripe"))
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "processor_not_configured"
    ok = desk.post(desk.request(payment, "5.00", processor="paypal"))
    assert ok.json()["status"] == "refunded"


def test_processor_doctor_says_whether_paypal_takes_the_credentials(
    paypal: PayPalRemote, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'desk.db'}")
    for name, value in {**paypal.settings(), "REFUND_DESK_PROCESSOR": "sandbox,paypal"}.items():
        monkeypatch.setenv(name, value)
    load_settings.cache_clear()
    answer = run("processor", "doctor")
    assert "ok    sandbox" in answer and "ok    paypal: PayPal answers" in answer
    monkeypatch.setenv("PAYPAL_CLIENT_SECRET", "wrong")
    load_settings.cache_clear()
    failed = run("processor", "doctor", code=1)
    load_settings.cache_clear()
    assert "FAIL  paypal: PayPal refused PAYPAL_CLIENT_ID and PAYPAL_CLIENT_SECRET" in failed


def test_the_record_and_the_export_name_the_processor_and_its_refund(
    desk: RemoteHarness, paypal: PayPalRemote
) -> None:
    from refund_desk.cases.listing import export_rows
    from refund_desk.storage.models import Case

    payment = paypal.pay("30.00")
    answer = desk.post(desk.request(payment, "20.00")).json()
    assert answer["processor"] == "paypal"
    [refund] = desk.get(answer["id"])["refunds"]
    [raw] = paypal.emulator.refunds(payment)
    assert (refund["processor"], refund["id"]) == ("paypal", raw["id"])
    with desk.runtime.db.read() as session:
        [row] = export_rows(session, list(session.scalars(select(Case))))
    assert (row["processor"], row["processor_refund_id"]) == ("paypal", raw["id"])
