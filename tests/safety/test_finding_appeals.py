"""Issue 13, finding 10: the person who filed a case never approves its appeal."""

from __future__ import annotations

import re

import pytest

from refund_desk.cases import approvals
from refund_desk.storage.models import Case
from tests.customers.conftest import Channels, channels, helpdesk, mail, receiver  # noqa: F401
from tests.customers.test_appeal import _post
from tests.customers.test_customer_tell import _act, _form
from tests.helpers import CUSTOMER


def test_finding_10_the_filer_of_a_case_cannot_approve_its_appeal(channels: Channels) -> None:  # noqa: F811
    case_id = _form(channels, channels.payment("900.00"), amount="600.00")
    with channels.runtime.db.write() as session:  # filed by a finance approver for a customer
        case = session.get(Case, case_id)
        assert case is not None
        case.requested_by = "U0FIN2"
        session.add(case)
    _act(channels, case_id, "deny", "U0FIN1", reason="The item was used for months.")
    channels.sweep()
    [message] = channels.mail.inbox.to(CUSTOMER)
    found = re.search(r"https://desk\.example(/appeal/\S+)", message.get_content())
    assert found
    appeal_id = _post(channels, found.group(1)).headers["X-Refund-Desk-Case"]
    with pytest.raises(approvals.Refused) as refused:
        _act(channels, appeal_id, "approve", "U0FIN2")
    assert refused.value.code == "own_request"
    assert channels.case(appeal_id).requested_by == "U0FIN2"
