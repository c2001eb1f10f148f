"""PayPal from the outside: a hostile world against the promise, each scenario an assertion.

Written from the contract alone (README, the PayPal emulator and PayPal's descriptions), not
from the adapter or the executor. Money is always counted at the emulator: what PayPal holds is
the truth, the desk's own view is checked against it. The scenarios of a look-up answered with
a 4xx once (below) broke the promise (40.00 paid for a 20.00 case) until the executor took any
failed look-up after a create as an unknown outcome.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from typer.testing import CliRunner

from refund_desk import clock
from refund_desk.cases import approvals
from refund_desk.cli.main import app
from refund_desk.demo.paypal import ISSUES, ApiError, PayPalEmulator, fail
from refund_desk.payments.reconcile import reconcile
from refund_desk.runtime import Runtime, build
from refund_desk.settings import load_settings
from refund_desk.storage.db import Database
from refund_desk.storage.models import Case
from tests.cases.advance_common import together
from tests.conftest import SimulatedCrash, make_runtime, make_settings
from tests.helpers import ACME, CUSTOMER, Harness, button_token
from tests.payments.remotes import PayPalRemote, RemoteHarness

DAMAGED = "The vase arrived broken, shattered in the box."
Event = tuple[bytes, dict[str, str]]
Handle = Callable[[str, str, dict[str, str], bytes], tuple[int, Any]]


# ---------------------------------------------------------------- the world


@dataclass
class World:
    desk: RemoteHarness
    remote: PayPalRemote
    url: str

    @property
    def paypal(self) -> PayPalEmulator:
        return self.remote.emulator

    @property
    def runtime(self) -> Runtime:
        return self.desk.runtime


@pytest.fixture()
def remote() -> Iterator[PayPalRemote]:
    made = PayPalRemote()
    yield made
    made.stop()


@pytest.fixture()
def w(sqlite_url: str, remote: PayPalRemote) -> Iterator[World]:
    """One desk on SQLite (the races between two runtimes below run on PostgreSQL; the
    exactly-once suite runs every fault on both databases)."""
    runtime = remote.runtime(sqlite_url)
    desk = RemoteHarness(runtime, remote)
    desk.publish()
    yield World(desk, remote, sqlite_url)
    runtime.db.dispose()


def ask(
    w: World,
    payment: str,
    amount: str | None,
    *,
    currency: str = "USD",
    damaged: bool = True,
    key: str | None = None,
    **extra: Any,
) -> Any:
    """A refund request through the API; damaged small ones are the policy's to pay."""
    body: dict[str, Any] = {"payment": payment, "email": CUSTOMER, "currency": currency}
    body["message"] = DAMAGED if damaged else "I changed my mind about the order."
    if damaged:
        body["reason"] = "damaged"
    if amount is not None:
        body["amount"] = amount
    return w.desk.post({**body, **extra}, idempotency_key=key)


def case_of(w: World, payment: str, amount: str | None, **kw: Any) -> dict[str, Any]:
    response = ask(w, payment, amount, **kw)
    assert response.status_code in (200, 201), response.text
    return dict(response.json())


def awaiting(w: World, paid_amount: str, amount: str) -> tuple[Any, dict[str, Any]]:
    paid = w.paypal.pay(paid_amount)
    case = case_of(w, paid.capture_id, amount, damaged=False)
    assert case["status"] == "awaiting_approval", case
    return paid, case


def at_paypal(w: World, capture: str) -> list[tuple[str, str, str | None]]:
    """Each refund PayPal holds on the capture: (value, status, custom_id)."""
    return [
        (r["amount"]["value"], r["status"], r.get("custom_id")) for r in w.paypal.refunds(capture)
    ]


def paid_out(w: World, capture: str) -> Decimal:
    """What left the merchant's account on the capture (or is on its way)."""
    return sum(
        (Decimal(v) for v, s, _ in at_paypal(w, capture) if s in ("COMPLETED", "PENDING")),
        Decimal(0),
    )


def creates(w: World) -> list[tuple[dict[str, str], Any]]:
    """The refund creates PayPal received: their headers (lower-case) and bodies."""
    return [
        ({k.lower(): v for k, v in headers.items()}, body)
        for method, path, headers, body in list(w.paypal.requests)
        if method == "POST" and path.endswith("/refund")
    ]


def status(w: World, case_id: str) -> str:
    return str(w.desk.get(case_id)["status"])


def settle(w: World, rounds: int = 6) -> None:
    """Let time pass: every due job runs, an hour apart each round."""
    for i in range(rounds):
        w.desk.sweep(seconds_ahead=3600 * (i + 1))


def approve(w: World, case_id: str, user: str = "U0LEAD1", **kw: str) -> approvals.Outcome:
    """A person's click on the case's button as it is now, its jobs run at once."""
    rt = w.runtime.desk
    with rt.db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None
        value = button_token(rt, case, "approve_partial" if "amount" in kw else "approve")
    outcome = approvals.act(rt, token_value=value, user=user, **kw)
    for job in outcome.jobs:
        rt.jobs.run_now(job)
    return outcome


def try_approve(w: World, case_id: str) -> None:
    """A person approves; a refusal (the desk saying no to the click) is an answer too."""
    with contextlib.suppress(approvals.Refused):
        approve(w, case_id)


def answered(error: ApiError) -> tuple[int, Any]:
    """PayPal's answer for one of its errors, as the emulator's `handle` gives it."""
    return error.status, error.body


def on_first_create(w: World, before: Callable[[], None]) -> None:
    """`before` runs at PayPal when the first refund create arrives, ahead of PayPal's
    answer: after every look-up the desk made, before the create is looked at."""
    real: Handle = w.paypal.handle
    done: list[bool] = []

    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if method == "POST" and path.endswith("/refund") and not done:
            done.append(True)
            before()
        return real(method, path, headers, raw)

    w.paypal.handle = handle  # type: ignore[method-assign]


def answering(w: World, change: Callable[[dict[str, Any]], Any], times: int = 1) -> None:
    """PayPal's next refund answers (201) altered by `change`; what PayPal holds is not."""
    real: Handle = w.paypal.handle
    left = [times]

    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        code, body = real(method, path, headers, raw)
        if method == "POST" and path.endswith("/refund") and code == 201 and left[0] > 0:
            left[0] -= 1
            body = dict(body)
            change(body)
        return code, body

    w.paypal.handle = handle  # type: ignore[method-assign]


def events(w: World) -> list[Event]:
    """PayPal's pending notifications, signed, not yet delivered."""
    got: list[Event] = []
    w.paypal.deliver(lambda body, headers: got.append((body, headers)))
    return got


def post_event(w: World, event: Event) -> Any:
    return w.desk.webhook("/webhooks/paypal", event[0], event[1])


def of_type(found: list[Event], kind: str) -> list[Event]:
    return [e for e in found if json.loads(e[0])["event_type"] == kind]


def resigned(w: World, event: Event, webhook_id: str | None = None) -> Event:
    """The same event sent again by PayPal: new transmission id, time and signature (as a
    resend does); `webhook_id`: signed for another of the merchant's webhooks."""
    body = json.loads(event[0])
    if webhook_id is None:
        return w.paypal.signed(body)
    mine = w.paypal.webhook_id
    w.paypal.webhook_id = webhook_id
    try:
        return w.paypal.signed(body)
    finally:
        w.paypal.webhook_id = mine


def revision(w: World, case_id: str) -> int:
    return int(w.desk.get(case_id)["revision"])


# ---------------------------------------------------------------- races on one capture


def test_two_cases_racing_on_one_capture_never_pay_more_than_was_captured(w: World) -> None:
    paid = w.paypal.pay("30.00")
    answers: list[Any] = []
    errors = together([lambda: answers.append(ask(w, paid.capture_id, "20.00")) for _ in range(2)])
    assert errors == []
    settle(w)
    assert paid_out(w, paid.capture_id) <= Decimal("30.00")
    assert [v for v, s, _ in at_paypal(w, paid.capture_id)] == ["20.00"]
    statuses = sorted(status(w, a.json()["id"]) for a in answers if a.status_code < 300)
    assert statuses.count("refunded") == 1, statuses


def test_five_cases_racing_on_one_capture_agree_with_paypal(w: World) -> None:
    paid = w.paypal.pay("30.00")
    answers: list[Any] = []
    together([lambda: answers.append(ask(w, paid.capture_id, "10.00")) for _ in range(5)])
    settle(w)
    assert paid_out(w, paid.capture_id) <= Decimal("30.00")
    held = {r["id"]: r for r in w.paypal.refunds(paid.capture_id)}
    ours: dict[str, Any] = {}
    for answer in answers:
        if answer.status_code < 300:
            case = w.desk.get(answer.json()["id"])
            for refund in case["refunds"]:
                ours[refund["id"]] = (case, refund)
            if case["status"] == "refunded":
                assert [r["status"] for r in case["refunds"]].count("succeeded") == 1
    assert set(ours) == set(held)
    for refund_id, (case, refund) in ours.items():
        assert held[refund_id]["custom_id"] == refund["execution_id"]
        assert held[refund_id]["amount"]["value"] == refund["amount"] == case["amount"]


