"""Steps the Slack tests share."""

from __future__ import annotations

import yaml

from tests.helpers import CUSTOMER
from tests.slack_helpers import SlackHarness


def wall_clock(source: str) -> str:
    """The policy with SLAs on the wall clock (4 h for tier 3, a reminder at half), so a sweep
    passes a deadline."""
    raw = yaml.safe_load(source)
    del raw["business_hours"]
    return yaml.safe_dump(raw, sort_keys=False)


def finance_case(desk: SlackHarness) -> str:
    """600.00 of a 900.00 payment (the `large` rule: finance decides), settled; unlike
    `review_case`, its status is not checked."""
    case_id = str(desk.post(desk.request(desk.payment("900.00"), "600.00")).json()["id"])
    desk.settle()
    return case_id


def approve(desk: SlackHarness, user: str) -> None:
    """`user` clicks Approve on the newest card in C0FINANCE and confirms; the work it starts
    runs."""
    desk.approve(user, desk.buttons()["approve"])
    desk.settle()


def review_case(
    desk: SlackHarness,
    amount: str = "600.00",
    paid: str = "900.00",
    *,
    chargebacks: int = 0,
    **request: object,
) -> str:
    """`amount` of a payment of `paid`, waiting for a person (600.00 of 900.00: the `large` rule,
    finance decides in C0FINANCE), its card posted."""
    payment = desk.payment(paid, chargebacks=chargebacks)
    body = desk.post(desk.request(payment, amount, **request)).json()
    assert body["status"] == "awaiting_approval", body
    desk.settle()
    return str(body["id"])


def typed(payment: str, amount: str | None) -> dict[str, str | None]:
    """What an operator types into the `/refund` modal."""
    return {
        "payment": payment,
        "email": CUSTOMER,
        "currency": "USD",
        "amount": amount,
        "reason": "damaged",
        "message": "Box crushed.",
    }
