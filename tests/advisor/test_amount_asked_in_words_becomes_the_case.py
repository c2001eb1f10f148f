"""End to end: the request names no amount (so the case is for all that is left) and the words
ask for less. The ask must become the case's amount (model_inference, which only a person can
confirm); a rule that dropped it as a unit price once left the whole payment to be refunded
automatically."""

from __future__ import annotations

from refund_desk.advisor.extract import extract_amount
from refund_desk.runtime import Runtime
from tests.helpers import Harness

MESSAGE = "It arrived broken: item 2 needs a $15 refund. For the record, the whole set cost me $40."


def test_words_read_as_the_fifteen_asked() -> None:
    assert extract_amount(MESSAGE, "USD") == (1500, "USD")


def test_case_is_for_what_the_words_ask_not_the_whole_payment(runtime: Runtime) -> None:
    desk = Harness(runtime)
    desk.publish()
    payment = desk.payment("40.00")
    response = desk.post(desk.request(payment, None, message=MESSAGE))
    assert response.status_code == 201, response.text
    desk.sweep()
    case = desk.get(response.json()["id"])
    refunded = sum(r["amount"] for r in desk.refunds_at_processor(payment))
    assert refunded <= 1500, (case["status"], case["amount"], refunded)
    assert case["amount"] in ("15.00", 1500), case