@pytest.mark.postgres
def test_two_runtimes_on_one_database_racing_on_one_capture_pay_once(
    pg_url: str, remote: PayPalRemote
) -> None:
    one, two = remote.runtime(pg_url), remote.runtime(pg_url)
    try:
        a, b = RemoteHarness(one, remote), RemoteHarness(two, remote)
        a.publish()
        paid = remote.emulator.pay("30.00")
        w1, w2 = World(a, remote, pg_url), World(b, remote, pg_url)
        answers: list[Any] = []
        errors = together(
            [
                lambda: answers.append(ask(w1, paid.capture_id, "20.00")),
                lambda: answers.append(ask(w2, paid.order_id, "20.00")),
            ]
        )
        assert errors == []
        settle(w1)
        settle(w2)
        assert [v for v, s, _ in at_paypal(w1, paid.capture_id)] == ["20.00"]
        refunded = [a.json()["id"] for a in answers if a.status_code < 300]
        assert sorted(status(w1, c) for c in refunded).count("refunded") == 1
    finally:
        one.db.dispose()
        two.db.dispose()


def test_an_order_id_and_its_capture_id_at_once_are_one_payment(w: World) -> None:
    paid = w.paypal.pay("30.00")
    answers: list[Any] = []
    errors = together(
        [
            lambda: answers.append(ask(w, paid.order_id, "20.00")),
            lambda: answers.append(ask(w, paid.capture_id, "20.00")),
        ]
    )
    assert errors == []
    settle(w)
    assert [v for v, s, _ in at_paypal(w, paid.capture_id)] == ["20.00"]
    cases = [w.desk.get(a.json()["id"]) for a in answers if a.status_code < 300]
    assert {c["payment"] for c in cases} == {paid.capture_id}
    assert [c["status"] for c in cases].count("refunded") == 1


def test_one_idempotency_key_sent_twice_at_once_is_one_case_and_one_refund(w: World) -> None:
    paid = w.paypal.pay("30.00")
    answers: list[Any] = []
    errors = together(
        [lambda: answers.append(ask(w, paid.capture_id, "20.00", key="retry-1")) for _ in "ab"]
    )
    assert errors == []
    settle(w)
    ids = {a.json().get("id") for a in answers if a.status_code < 300}
    assert len(ids) == 1, [a.text for a in answers]
    assert [v for v, s, _ in at_paypal(w, paid.capture_id)] == ["20.00"]


def test_the_same_idempotency_key_on_the_capture_then_the_order_is_one_refund(w: World) -> None:
    paid = w.paypal.pay("30.00")
    first = ask(w, paid.capture_id, "20.00", key="k-order")
    again = ask(w, paid.order_id, "20.00", key="k-order")
    settle(w)
    assert [v for v, s, _ in at_paypal(w, paid.capture_id)] == ["20.00"]
    assert again.status_code >= 400 or again.json()["id"] == first.json()["id"]


def test_one_idempotency_key_reused_for_another_payment_pays_only_the_first(w: World) -> None:
    first, second = w.paypal.pay("30.00"), w.paypal.pay("30.00")
    one = ask(w, first.capture_id, "20.00", key="reused")
    two = ask(w, second.capture_id, "20.00", key="reused")
    settle(w)
    assert one.status_code < 300
    assert at_paypal(w, second.capture_id) == []
    assert two.status_code >= 400 or two.json()["id"] == one.json()["id"]


@pytest.mark.postgres
def test_a_replica_taking_over_a_create_still_in_flight_at_paypal_pays_once(
    pg_url: str, remote: PayPalRemote
) -> None:
    """Replica A's create is slow at PayPal (under the timeout); replica B, seeing A's lease as
    run out, runs the same job meanwhile and finds nothing at PayPal yet. PayPal ignores
    request ids: only the desk's own record of the create in flight keeps B from sending."""
    one, two = remote.runtime(pg_url), remote.runtime(pg_url)
    try:
        a = World(RemoteHarness(one, remote), remote, pg_url)
        b = World(RemoteHarness(two, remote), remote, pg_url)
        a.desk.publish()
        paid, case = awaiting(a, "100.00", "60.00")
        rt = one.desk
        with rt.db.read() as session:
            row = session.get(Case, case["id"])
            assert row is not None
            value = button_token(rt, row, "approve")
        [job] = approvals.act(rt, token_value=value, user="U0LEAD1").jobs
        remote.emulator.ignore_request_id = True
        real: Handle = remote.emulator.handle
        first = threading.Event()

        def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
            if method == "POST" and path.endswith("/refund") and not first.is_set():
                first.set()
                threading.Event().wait(0.8)
            return real(method, path, headers, raw)

        remote.emulator.handle = handle  # type: ignore[method-assign]

        def b_takes_over() -> None:
            first.wait(5)
            threading.Event().wait(0.2)
            b.desk.sweep(seconds_ahead=3600)

        errors = together([lambda: rt.jobs.run_now(job), b_takes_over])
        assert not [e for e in errors if not isinstance(e, Exception)]
        settle(a)
        assert [v for v, s, _ in at_paypal(a, paid.capture_id)] == ["60.00"]
        assert status(a, case["id"]) == "refunded"
        assert len({h["paypal-request-id"] for h, _ in creates(a)}) == 1
    finally:
        one.db.dispose()
        two.db.dispose()


# ---------------------------------------------------------------- faults, one after another


def test_5xx_before_then_a_timeout_after_success_then_request_ids_ignored(w: World) -> None:
    paid = w.paypal.pay("30.00")
    w.paypal.error_before_refund(503)
    w.paypal.stall_after_refund(1.6)
    w.paypal.ignore_request_id = True
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert [(v, s) for v, s, _ in at_paypal(w, paid.capture_id)] == [("20.00", "COMPLETED")]
    case = w.desk.get(case["id"])
    assert case["status"] == "refunded"
    [ours] = case["refunds"]
    [held] = w.paypal.refunds(paid.capture_id)
    assert ours["id"] == held["id"] and held["custom_id"] == ours["execution_id"]
    for headers, body in creates(w):
        assert headers["paypal-request-id"] == body["custom_id"] == ours["execution_id"]


def test_a_5xx_after_success_with_request_ids_ignored_pays_once(w: World) -> None:
    paid = w.paypal.pay("30.00")
    w.paypal.error_after_refund(500)
    w.paypal.ignore_request_id = True
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert [v for v, s, _ in at_paypal(w, paid.capture_id)] == ["20.00"]
    assert status(w, case["id"]) == "refunded"


def test_two_timeouts_after_success_in_a_row_pay_once(w: World) -> None:
    paid = w.paypal.pay("30.00")
    w.paypal.stall_after_refund(1.4, times=2)
    w.paypal.ignore_request_id = True
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert [v for v, s, _ in at_paypal(w, paid.capture_id)] == ["20.00"]
    assert status(w, case["id"]) == "refunded"


def test_a_run_of_429s_is_waited_out_and_pays_once(w: World) -> None:
    paid = w.paypal.pay("30.00")
    w.paypal.rate_limit(times=3)
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert [v for v, s, _ in at_paypal(w, paid.capture_id)] == ["20.00"]
    assert status(w, case["id"]) == "refunded"
    ids = {h["paypal-request-id"] for h, _ in creates(w)}
    assert len(ids) == 1  # every retry is the same execution


def test_the_token_revoked_between_the_look_up_and_the_create_still_pays_once(w: World) -> None:
    paid = w.paypal.pay("30.00")
    on_first_create(w, w.paypal.expire_tokens)
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert [v for v, s, _ in at_paypal(w, paid.capture_id)] == ["20.00"]
    assert status(w, case["id"]) == "refunded"


def test_the_token_revoked_while_a_created_refund_answers_late_pays_once(w: World) -> None:
    """The create succeeds but its answer is lost, and every token dies meanwhile: the
    look-up after the timeout must get a new token, find the refund and not create another."""
    paid = w.paypal.pay("30.00")
    w.paypal.ignore_request_id = True
    w.paypal.stall_after_refund(1.4)
    real: Handle = w.paypal.handle

    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if method == "POST" and path.endswith("/refund"):  # dies once PayPal has made it
            threading.Timer(0.3, w.paypal.expire_tokens).start()
        return real(method, path, headers, raw)

    w.paypal.handle = handle  # type: ignore[method-assign]
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert [v for v, s, _ in at_paypal(w, paid.capture_id)] == ["20.00"]
    assert status(w, case["id"]) == "refunded"


def test_a_crash_after_paypal_made_the_refund_is_found_on_restart(w: World) -> None:
    """The process dies after PayPal made the refund and before the desk wrote it down; PayPal
    ignores request ids. The replica that picks the work up finds the refund by its custom_id."""
    paid = w.paypal.pay("100.00")
    case = case_of(w, paid.capture_id, "100.00", damaged=False)
    assert case["status"] == "awaiting_approval"
    w.paypal.ignore_request_id = True
    processor = w.runtime.desk.processor
    real = processor.create_refund

    def create_then_die(**kw: Any) -> Any:
        real(**kw)
        raise SimulatedCrash()

    processor.create_refund = create_then_die  # type: ignore[method-assign]
    with pytest.raises(SimulatedCrash):
        approve(w, case["id"])
    restarted = w.remote.runtime(w.url)
    try:
        again = World(RemoteHarness(restarted, w.remote), w.remote, w.url)
        settle(again)
        assert [v for v, s, _ in at_paypal(w, paid.capture_id)] == ["100.00"]
        assert status(again, case["id"]) == "refunded"
    finally:
        restarted.db.dispose()


