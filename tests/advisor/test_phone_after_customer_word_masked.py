"""A phone number after "customer," / "Kunde," / "Customer:" is masked (an account word only
exempts a number after an explicit number marker), so it never reaches the model (DESIGN
invariant 7) nor becomes `advice.order_ref`, which an erasure keeps."""

from __future__ import annotations

import json

import pytest

from refund_desk.advisor.offline import OfflineAdvisor
from refund_desk.advisor.redact import redact
from refund_desk.cases.ports import AdviceRequest
from refund_desk.customers import erasure
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import Case
from tests.helpers import CUSTOMER, Harness

PHONES = [
    ("The blender broke. I am a customer, 0176-12345678 is my mobile, call me.", "0176-12345678"),
    ("Der Mixer ist kaputt. Ich bin Kunde, 0176/12345678 ist mein Handy.", "0176/12345678"),
    ("The blender broke. I am a long-time customer, +49-176-12345678 is my mobile.", "12345678"),
    ("Blender broke. Customer: +1 415 555 0132", "555 0132"),
]


@pytest.mark.parametrize(("text", "digits"), PHONES)
def test_phone_after_customer_word_is_masked(text: str, digits: str) -> None:
    assert digits not in redact(text).text


@pytest.mark.parametrize(("text", "digits"), PHONES[:2])
def test_phone_never_becomes_the_order_reference(text: str, digits: str) -> None:
    advice = OfflineAdvisor().advise(AdviceRequest(message=text, currency="USD"))
    assert advice.order_ref != digits


def test_phone_number_survives_the_customers_erasure(runtime: Runtime) -> None:
    desk = Harness(runtime)
    desk.publish()
    payment = desk.payment("30.00")
    message = "The blender broke. I am a customer, 0176-12345678 is my mobile, call me."
    response = desk.post(desk.request(payment, "20.00", message=message))
    assert response.status_code == 201, response.text
    desk.sweep()
    erasure.erase_customer(runtime.desk, CUSTOMER, actor=Actor("cli", "t"), evidence=None)
    with runtime.db.read() as session:
        case = session.get(Case, response.json()["id"])
        assert case is not None and case.erased_at is not None
        assert "12345678" not in json.dumps(case.advice)
