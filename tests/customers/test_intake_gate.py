"""Every customer channel's capture goes through the replica's one intake gate, as the API's
does: a burst on one channel waits its turn instead of taking every thread."""

from __future__ import annotations

from refund_desk.web.admission import IntakeGate
from tests.customers.conftest import Channels, raw_email
from tests.helpers import CUSTOMER


def _gate(channels: Channels) -> IntakeGate:
    gate = IntakeGate(1)
    channels.client.app.state.intake_gate = gate  # type: ignore[attr-defined]
    return gate


def test_an_email_is_captured_through_the_gate(channels: Channels) -> None:
    gate = _gate(channels)
    payment = channels.payment("30.00")
    raw = raw_email(subject=f"Refund for order {payment}", text="Amount: 20.00\nIt broke.")
    response = channels.post_email(raw)
    assert response.status_code == 201, response.text
    assert gate.most_inside == 1 and gate.inside == 0


def test_a_web_form_is_captured_through_the_gate(channels: Channels) -> None:
    gate = _gate(channels)
    payment = channels.payment("30.00")
    response = channels.submit_form(
        {"email": CUSTOMER, "payment": payment, "amount": "20.00", "message": "It broke."}
    )
    assert response.status_code in (200, 201, 303), response.text
    assert channels.case_count() == 1
    assert gate.most_inside == 1 and gate.inside == 0