def test_a_create_still_in_flight_when_the_desk_retries_is_made_once(w: World) -> None:
    """PayPal takes longer than the desk's timeout before it makes the refund."""
    paid = w.paypal.pay("30.00")
    real: Handle = w.paypal.handle
    slow = threading.Event()

    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if method == "POST" and path.endswith("/refund") and not slow.is_set():
            slow.set()
            threading.Event().wait(1.5)
        return real(method, path, headers, raw)

    w.paypal.handle = handle  # type: ignore[method-assign]
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    threading.Event().wait(0.7)  # the slow create lands
    settle(w)
    assert [v for v, s, _ in at_paypal(w, paid.capture_id)] == ["20.00"]
    assert status(w, case["id"]) == "refunded"


def test_money_out_while_paypal_was_down_is_found_before_a_person_pays_again(w: World) -> None:
    """The create is made but its answer lost; PayPal then answers nothing (look-ups included)
    until the case parks; a person approves the parked case once PayPal is back."""
    paid, case = awaiting(w, "900.00", "400.00")
    w.paypal.ignore_request_id = True
    real: Handle = w.paypal.handle
    made: list[bool] = []

    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if made and path != "/v1/oauth2/token":
            return answered(fail(503))
        answer = real(method, path, headers, raw)
        if method == "POST" and path.endswith("/refund"):
            made.append(True)
            return answered(fail(500))
        return answer

    w.paypal.handle = handle  # type: ignore[method-assign]
    approve(w, case["id"])
    for i in range(14):
        w.desk.sweep(seconds_ahead=3600 * (i + 1), batches=1)
        if status(w, case["id"]) == "parked":
            break
    assert status(w, case["id"]) == "parked"
    w.paypal.handle = real  # type: ignore[method-assign,assignment]
    try_approve(w, case["id"])
    settle(w)
    assert [v for v, s, _ in at_paypal(w, paid.capture_id)] == ["400.00"]
    assert status(w, case["id"]) == "refunded"


# After a create whose answer was lost, one 4xx (404, 400) on the recovery look-up (GET capture
# or order) must not record the execution failed: PayPal made the refund.
LOOK_UPS = [(404, "/checkout/orders/"), (404, "/payments/captures/"), (400, "/checkout/orders/")]


def lost_answer_then_not_found(w: World, code: int, where: str) -> None:
    """The create is made but its answer lost (a timeout); the next GET of `where` answers
    `code` once (PayPal not finding the payment for a moment), then as it should."""
    w.paypal.stall_after_refund(1.3)
    real: Handle = w.paypal.handle
    made: list[bool] = []
    hidden: list[bool] = []

    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if made and not hidden and method == "GET" and where in path:
            hidden.append(True)
            return answered(fail(code))
        if method == "POST" and path.endswith("/refund"):
            made.append(True)  # PayPal commits the refund first, then stalls its answer
        return real(method, path, headers, raw)

    w.paypal.handle = handle  # type: ignore[method-assign]


@pytest.mark.parametrize("code, where", LOOK_UPS)
def test_a_4xx_on_the_look_up_after_a_lost_answer_is_not_proof_nothing_went_out(
    w: World, code: int, where: str
) -> None:
    paid = w.paypal.pay("100.00")
    lost_answer_then_not_found(w, code, where)
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert [(v, s) for v, s, _ in at_paypal(w, paid.capture_id)] == [("20.00", "COMPLETED")]
    after = w.desk.get(case["id"])
    assert [r["status"] for r in after["refunds"]] != ["failed"], after["park_reason"]
    assert after["status"] == "refunded", (after["status"], after["park_reason"])


@pytest.mark.parametrize("code, where", LOOK_UPS)
def test_a_person_approving_after_a_4xx_on_the_look_up_pays_nothing_more(
    w: World, code: int, where: str
) -> None:
    paid = w.paypal.pay("100.00")
    lost_answer_then_not_found(w, code, where)
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    if status(w, case["id"]) in ("parked", "awaiting_approval"):
        try_approve(w, case["id"])
    settle(w)
    assert paid_out(w, paid.capture_id) == Decimal("20.00"), at_paypal(w, paid.capture_id)


# ---------------------------------------------------------------- answers the desk did not expect


@pytest.mark.parametrize("word", ["ON_HOLD", "PARTIALLY_COMPLETED", ""])
def test_a_refund_answered_with_a_status_the_desk_does_not_know_is_made_once(
    w: World, word: str
) -> None:
    paid = w.paypal.pay("30.00")
    w.paypal.ignore_request_id = True
    answering(w, lambda body: body.update(status=word))
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert [v for v, s, _ in at_paypal(w, paid.capture_id)] == ["20.00"]
    assert status(w, case["id"]) == "refunded"  # PayPal holds it COMPLETED


def test_a_refund_paypal_holds_in_a_status_the_desk_does_not_know_is_made_once(w: World) -> None:
    """A status PayPal adds one day: never success, never failure (which could re-send)."""
    paid = w.paypal.pay("30.00")
    w.paypal.ignore_request_id = True
    real: Handle = w.paypal.handle

    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        answer = real(method, path, headers, raw)
        if method == "POST" and path.endswith("/refund"):
            with w.paypal.lock:
                for r in w.paypal._refunds.values():
                    r["status"] = "UNDER_REVIEW"
            answer = (answer[0], {**answer[1], "status": "UNDER_REVIEW"})
        return answer

    w.paypal.handle = handle  # type: ignore[method-assign]
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert len(creates(w)) == 1
    assert status(w, case["id"]) != "refunded"


def test_a_refund_answered_minimal_despite_prefer_is_recorded_at_its_amount(w: World) -> None:
    """PayPal answers `return=minimal` (id, status, links) whatever the Prefer header says."""
    paid = w.paypal.pay("30.00")

    def minimal(body: dict[str, Any]) -> None:
        for key in set(body) - {"id", "status", "links"}:
            del body[key]

    answering(w, minimal)
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    after = w.desk.get(case["id"])
    assert after["status"] == "refunded"
    assert [(r["amount"], r["status"]) for r in after["refunds"]] == [("20.00", "succeeded")]
    assert len(creates(w)) == 1


@pytest.mark.parametrize("word", ["FAILED", "CANCELLED"])
def test_a_refund_paypal_answers_failed_at_once_is_not_called_refunded(w: World, word: str) -> None:
    paid = w.paypal.pay("30.00")
    real: Handle = w.paypal.handle

    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        code, body = real(method, path, headers, raw)
        if method == "POST" and path.endswith("/refund") and code == 201:
            with w.paypal.lock:
                w.paypal._refunds[body["id"]]["status"] = word
            body = {**body, "status": word}
        return code, body

    w.paypal.handle = handle  # type: ignore[method-assign]
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert status(w, case["id"]) != "refunded"
    assert len(creates(w)) == 1  # a person decides whether to try again


def test_a_refund_answered_in_html_by_a_proxy_after_paypal_made_it_pays_once(w: World) -> None:
    paid = w.paypal.pay("30.00")
    w.paypal.ignore_request_id = True
    real: Handle = w.paypal.handle
    done: list[bool] = []

    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        code, body = real(method, path, headers, raw)
        if method == "POST" and path.endswith("/refund") and not done:
            done.append(True)
            return 502, "<html><body>Bad Gateway</body></html>"
        return code, body

    w.paypal.handle = handle  # type: ignore[method-assign]
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert [v for v, s, _ in at_paypal(w, paid.capture_id)] == ["20.00"]
    assert status(w, case["id"]) == "refunded"


def without_related_ids(w: World, *, links: bool = False) -> None:
    """PayPal's capture answers without `supplementary_data` (optional in its description),
    and with `links`, without the link up to the order either."""
    real: Handle = w.paypal.handle

    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        code, body = real(method, path, headers, raw)
        if method == "GET" and "/payments/captures/" in path and code == 200:
            body = {k: v for k, v in body.items() if k != "supplementary_data"}
            if links:
                body["links"] = [link for link in body["links"] if link["rel"] != "up"]
        return code, body

    w.paypal.handle = handle  # type: ignore[method-assign]


@pytest.mark.parametrize("links", [False, True], ids=["up-link", "no-link"])
def test_a_capture_that_does_not_name_its_order_is_refunded_once_or_not_at_all(
    w: World, links: bool
) -> None:
    paid = w.paypal.pay("30.00")
    without_related_ids(w, links=links)
    w.paypal.ignore_request_id = True
    w.paypal.stall_after_refund(1.4)
    answer = ask(w, paid.capture_id, "20.00")
    settle(w)
    assert len(at_paypal(w, paid.capture_id)) <= 1
    if at_paypal(w, paid.capture_id):
        assert answer.status_code < 300 and status(w, answer.json()["id"]) == "refunded"


# ---------------------------------------------------------------- a refund PayPal keeps pending


def pending_case(w: World, amount: str = "20.00") -> tuple[Any, dict[str, Any], str]:
    paid = w.paypal.pay("30.00")
    w.paypal.next_refund_pending()
    case = case_of(w, paid.capture_id, amount)
    [held] = w.paypal.refunds(paid.capture_id)
    assert held["status"] == "PENDING"
    return paid, case, held["id"]


