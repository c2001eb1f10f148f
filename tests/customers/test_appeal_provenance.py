"""An appeal of a case whose amount only the model read keeps that provenance: the amount is
never passed off as the customer's own (invariant 1)."""

from __future__ import annotations

import re

from tests.customers.conftest import Channels
from tests.customers.test_appeal import _post
from tests.customers.test_customer_tell import _act
from tests.helpers import CUSTOMER


def test_appeal_keeps_model_provenance_of_amount(channels: Channels) -> None:
    payment = channels.payment("900.00")
    response = channels.submit_form(
        {
            "email": CUSTOMER,
            "payment": payment,
            "reason": "damaged",
            "message": "The lid arrived cracked. Keep the rest, just refund 5.00 for the lid.",
        }
    )
    assert response.status_code == 201, response.text
    case_id = str(response.headers["X-Refund-Desk-Case"])
    first = channels.get(case_id)
    assert (first["amount"], first["amount_source"]) == ("5.00", "model_inference"), first
    group = first["decision"]["approvers"]
    denier = {"finance": "U0FIN1", "support-leads": "U0LEAD2"}[group]
    _act(channels, case_id, "deny", denier, reason="No.")
    channels.sweep()
    [mail] = channels.mail.inbox.to(CUSTOMER)
    path = re.search(r"https://desk\.example(/appeal/\S+)", mail.get_content()).group(1)
    appeal_id = _post(channels, path).headers["X-Refund-Desk-Case"]
    appeal = channels.get(appeal_id)
    assert appeal["amount"] == "5.00"
    # Nobody but the model ever produced 5.00; the appeal must not call it the customer's.
    assert appeal["amount_source"] == "model_inference", appeal["amount_source"]
