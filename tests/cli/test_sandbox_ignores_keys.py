"""`refund-desk sandbox fault ignore-idempotency-keys`: a running sandbox then makes a new
refund for a repeated key, as a processor that does not honour keys would, beside whichever
other fault plays, until `sandbox fault none`. A crash test run from outside can then tell our
record's exactly-once from the processor's."""

from __future__ import annotations

import json

import pytest

from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.settings import load_settings
from refund_desk.storage.db import Database
from tests.cli_helpers import run

pytestmark = pytest.mark.usefixtures("cli_db")


def _create_twice(payment: str) -> list[str]:
    sandbox = SandboxProcessor(Database.from_url(load_settings().database_url))
    try:
        return [
            sandbox.create_refund(
                payment_id=payment,
                amount=500,
                currency="usd",
                idempotency_key="refund-desk-ex_same",
                metadata={"execution_id": "ex_same"},
            ).id
            for _ in range(2)
        ]
    finally:
        sandbox.db.dispose()


def _payment() -> str:
    return run(
        "sandbox", "payment", "create", "--amount", "25.00", "--currency", "usd",
        "--email", "ada@example.com",
    ).strip()  # fmt: skip


def test_a_repeated_key_makes_a_new_refund_until_the_fault_is_cleared() -> None:
    run("db", "upgrade")
    payment = _payment()
    first, again = _create_twice(payment)
    assert first == again  # by default the sandbox honours keys, as Stripe does
    said = run("sandbox", "fault", "ignore-idempotency-keys")
    assert "ignore-idempotency-keys" in said
    one, two = _create_twice(payment)
    assert one != two
    assert len(json.loads(run("sandbox", "payment", "show", payment))["refunds"]) == 3
    run("sandbox", "fault", "none")
    three, four = _create_twice(payment)
    assert three == four == first


def test_ignored_keys_stay_beside_another_fault() -> None:
    run("db", "upgrade")
    payment = _payment()
    run("sandbox", "fault", "ignore-idempotency-keys")
    run("sandbox", "fault", "decline", "--times", "1")
    sandbox = SandboxProcessor(Database.from_url(load_settings().database_url))
    try:
        with pytest.raises(Exception, match="declined"):
            sandbox.create_refund(
                payment_id=payment, amount=500, currency="usd",
                idempotency_key="k", metadata={},
            )  # fmt: skip
    finally:
        sandbox.db.dispose()
    one, two = _create_twice(payment)  # the decline is used up; keys are still ignored
    assert one != two


def test_ignoring_keys_takes_no_count() -> None:
    said = run("sandbox", "fault", "ignore-idempotency-keys", "--times", "2", code=2)
    assert "until `sandbox fault none`" in said