def test_a_pending_refund_is_not_called_refunded_before_paypal_ends_it(w: World) -> None:
    _paid, case, _ = pending_case(w)
    settle(w, rounds=2)
    assert status(w, case["id"]) != "refunded"
    assert len(creates(w)) == 1


@pytest.mark.parametrize("end", ["FAILED", "CANCELLED"])
def test_a_pending_refund_that_fails_quietly_is_followed_and_reopens_the_case(
    w: World, end: str
) -> None:
    """No notification arrives (the webhook is down): following it alone must find the end."""
    paid, case, refund = pending_case(w)
    w.paypal.settle_refund(refund, end)
    events(w)  # lost
    settle(w)
    after = w.desk.get(case["id"])
    assert after["status"] != "refunded", after
    assert after["status"] in ("parked", "awaiting_approval", "approved"), after["status"]
    assert len(creates(w)) == 1  # nothing re-sent without a person
    assert paid_out(w, paid.capture_id) == 0


def test_a_pending_refund_that_completes_quietly_is_followed_to_refunded(w: World) -> None:
    paid, case, refund = pending_case(w)
    w.paypal.settle_refund(refund, "COMPLETED")
    events(w)  # lost
    settle(w)
    assert status(w, case["id"]) == "refunded"
    assert at_paypal(w, paid.capture_id)[0][:2] == ("20.00", "COMPLETED")


def test_a_pending_refund_holds_its_amount_against_a_second_case(w: World) -> None:
    paid, _case, _ = pending_case(w)
    second = case_of(w, paid.capture_id, "20.00")
    settle(w, rounds=2)
    assert paid_out(w, paid.capture_id) <= Decimal("30.00")
    assert len(creates(w)) == 1 or status(w, second["id"]) != "refunded"


def test_a_failed_pending_refund_frees_its_amount_for_a_new_case(w: World) -> None:
    paid, _case, refund = pending_case(w)
    w.paypal.settle_refund(refund, "FAILED")
    for event in events(w):
        post_event(w, event)
    second = case_of(w, paid.capture_id, "20.00")
    if second["status"] == "awaiting_approval":  # a possible duplicate: a person looks
        approve(w, second["id"])
    settle(w)
    assert status(w, second["id"]) == "refunded"
    assert paid_out(w, paid.capture_id) == Decimal("20.00")


def test_a_refund_pending_for_days_is_never_paid_a_second_time(w: World) -> None:
    """An eCheck refund stays PENDING for a week. Whatever the desk does meanwhile (follow
    it, park it for a person, let the person approve again), one refund is all that leaves."""
    paid, case, refund = pending_case(w)
    for day in range(1, 9):
        w.desk.sweep(seconds_ahead=86400 * day)
        if status(w, case["id"]) in ("parked", "awaiting_approval"):
            try_approve(w, case["id"])
    w.paypal.settle_refund(refund, "COMPLETED")
    for event in events(w):
        post_event(w, event)
    w.desk.sweep(seconds_ahead=86400 * 9)
    assert [(v, s) for v, s, _ in at_paypal(w, paid.capture_id)] == [("20.00", "COMPLETED")]
    assert status(w, case["id"]) == "refunded"


# One 404 on GET /v2/payments/refunds/{id} of a PENDING refund (which the order still lists)
# must not mark its execution failed: the refund is followed to its end.
@pytest.mark.parametrize(
    "answer",
    ["404", "ON_HOLD", "503", "429", "401"],
)
def test_a_pending_refund_paypal_cannot_show_is_not_given_up_for_lost(
    w: World, answer: str
) -> None:
    """Following a PENDING refund, PayPal's GET of it answers 404 (not visible yet), a status
    the desk does not know, or 503. None of these is a failure: never a second refund."""
    paid, case, refund = pending_case(w)
    real: Handle = w.paypal.handle

    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        code, body = real(method, path, headers, raw)
        if method == "GET" and "/payments/refunds/" in path:
            if answer == "404":
                return answered(fail(404))
            if answer in ("503", "429", "401"):
                return answered(fail(int(answer)))
            return code, {**body, "status": answer}
        return code, body

    w.paypal.handle = handle  # type: ignore[method-assign]
    for day in range(1, 6):
        w.desk.sweep(seconds_ahead=86400 * day)
        if status(w, case["id"]) in ("parked", "awaiting_approval"):
            try_approve(w, case["id"])
    w.paypal.handle = real  # type: ignore[method-assign,assignment]
    w.paypal.settle_refund(refund, "COMPLETED")
    events(w)
    w.desk.sweep(seconds_ahead=86400 * 7)
    assert [(v, s) for v, s, _ in at_paypal(w, paid.capture_id)] == [("20.00", "COMPLETED")]
    assert status(w, case["id"]) == "refunded"


def not_shown_once(w: World) -> None:
    """PayPal's GET of a refund answers 404 once (the refund not visible there yet), then
    answers as it should; the order lists the refund all along."""
    real: Handle = w.paypal.handle
    shown: list[bool] = []

    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if method == "GET" and "/payments/refunds/" in path and not shown:
            shown.append(True)
            return answered(fail(404))
        return real(method, path, headers, raw)

    w.paypal.handle = handle  # type: ignore[method-assign]


def test_a_pending_refund_hidden_once_is_still_followed_to_completed(w: World) -> None:
    _paid, case, refund = pending_case(w)
    not_shown_once(w)
    settle(w, rounds=3)
    w.paypal.settle_refund(refund, "COMPLETED")
    for event in events(w):  # PayPal says so, verified, too
        assert post_event(w, event).status_code < 300
    settle(w, rounds=3)
    after = w.desk.get(case["id"])
    assert [(r["amount"], r["status"]) for r in after["refunds"]] == [("20.00", "succeeded")]
    assert after["status"] == "refunded", (after["status"], after["park_reason"])
    assert about(findings(w), refund) == []


def test_a_person_approving_a_case_whose_refund_is_still_pending_pays_nothing_more(
    w: World,
) -> None:
    paid = w.paypal.pay("100.00")
    w.paypal.next_refund_pending()
    case = case_of(w, paid.capture_id, "20.00")
    [held] = w.paypal.refunds(paid.capture_id)
    not_shown_once(w)
    settle(w, rounds=2)
    if status(w, case["id"]) in ("parked", "awaiting_approval"):
        try_approve(w, case["id"])  # the park reason asks a person to decide
    settle(w)
    w.paypal.settle_refund(held["id"], "COMPLETED")
    for event in events(w):
        post_event(w, event)
    settle(w)
    assert paid_out(w, paid.capture_id) == Decimal("20.00"), at_paypal(w, paid.capture_id)
    assert len(creates(w)) == 1


# ---------------------------------------------------------------- money moved outside the desk


def test_a_dashboard_refund_between_the_look_up_and_the_create_parks_with_a_sentence(
    w: World,
) -> None:
    paid = w.paypal.pay("30.00")
    outside: list[str] = []
    on_first_create(w, lambda: outside.append(w.paypal.refund_directly(paid.capture_id, "15.00")))
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert at_paypal(w, paid.capture_id) == [("15.00", "COMPLETED", None)]
    after = w.desk.get(case["id"])
    assert after["status"] == "parked", after["status"]
    assert after["park_reason"] and "15.00" not in (after["customer_message"] or "")
    assert len(creates(w)) == 1  # a refusal is not retried


def test_a_same_amount_dashboard_refund_is_not_taken_for_ours(w: World) -> None:
    """PayPal refused the desk's create with a 503 (nothing made) while someone refunded the
    same amount in the dashboard: that refund has no custom_id and is not the desk's."""
    paid = w.paypal.pay("50.00")
    outside: list[str] = []
    real: Handle = w.paypal.handle

    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if method == "POST" and path.endswith("/refund") and not outside:
            outside.append(w.paypal.refund_directly(paid.capture_id, "20.00"))
            return answered(fail(503))
        return real(method, path, headers, raw)

    w.paypal.handle = handle  # type: ignore[method-assign]
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    after = w.desk.get(case["id"])
    assert outside[0] not in [r["id"] for r in after["refunds"]]
    ours = [c for _, _, c in at_paypal(w, paid.capture_id) if c]
    assert after["status"] != "refunded" or len(ours) == 1


def test_a_capture_refunded_in_full_outside_before_the_approval_executes_pays_nothing(
    w: World,
) -> None:
    paid, case = awaiting(w, "100.00", "100.00")
    w.paypal.refund_directly(paid.capture_id)
    try:
        approve(w, case["id"])
    except approvals.Refused as refused:
        assert refused.message
    settle(w)
    assert [v for v, _, c in at_paypal(w, paid.capture_id)] == ["100.00"]
    after = w.desk.get(case["id"])
    assert after["status"] != "refunded"
    assert after["status"] in ("awaiting_approval", "denied") or after["park_reason"]


def test_a_reversal_before_the_approval_executes_pays_nothing(w: World) -> None:
    paid, case = awaiting(w, "100.00", "60.00")
    w.paypal.reverse(paid.capture_id)
    try_approve(w, case["id"])
    settle(w)
    assert paid_out(w, paid.capture_id) == Decimal("100.00")  # the reversal alone
    assert status(w, case["id"]) != "refunded"


