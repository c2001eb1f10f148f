"""Appeals: a GET of the link changes nothing; the POST makes one linked tier-4 case that the
first decider may not decide."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from refund_desk.cases import approvals
from refund_desk.customers import appeals
from tests.customers.conftest import Channels
from tests.customers.test_customer_tell import _act, _form
from tests.helpers import CUSTOMER, button_token


def _denied_with_link(channels: Channels) -> tuple[str, str]:
    case_id = _form(channels, channels.payment("900.00"), amount="600.00")
    _act(channels, case_id, "deny", "U0FIN1", reason="The item was used for months.")
    channels.sweep()
    [mail] = channels.mail.inbox.to(CUSTOMER)
    found = re.search(r"https://desk\.example(/appeal/\S+)", mail.get_content())
    assert found, mail.get_content()
    return case_id, found.group(1)


def _token(channels: Channels, path: str) -> str:
    page = channels.client.get(path)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token, page.text
    return token.group(1)


def _post(
    channels: Channels, path: str, message: str = "It was broken.", token: str | None = None
) -> Any:
    data = {"csrf_token": token or _token(channels, path), "message": message}
    return channels.client.post(path, data=data)


def test_get_changes_nothing_post_creates_one_linked_tier4_case(channels: Channels) -> None:
    first, path = _denied_with_link(channels)
    before = channels.counts()
    for _ in range(3):  # a mail scanner, a link preview, the customer
        page = channels.client.get(path)
        assert page.status_code == 200 and "<form" in page.text and "<script" not in page.text
    assert channels.counts() == before
    token = _token(channels, path)
    response = _post(channels, path, token=token)
    assert response.status_code == 201, response.text
    appeal_id = response.headers["X-Refund-Desk-Case"]
    view = channels.get(appeal_id)
    assert view["appeal_of"] == first and view["status"] == "awaiting_approval"
    assert view["decision"]["tier"] == 4 and view["decision"]["rule"] == "guardrail:appeal"
    assert view["amount"] == "600.00"
    assert channels.case(appeal_id).payment_id == channels.case(first).payment_id
    again = _post(channels, path, "once more", token=token)
    assert again.status_code == 200
    assert again.headers["X-Refund-Desk-Case"] == appeal_id
    assert channels.case_count() == 2
    assert "We already have your appeal" in channels.client.get(path).text


def test_first_decider_cannot_decide_the_appeal_two_others_must(channels: Channels) -> None:
    _first, path = _denied_with_link(channels)
    appeal_id = _post(channels, path).headers["X-Refund-Desk-Case"]
    with pytest.raises(approvals.Refused) as refused:
        _act(channels, appeal_id, "approve", "U0FIN1")
    assert refused.value.code == "first_decider"
    _act(channels, appeal_id, "approve", "U0FIN2")
    assert channels.case(appeal_id).status == "awaiting_approval"  # tier 4: a second approver
    case = channels.case(appeal_id)
    desk = channels.runtime.desk
    token = button_token(desk, case, "approve")
    with pytest.raises(approvals.Refused):  # the same person twice does not count
        approvals.act(desk, token_value=token, user="U0FIN2")
    actions = [r["action"] for r in channels.get(appeal_id)["audit"]]
    assert "approval.refused" in actions


def test_appeal_links_are_signed_expire_and_appeals_are_not_appealable(
    channels: Channels,
) -> None:
    first, path = _denied_with_link(channels)
    forged = path[:-3] + ("aaa" if not path.endswith("aaa") else "bbb")
    assert channels.client.get(forged).status_code == 403
    desk = channels.runtime.desk
    old = appeals.issue(desk.secret, first, now=desk.now() - timedelta(days=31))
    expired = channels.client.get(f"/appeal/{old}")
    assert expired.status_code == 403 and "expired" in expired.text
    appeal_id = _post(channels, path).headers["X-Refund-Desk-Case"]
    of_appeal = appeals.issue(desk.secret, appeal_id, now=desk.now())
    assert channels.client.get(f"/appeal/{of_appeal}").status_code == 403
    # A refunded case's id in a validly signed link is still not appealable.
    refunded = _form(channels, channels.payment("30.00"))
    assert channels.case(refunded).status == "refunded", channels.get(refunded)["decision"]
    link = appeals.issue(desk.secret, refunded, now=desk.now())
    assert channels.client.get(f"/appeal/{link}").status_code == 403


def test_appeal_post_needs_its_csrf_pair(channels: Channels) -> None:
    _first, path = _denied_with_link(channels)
    before = channels.counts()
    response = channels.client.post(path, data={"csrf_token": "1.2", "message": "hi"})
    assert response.status_code == 403
    assert channels.counts() == before