def test_a_partial_dashboard_refund_before_the_approval_leaves_too_little(w: World) -> None:
    paid, case = awaiting(w, "100.00", "80.00")
    w.paypal.refund_directly(paid.capture_id, "30.00")
    try_approve(w, case["id"])
    settle(w)
    assert paid_out(w, paid.capture_id) == Decimal("30.00")
    assert status(w, case["id"]) != "refunded"


def test_a_failed_dashboard_refund_leaves_its_amount_refundable(w: World) -> None:
    paid = w.paypal.pay("30.00")
    outside = w.paypal.refund_directly(paid.capture_id, "30.00")
    w.paypal.settle_refund(outside, "FAILED")
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert status(w, case["id"]) == "refunded"
    assert paid_out(w, paid.capture_id) == Decimal("20.00")


def test_a_cancelled_dashboard_refund_leaves_its_amount_refundable(w: World) -> None:
    paid = w.paypal.pay("30.00")
    w.paypal.next_refund_pending()
    with w.paypal.lock:  # a pending refund made outside the desk (the emulator's API path)
        capture = w.paypal._captures[paid.capture_id]
        outside = w.paypal._create(capture, {}, None)["id"]
    w.paypal.settle_refund(outside, "CANCELLED")
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert status(w, case["id"]) == "refunded"
    assert paid_out(w, paid.capture_id) == Decimal("20.00")


def test_a_pending_dashboard_refund_holds_its_amount(w: World) -> None:
    paid = w.paypal.pay("30.00")
    w.paypal.next_refund_pending()
    with w.paypal.lock:
        capture = w.paypal._captures[paid.capture_id]
        w.paypal._create(capture, {"amount": {"currency_code": "USD", "value": "25.00"}}, None)
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert paid_out(w, paid.capture_id) == Decimal("25.00")
    after = w.desk.get(case["id"])
    assert after["status"] in ("denied", "parked", "awaiting_approval"), after["status"]
    assert creates(w) == []  # the desk knew 5.00 was left before asking


# ---------------------------------------------------------------- money in PayPal's decimals


def policy_in(currency: str, small: int) -> str:
    """The acme policy in another currency, paying damaged orders up to `small` itself."""
    return (
        ACME.read_text()
        .replace("currency: USD", f"currency: {currency}")
        .replace("request.amount <= 50", f"request.amount <= {small}")
        .replace("500}", "5000000}")
        .replace("request.amount > 500", "request.amount > 5000000")
    )


@pytest.mark.parametrize("currency", ["JPY", "HUF", "TWD"])
def test_a_whole_amount_in_a_currency_without_decimals_goes_out_whole(
    w: World, currency: str
) -> None:
    w.desk.publish(policy_in(currency, 5000))
    paid = w.paypal.pay("3000", currency)
    case = case_of(w, paid.capture_id, "1200", currency=currency)
    settle(w)
    assert at_paypal(w, paid.capture_id) == [
        ("1200", "COMPLETED", case["refunds"][0]["execution_id"])
    ]
    assert status(w, case["id"]) == "refunded"


@pytest.mark.parametrize("currency", ["HUF", "TWD"])
def test_a_whole_amount_written_with_zero_cents_goes_out_whole(w: World, currency: str) -> None:
    """ISO gives HUF and TWD two decimals, PayPal none: 1200.00 is still 1200."""
    w.desk.publish(policy_in(currency, 5000))
    paid = w.paypal.pay("3000", currency)
    case = case_of(w, paid.capture_id, "1200.00", currency=currency)
    settle(w)
    assert [(v, s) for v, s, _ in at_paypal(w, paid.capture_id)] == [("1200", "COMPLETED")]
    assert status(w, case["id"]) == "refunded"


@pytest.mark.parametrize("currency", ["HUF", "TWD"])
def test_a_fraction_paypal_cannot_send_is_refused_before_anything_is_sent(
    w: World, currency: str
) -> None:
    w.desk.publish(policy_in(currency, 5000))
    paid = w.paypal.pay("3000", currency)
    answer = ask(w, paid.capture_id, "1200.50", currency=currency)
    settle(w)
    assert creates(w) == []
    assert at_paypal(w, paid.capture_id) == []
    if answer.status_code < 300:
        case = w.desk.get(answer.json()["id"])
        assert case["status"] in ("denied", "parked"), case["status"]
        assert case["park_reason"] or case["customer_message"]


@pytest.mark.parametrize("currency", ["HUF", "TWD"])
def test_a_person_approving_a_fraction_paypal_cannot_send_sends_nothing(
    w: World, currency: str
) -> None:
    w.desk.publish(policy_in(currency, 5000))
    paid = w.paypal.pay("3000", currency)
    case = case_of(w, paid.capture_id, "2000", currency=currency, damaged=False)
    assert case["status"] == "awaiting_approval", case
    try:
        approve(w, case["id"], amount="1999.50")
    except approvals.Refused as refused:
        assert refused.message
    settle(w)
    assert at_paypal(w, paid.capture_id) == []
    assert creates(w) == []
    after = w.desk.get(case["id"])
    assert after["status"] in ("awaiting_approval", "parked"), after["status"]
    assert after["status"] == "awaiting_approval" or after["park_reason"]


@pytest.mark.parametrize("currency", ["JPY", "HUF", "TWD"])
def test_the_whole_capture_without_an_amount_goes_out_whole(w: World, currency: str) -> None:
    w.desk.publish(policy_in(currency, 5000))
    paid = w.paypal.pay("4999", currency)
    case = case_of(w, paid.capture_id, None, currency=currency)
    settle(w)
    assert [(v, s) for v, s, _ in at_paypal(w, paid.capture_id)] == [("4999", "COMPLETED")]
    assert status(w, case["id"]) == "refunded"
    # an empty body would refund whatever is left when it lands, not what was decided
    assert [b["amount"] for _, b in creates(w)] == [{"currency_code": currency, "value": "4999"}]


@pytest.mark.parametrize(
    "currency, captured, asked",
    [("JPY", "1", "1"), ("JPY", "10000000", "9999999"), ("HUF", "100000000", "10000000"),
     ("TWD", "999999", "100"), ("USD", "0.10", "0.10"), ("USD", "1000000.00", "100000.00"),
     ("EUR", "0.01", "0.01")],
)  # fmt: skip
def test_amounts_at_the_edges_go_out_exactly(
    w: World, currency: str, captured: str, asked: str
) -> None:
    big = policy_in(currency, 10**9).replace(
        "max_amount_per_hour: 20000", "max_amount_per_hour: 10000000000"
    )
    w.desk.publish(big)
    paid = w.paypal.pay(captured, currency)
    case = case_of(w, paid.capture_id, asked, currency=currency)
    settle(w)
    assert [(v, s) for v, s, _ in at_paypal(w, paid.capture_id)] == [(asked, "COMPLETED")]
    assert status(w, case["id"]) == "refunded"


def test_one_cent_more_than_is_left_is_never_sent(w: World) -> None:
    paid = w.paypal.pay("30.00")
    w.paypal.refund_directly(paid.capture_id, "29.99")
    over = case_of(w, paid.capture_id, "0.02")
    exact = case_of(w, paid.capture_id, "0.01")
    settle(w)
    assert over["status"] != "refunded" and status(w, over["id"]) != "refunded"
    assert paid_out(w, paid.capture_id) == Decimal("30.00")
    assert status(w, exact["id"]) == "refunded"


def test_a_person_approves_exactly_the_amount_paypal_sends(w: World) -> None:
    paid, case = awaiting(w, "100.00", "80.00")
    approve(w, case["id"], amount="15.35")
    settle(w)
    assert [(v, s) for v, s, _ in at_paypal(w, paid.capture_id)] == [("15.35", "COMPLETED")]
    assert status(w, case["id"]) == "refunded"


@pytest.mark.parametrize("amount", ["0", "0.00", "-5.00", "1.005", "1e3", "20,00", " "])
def test_an_amount_that_is_no_refund_sends_nothing(w: World, amount: str) -> None:
    paid = w.paypal.pay("30.00")
    answer = ask(w, paid.capture_id, amount)
    settle(w)
    assert creates(w) == []
    assert answer.status_code == 422 or w.desk.get(answer.json()["id"])["status"] != "refunded"


def test_a_refund_past_paypals_time_limit_is_not_sent_and_says_why(w: World) -> None:
    paid = w.paypal.pay("30.00", created=clock.now() - timedelta(days=181))
    case = case_of(w, paid.capture_id, "20.00")
    if case["status"] == "awaiting_approval":
        try:
            approve(w, case["id"])
        except approvals.Refused as refused:
            assert refused.message
    settle(w)
    assert paid_out(w, paid.capture_id) == 0
    after = w.desk.get(case["id"])
    assert after["status"] in ("denied", "parked", "awaiting_approval"), after["status"]
    assert after["status"] == "awaiting_approval" or (
        after["park_reason"] or after["customer_message"]
    )


# ---------------------------------------------------------------- who asks, and through what


def test_a_customer_who_is_not_the_payer_gets_nothing(w: World) -> None:
    paid = w.paypal.pay("30.00", email="grace@example.com")
    answer = ask(w, paid.capture_id, "20.00")
    settle(w)
    assert at_paypal(w, paid.capture_id) == []
    if answer.status_code < 300:
        assert status(w, answer.json()["id"]) != "refunded"


def test_the_merchants_own_email_is_not_the_payer(w: World) -> None:
    paid = w.paypal.pay("30.00")
    answer = ask(w, paid.capture_id, "20.00", email="merchant@example.com")
    settle(w)
    assert at_paypal(w, paid.capture_id) == []
    if answer.status_code < 300:
        case = w.desk.get(answer.json()["id"])
        assert case["status"] != "refunded" and not case["customer_verified"]


def test_a_payer_that_cannot_be_read_at_intake_is_not_taken_on_trust(w: World) -> None:
    """PayPal answers the capture but not its order (where the payer is): the desk cannot
    tell who paid, so it must not pay someone who is not the payer."""
    paid = w.paypal.pay("30.00", email="grace@example.com")
    real: Handle = w.paypal.handle

    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if method == "GET" and "/checkout/orders/" in path:
            return answered(fail(503))
        return real(method, path, headers, raw)

    w.paypal.handle = handle  # type: ignore[method-assign]
    answer = ask(w, paid.capture_id, "20.00")
    w.paypal.handle = real  # type: ignore[method-assign,assignment]
    settle(w)
    assert at_paypal(w, paid.capture_id) == []
    if answer.status_code < 300:
        assert status(w, answer.json()["id"]) != "refunded"


def test_a_payer_email_differing_only_in_case_is_the_payer(w: World) -> None:
    paid = w.paypal.pay("30.00", email="Ada@Example.COM")
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert status(w, case["id"]) == "refunded"


def test_a_customer_cannot_dodge_the_refund_count_by_writing_the_email_in_capitals(
    w: World,
) -> None:
    for _ in range(5):
        paid = w.paypal.pay("30.00")
        assert case_of(w, paid.capture_id, "20.00")["status"] == "refunded"
    paid = w.paypal.pay("30.00")
    sixth = case_of(w, paid.capture_id, "20.00", email="ADA@Example.com")
    settle(w)
    assert sixth["status"] != "refunded" and at_paypal(w, paid.capture_id) == []


@pytest.mark.parametrize("word", ["PENDING", "DECLINED", "FAILED"])
def test_a_capture_that_never_completed_is_never_refunded(w: World, word: str) -> None:
    """PayPal's capture statuses include PENDING (an eCheck), DECLINED and FAILED: no money
    arrived, so none may leave (the emulator would take the refund: the desk must not ask)."""
    paid = w.paypal.pay("30.00")
    with w.paypal.lock:
        w.paypal._captures[paid.capture_id]["status"] = word
    answer = ask(w, paid.capture_id, "20.00")
    if answer.status_code < 300 and answer.json()["status"] == "awaiting_approval":
        with contextlib.suppress(approvals.Refused):
            approve(w, answer.json()["id"])
    settle(w)
    assert at_paypal(w, paid.capture_id) == []
    assert creates(w) == []


def test_a_processor_that_disagrees_with_the_payment_is_refused(w: World) -> None:
    paid = w.paypal.pay("30.00")
    answer = ask(w, paid.capture_id, "20.00", processor="stripe")
    assert answer.status_code == 422, answer.text
    settle(w)
    assert creates(w) == []


def test_with_two_processors_a_payment_named_for_the_other_is_refused(
    any_db_url: str, remote: PayPalRemote
) -> None:
    settings = {**remote.settings(), "REFUND_DESK_PROCESSOR": "sandbox,paypal"}
    runtime = build(make_settings(any_db_url, **settings), db=Database.from_url(any_db_url))
    try:
        desk = RemoteHarness(runtime, remote)
        desk.publish()
        w = World(desk, remote, any_db_url)
        ours = desk.sandbox.create_payment(
            amount=3000, currency="USD", email=CUSTOMER, name="Ada Lovelace",
            chargebacks=0, created_at=clock.now() - timedelta(days=3),
        )  # fmt: skip
        paid = remote.emulator.pay("30.00")
        assert ask(w, ours, "20.00", processor="paypal").status_code == 422
        assert ask(w, paid.capture_id, "20.00", processor="sandbox").status_code == 422
        assert creates(w) == [] and desk.sandbox.show_payment(ours)["refunds"] == []
        at_sandbox = case_of(w, ours, "20.00")
        at_paypal_ = case_of(w, paid.order_id, "20.00", processor="paypal")
        assert at_sandbox["processor"] == "sandbox" and at_paypal_["processor"] == "paypal"
        assert [v for v, _, _ in at_paypal(w, paid.capture_id)] == ["20.00"]
        assert len(desk.sandbox.show_payment(ours)["refunds"]) == 1
    finally:
        runtime.db.dispose()


def test_a_currency_other_than_the_captures_pays_nothing(w: World) -> None:
    paid = w.paypal.pay("30.00", "EUR")
    answer = ask(w, paid.capture_id, "20.00", currency="USD")
    settle(w)
    assert creates(w) == []
    if answer.status_code < 300:
        assert status(w, answer.json()["id"]) != "refunded"


def test_an_id_paypal_does_not_know_is_refused_cleanly(w: World) -> None:
    answer = ask(w, "9ZZZZZZZZZZZZZZZZ", "20.00")
    assert answer.status_code < 500, answer.text
    assert creates(w) == []


# ---------------------------------------------------------------- PayPal says no


@pytest.mark.parametrize("issue", sorted(ISSUES))
def test_each_refusal_paypal_lists_parks_the_case_with_a_sentence(w: World, issue: str) -> None:
    paid = w.paypal.pay("30.00")
    w.paypal.decline_next(issue, times=50)
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    after = w.desk.get(case["id"])
    assert after["status"] == "parked", after["status"]
    assert after["park_reason"] and len(after["park_reason"]) > 20
    assert at_paypal(w, paid.capture_id) == []
    assert len(creates(w)) == 1  # a refusal is an answer: not asked again without a person


@pytest.mark.parametrize(
    "status_code, name",
    [(400, "INVALID_REQUEST"), (403, "NOT_AUTHORIZED"), (404, "RESOURCE_NOT_FOUND"),
     (422, "UNPROCESSABLE_ENTITY")],
)  # fmt: skip
def test_an_answer_the_desk_did_not_expect_parks_and_is_not_retried_forever(
    w: World, status_code: int, name: str
) -> None:
    paid = w.paypal.pay("30.00")
    real: Handle = w.paypal.handle

    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if method == "POST" and path.endswith("/refund"):
            detail = {"issue": "SOMETHING_PAYPAL_ADDED_LATER", "description": "New."}
            return answered(fail(status_code, detail, name=name))
        return real(method, path, headers, raw)

    w.paypal.handle = handle  # type: ignore[method-assign]
    case = case_of(w, paid.capture_id, "20.00")
    settle(w, rounds=10)
    after = w.desk.get(case["id"])
    assert after["status"] == "parked", after["status"]
    assert after["park_reason"]
    assert at_paypal(w, paid.capture_id) == []
    assert len(creates(w)) <= 6


def test_credentials_revoked_for_good_park_the_case_without_paying(w: World) -> None:
    """Intake answers 503 while PayPal refuses the desk (nothing to check the payment with);
    an approved case whose credentials die before its create must not spin forever."""
    paid, case = awaiting(w, "100.00", "60.00")
    w.paypal.client_secret = "rotated-in-the-dashboard"
    w.paypal.expire_tokens()
    try_approve(w, case["id"])
    settle(w, rounds=12)
    after = w.desk.get(case["id"])
    assert after["status"] in ("parked", "approved", "awaiting_approval"), after["status"]
    assert after["status"] != "parked" or after["park_reason"]
    assert at_paypal(w, paid.capture_id) == []
    assert len(creates(w)) <= 12


def test_a_person_pays_after_insufficient_funds_are_topped_up(w: World) -> None:
    paid = w.paypal.pay("30.00")
    w.paypal.decline_next("REFUND_FAILED_INSUFFICIENT_FUNDS")
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert status(w, case["id"]) == "parked"
    approve(w, case["id"])
    settle(w)
    assert [(v, s) for v, s, _ in at_paypal(w, paid.capture_id)] == [("20.00", "COMPLETED")]
    assert status(w, case["id"]) == "refunded"


# ---------------------------------------------------------------- notifications


def refunded_case(w: World, amount: str = "20.00") -> tuple[Any, dict[str, Any], str]:
    paid = w.paypal.pay("30.00")
    case = case_of(w, paid.capture_id, amount)
    assert case["status"] == "refunded", case
    [ours] = case["refunds"]
    return paid, case, str(ours["id"])


def test_a_failure_replayed_with_new_transmission_headers_reopens_nothing_twice(w: World) -> None:
    """The refund fails, the case reopens, a person pays again; PayPal then resends the old
    failure (new transmission id, time and signature): the second refund stands."""
    paid, case, refund = refunded_case(w)
    events(w)
    w.paypal.settle_refund(refund, "FAILED")
    [failed] = of_type(events(w), "PAYMENT.REFUND.FAILED")
    assert post_event(w, failed).status_code < 300
    assert status(w, case["id"]) == "parked"
    approve(w, case["id"])
    settle(w)
    assert status(w, case["id"]) == "refunded"
    events(w)
    before = revision(w, case["id"])
    answer = post_event(w, resigned(w, failed))
    assert answer.status_code < 500
    assert status(w, case["id"]) == "refunded" and revision(w, case["id"]) == before
    settle(w)
    assert [s for _, s, _ in at_paypal(w, paid.capture_id)] == ["FAILED", "COMPLETED"]


def test_a_notification_signed_for_another_webhook_changes_nothing(w: World) -> None:
    _paid, case, refund = refunded_case(w)
    events(w)
    w.paypal.settle_refund(refund, "FAILED")
    [failed] = of_type(events(w), "PAYMENT.REFUND.FAILED")
    before = revision(w, case["id"])
    answer = post_event(w, resigned(w, failed, webhook_id="ANOTHERWEBHOOK9"))
    assert answer.status_code >= 400
    assert status(w, case["id"]) == "refunded" and revision(w, case["id"]) == before


def test_a_notification_altered_after_signing_changes_nothing(w: World) -> None:
    """A genuine COMPLETED notification whose body says FAILED: the signature covers the body."""
    _paid, case, _refund = refunded_case(w)
    [done] = of_type(events(w), "PAYMENT.CAPTURE.REFUNDED")
    body = json.loads(done[0])
    body["event_type"] = "PAYMENT.REFUND.FAILED"
    body["resource"]["status"] = "FAILED"
    answer = post_event(w, (json.dumps(body).encode(), done[1]))
    assert answer.status_code >= 400
    assert status(w, case["id"]) == "refunded"
    assert w.desk.get(case["id"])["refunds"][0]["status"] == "succeeded"


@pytest.mark.parametrize("answer", [{"verification_status": "success"}, {}, {"status": "SUCCESS"}])
def test_a_verification_answer_other_than_success_is_not_belief(
    w: World, answer: dict[str, str]
) -> None:
    _paid, case, refund = refunded_case(w)
    events(w)
    w.paypal.settle_refund(refund, "FAILED")
    [failed] = of_type(events(w), "PAYMENT.REFUND.FAILED")
    real: Handle = w.paypal.handle

    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if path.endswith("verify-webhook-signature"):
            return 200, answer
        return real(method, path, headers, raw)

    w.paypal.handle = handle  # type: ignore[method-assign]
    post_event(w, failed)
    assert status(w, case["id"]) == "refunded"


def test_an_unverifiable_notification_is_not_remembered_as_seen(w: World) -> None:
    """PayPal's verify-webhook-signature is down: the notification is refused (PayPal will
    retry it) and its id not taken; the retry once PayPal answers again is believed."""
    _paid, case, refund = refunded_case(w)
    events(w)
    w.paypal.settle_refund(refund, "FAILED")
    [failed] = of_type(events(w), "PAYMENT.REFUND.FAILED")
    real: Handle = w.paypal.handle

    def down(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if path.endswith("verify-webhook-signature"):
            return answered(fail(503))
        return real(method, path, headers, raw)

    w.paypal.handle = down  # type: ignore[method-assign]
    first = post_event(w, failed)
    assert first.status_code >= 500 or first.status_code == 429, first.text
    assert status(w, case["id"]) == "refunded"
    w.paypal.handle = real  # type: ignore[method-assign,assignment]
    retry = post_event(w, resigned(w, failed))
    assert retry.status_code < 300, retry.text
    assert status(w, case["id"]) == "parked"


def test_a_notification_arriving_as_the_token_dies_is_believed_on_its_retry(w: World) -> None:
    _paid, case, refund = refunded_case(w)
    events(w)
    w.paypal.settle_refund(refund, "FAILED")
    [failed] = of_type(events(w), "PAYMENT.REFUND.FAILED")
    w.paypal.expire_tokens()
    first = post_event(w, failed)
    if first.status_code >= 300:  # PayPal delivers it again
        assert post_event(w, resigned(w, failed)).status_code < 300
    assert status(w, case["id"]) == "parked"


def test_the_webhook_never_fetches_the_certificate_url_it_is_given(w: World) -> None:
    _paid, _case, _refund = refunded_case(w)
    [done] = of_type(events(w), "PAYMENT.CAPTURE.REFUNDED")
    headers = {**done[1], "PAYPAL-CERT-URL": w.remote.server.url + "/probe/cert.pem"}
    post_event(w, (done[0], headers))
    assert not any(p.startswith("/probe") for _, p, _, _ in w.paypal.requests)


def test_a_failure_of_a_refund_made_in_the_dashboard_changes_no_case(w: World) -> None:
    paid, case, _ = refunded_case(w)
    other = w.paypal.refund_directly(paid.capture_id, "5.00")
    events(w)
    w.paypal.settle_refund(other, "FAILED")
    [failed] = of_type(events(w), "PAYMENT.REFUND.FAILED")
    before = revision(w, case["id"])
    answer = post_event(w, failed)
    assert answer.status_code < 500
    after = w.desk.get(case["id"])
    assert after["status"] == "refunded" and revision(w, case["id"]) == before
    assert [r["status"] for r in after["refunds"]] == ["succeeded"]


def test_failed_delivered_before_completed_leaves_the_case_reopened(w: World) -> None:
    """PENDING, then COMPLETED, then FAILED (the bank returned it): delivered backwards."""
    _paid, case, refund = pending_case(w)
    w.paypal.settle_refund(refund, "COMPLETED")
    w.paypal.settle_refund(refund, "FAILED")
    sent = [e for e in events(w) if json.loads(e[0])["resource_type"] == "refund"]
    assert [json.loads(e[0])["event_type"] for e in sent] == [
        "PAYMENT.REFUND.PENDING",
        "PAYMENT.CAPTURE.REFUNDED",
        "PAYMENT.REFUND.FAILED",
    ]
    for event in reversed(sent):
        assert post_event(w, event).status_code < 500
    settle(w, rounds=2)
    after = w.desk.get(case["id"])
    assert after["status"] != "refunded", after
    assert [r["status"] for r in after["refunds"]] == ["failed"]
    assert len(creates(w)) == 1


def test_completed_delivered_before_pending_leaves_the_case_refunded(w: World) -> None:
    _paid, case, refund = pending_case(w)
    w.paypal.settle_refund(refund, "COMPLETED")
    sent = [e for e in events(w) if json.loads(e[0])["resource_type"] == "refund"]
    for event in reversed(sent):
        assert post_event(w, event).status_code < 500
    settle(w, rounds=2)
    assert status(w, case["id"]) == "refunded"
    assert w.desk.get(case["id"])["refunds"][0]["status"] == "succeeded"


def test_a_stale_pending_notification_after_refunded_changes_nothing(w: World) -> None:
    _paid, case, refund = pending_case(w)
    [pending] = of_type(events(w), "PAYMENT.REFUND.PENDING")
    w.paypal.settle_refund(refund, "COMPLETED")
    for event in events(w):
        post_event(w, event)
    settle(w, rounds=1)
    assert status(w, case["id"]) == "refunded"
    before = revision(w, case["id"])
    assert post_event(w, resigned(w, pending)).status_code < 500
    settle(w, rounds=1)
    assert status(w, case["id"]) == "refunded" and revision(w, case["id"]) == before


def test_a_reversal_of_the_capture_is_no_refund_of_ours(w: World) -> None:
    paid, case, _ = refunded_case(w)
    events(w)
    w.paypal.reverse(paid.capture_id)
    for event in events(w):
        assert post_event(w, event).status_code < 500
    after = w.desk.get(case["id"])
    assert after["status"] == "refunded"
    assert [(r["amount"], r["status"]) for r in after["refunds"]] == [("20.00", "succeeded")]


def test_a_completed_notification_for_a_refund_whose_answer_was_lost_settles_it(
    w: World,
) -> None:
    paid = w.paypal.pay("30.00")
    w.paypal.ignore_request_id = True
    w.paypal.stall_after_refund(1.4)
    case = case_of(w, paid.capture_id, "20.00")
    for event in events(w):
        assert post_event(w, event).status_code < 500
    settle(w)
    assert [v for v, s, _ in at_paypal(w, paid.capture_id)] == ["20.00"]
    assert status(w, case["id"]) == "refunded"


def test_a_failure_notified_before_the_create_answers_is_not_lost(w: World) -> None:
    """PayPal makes the refund, fails it at once (the bank refused it) and notifies both before
    its answer to the create reaches the desk, an answer that still says COMPLETED."""
    paid = w.paypal.pay("30.00")
    real: Handle = w.paypal.handle
    told: list[int] = []

    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        code, body = real(method, path, headers, raw)
        if method == "POST" and path.endswith("/refund") and code == 201 and not told:
            w.paypal.settle_refund(body["id"], "FAILED")
            for event in events(w):
                told.append(post_event(w, event).status_code)
        return code, body

    w.paypal.handle = handle  # type: ignore[method-assign]
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert told and all(code < 500 for code in told), told
    assert [s for _, s, _ in at_paypal(w, paid.capture_id)] == ["FAILED"]
    after = w.desk.get(case["id"])
    assert after["status"] != "refunded", after["status"]
    assert [r["status"] for r in after["refunds"]] == ["failed"]


def test_a_failure_notified_while_the_answer_is_lost_is_not_lost(w: World) -> None:
    paid = w.paypal.pay("30.00")
    w.paypal.stall_after_refund(1.4)
    real: Handle = w.paypal.handle
    told: list[int] = []

    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if method == "POST" and path.endswith("/refund") and not told:

            def fail_and_tell() -> None:
                threading.Event().wait(0.3)
                [refund] = w.paypal.refunds(paid.capture_id)
                w.paypal.settle_refund(refund["id"], "FAILED")
                for event in events(w):
                    told.append(post_event(w, event).status_code)

            threading.Thread(target=fail_and_tell, daemon=True).start()
        return real(method, path, headers, raw)

    w.paypal.handle = handle  # type: ignore[method-assign]
    case = case_of(w, paid.capture_id, "20.00")
    settle(w)
    assert told and all(code < 500 for code in told), told
    assert [s for _, s, _ in at_paypal(w, paid.capture_id)] == ["FAILED"]
    after = w.desk.get(case["id"])
    assert after["status"] != "refunded", after["status"]
    assert len(creates(w)) == 1


def test_a_notification_with_no_paypal_headers_is_refused_without_asking_paypal(
    w: World,
) -> None:
    _paid, _case, _refund = refunded_case(w)
    [done] = of_type(events(w), "PAYMENT.CAPTURE.REFUNDED")
    asked = len(w.paypal.requests)
    answer = w.desk.webhook("/webhooks/paypal", done[0], {"Content-Type": "application/json"})
    assert 400 <= answer.status_code < 500
    assert not any(
        p.endswith("verify-webhook-signature") for _, p, _, _ in w.paypal.requests[asked:]
    )


@pytest.mark.parametrize("raw", [b"", b"not json", b"[]", b'{"event_type": 1}'])
def test_a_malformed_notification_is_a_client_error(w: World, raw: bytes) -> None:
    _body, headers = w.paypal.signed({"id": "WH-X", "event_type": "PAYMENT.REFUND.FAILED"})
    answer = w.desk.webhook("/webhooks/paypal", raw, headers)
    assert 400 <= answer.status_code < 500, answer.text


def test_the_paypal_webhook_is_not_there_without_paypal(any_db_url: str) -> None:
    desk = Harness(make_runtime(any_db_url))  # the sandbox alone
    try:
        answer = desk.client.post("/webhooks/paypal", content=b"{}")
        assert answer.status_code == 404
    finally:
        desk.runtime.db.dispose()


def test_the_paypal_webhook_is_not_there_without_a_webhook_id(
    any_db_url: str, remote: PayPalRemote
) -> None:
    settings = {k: v for k, v in remote.settings().items() if k != "PAYPAL_WEBHOOK_ID"}
    runtime = build(
        make_settings(any_db_url, **settings),
        db=Database.from_url(any_db_url),
        processor=remote.processor(),
    )
    try:
        desk = RemoteHarness(runtime, remote)
        body, headers = remote.emulator.signed({"id": "WH-1", "event_type": "X"})
        assert desk.webhook("/webhooks/paypal", body, headers).status_code == 404
    finally:
        runtime.db.dispose()


# ---------------------------------------------------------------- reconciliation


def findings(w: World, days: float = 1) -> list[Any]:
    report = reconcile(w.runtime.desk, since=clock.now() - timedelta(days=days))
    return list(report.findings)


def about(found: list[Any], refund: str) -> list[Any]:
    return [f for f in found if f.refund_id == refund]


def test_reconcile_names_a_dashboard_refund_on_a_payment_asked_about_by_order_id(
    w: World,
) -> None:
    paid = w.paypal.pay("30.00")
    case = case_of(w, paid.order_id, "20.00")
    assert case["status"] == "refunded"
    outside = w.paypal.refund_directly(paid.capture_id, "4.00")
    [finding] = about(findings(w), outside)
    assert finding.processor_amount == 400 and finding.our_amount is None


def test_reconcile_names_a_dashboard_refund_on_a_payment_whose_case_was_denied(
    w: World,
) -> None:
    """The desk knows the payment though it paid nothing on it."""
    paid = w.paypal.pay("30.00")
    case = case_of(w, paid.capture_id, "31.00")
    assert case["status"] == "denied", case["status"]
    outside = w.paypal.refund_directly(paid.capture_id, "4.00")
    assert len(about(findings(w), outside)) == 1


def test_reconcile_finds_a_dashboard_refund_today_on_a_payment_refunded_last_week(
    w: World,
) -> None:
    with clock.travel(-timedelta(days=8)):
        paid = w.paypal.pay("30.00")
        case = case_of(w, paid.capture_id, "20.00")
        assert case["status"] == "refunded"
    outside = w.paypal.refund_directly(paid.capture_id, "4.00")
    assert len(about(findings(w, days=1), outside)) == 1


def test_reconcile_finds_a_dashboard_refund_on_a_payment_whose_case_is_still_open(
    w: World,
) -> None:
    with clock.travel(-timedelta(days=3)):
        paid, _case = awaiting(w, "100.00", "60.00")
    outside = w.paypal.refund_directly(paid.capture_id, "10.00")
    assert len(about(findings(w, days=1), outside)) == 1


def test_reconcile_names_our_refund_paypal_does_not_hold(w: World) -> None:
    _paid, _case, refund = refunded_case(w)
    with w.paypal.lock:  # PayPal lost it (or it was made on another account)
        del w.paypal._refunds[refund]
    assert len(about(findings(w), refund)) == 1


def test_reconcile_names_an_amount_that_differs(w: World) -> None:
    _paid, _case, refund = refunded_case(w)
    with w.paypal.lock:
        w.paypal._refunds[refund]["amount"]["value"] = "21.00"
    [finding] = about(findings(w), refund)
    assert (finding.our_amount, finding.processor_amount) == (2000, 2100)


def test_reconcile_names_a_refund_that_failed_quietly(w: World) -> None:
    _paid, _case, refund = refunded_case(w)
    w.paypal.settle_refund(refund, "FAILED")
    events(w)  # the notification is lost
    [finding] = about(findings(w), refund)
    assert finding.processor_status == "failed" and finding.our_status == "succeeded"


def test_reconcile_with_paypal_down_does_not_call_our_refunds_missing(w: World) -> None:
    _paid, _case, refund = refunded_case(w)
    real: Handle = w.paypal.handle

    def down(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if method == "GET":
            return answered(fail(503))
        return real(method, path, headers, raw)

    w.paypal.handle = down  # type: ignore[method-assign]
    try:
        found = findings(w)
    except Exception:  # refusing to report is honest
        return
    assert about(found, refund) == [], found


def test_reconcile_is_quiet_when_paypal_and_the_desk_agree(w: World) -> None:
    _paid, _case, _refund = refunded_case(w)
    _pend_paid, _pend_case, _pend_refund = pending_case(w)
    assert findings(w) == []


# ---------------------------------------------------------------- the command line


def cli(monkeypatch: pytest.MonkeyPatch, url: str, settings: dict[str, str], *args: str) -> Any:
    """A `refund-desk` command in process, configured by these environment variables."""
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("REFUND_DESK_SECRET", "cli-secret-" + "y" * 40)
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    load_settings.cache_clear()
    try:
        return CliRunner().invoke(app, list(args))
    finally:
        load_settings.cache_clear()


def test_the_reconcile_command_names_a_dashboard_refund(
    monkeypatch: pytest.MonkeyPatch, w: World
) -> None:
    paid, _case, refund = refunded_case(w)
    outside = w.paypal.refund_directly(paid.capture_id, "4.00")
    result = cli(monkeypatch, w.url, w.remote.settings(), "reconcile", "--since", "1d", "--json")
    assert outside in result.output, result.output
    assert refund not in json.dumps(
        [f for f in json.loads(result.stdout).get("findings", []) if f.get("refund_id") == refund]
    )


def doctor(monkeypatch: pytest.MonkeyPatch, url: str, settings: dict[str, str]) -> tuple[int, str]:
    result = cli(monkeypatch, url, settings, "processor", "doctor")
    return result.exit_code, result.output


def test_doctor_says_yes_to_good_credentials(
    monkeypatch: pytest.MonkeyPatch, sqlite_url: str, remote: PayPalRemote
) -> None:
    code, out = doctor(monkeypatch, sqlite_url, remote.settings())
    assert code == 0, out
    assert "paypal" in out.lower()


@pytest.mark.parametrize("field", ["PAYPAL_CLIENT_SECRET", "PAYPAL_CLIENT_ID"])
def test_doctor_says_no_to_a_wrong_credential(
    monkeypatch: pytest.MonkeyPatch, sqlite_url: str, remote: PayPalRemote, field: str
) -> None:
    code, out = doctor(monkeypatch, sqlite_url, {**remote.settings(), field: "wrong"})
    assert code == 1, out
    assert "paypal" in out.lower() and "wrong" not in out


def test_doctor_says_no_when_paypal_does_not_answer(
    monkeypatch: pytest.MonkeyPatch, sqlite_url: str, remote: PayPalRemote
) -> None:
    settings = {**remote.settings(), "PAYPAL_API_BASE": "http://127.0.0.1:9"}
    code, out = doctor(monkeypatch, sqlite_url, settings)
    assert code == 1, out
