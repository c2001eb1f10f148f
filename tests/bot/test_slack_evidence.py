"""Evidence on the case card: shown as links, and a person vouches for it with a click."""

from __future__ import annotations

import re
from collections.abc import Callable

from tests.customers.conftest import PNG
from tests.helpers import ACME, CUSTOMER
from tests.slack_helpers import SlackHarness


def _form_case(desk: SlackHarness) -> str:
    payment = desk.payment("900.00")
    page = desk.client.get("/request")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token
    response = desk.client.post(
        "/request",
        data={
            "csrf_token": token.group(1),
            "email": CUSTOMER,
            "payment": payment,
            "amount": "600.00",
            "message": "Broken. Photos: https://photos.example/a1",
        },
        files=[("evidence", ("p.png", PNG, "image/png"))],
    )
    assert response.status_code == 201, response.text
    return str(response.headers["X-Refund-Desk-Case"])


def test_card_shows_evidence_and_an_approver_marks_it_checked(
    slack_desk: Callable[[str, str], SlackHarness], sqlite_url: str
) -> None:
    desk = slack_desk(sqlite_url, ACME.read_text())
    case_id = _form_case(desk)
    desk.settle()
    card = desk.card()
    text = str(card.blocks)
    assert "*Evidence* (2, 0 checked)" in text
    assert f"/evidence/{case_id}/" in text and "https://photos.example/a1" in text
    assert "photo 1> `p.png`" in text  # the link and the file's name, opened for the card
    buttons = desk.buttons()
    assert set(buttons) >= {"approve", "deny", "evidence_checked:1", "evidence_checked:2"}
    photo_url = re.search(r"<(http[^|>]+/evidence/[^|>]+)\|photo 1>", text)
    assert photo_url
    served = desk.client.get(photo_url.group(1).split("127.0.0.1:8000", 1)[1])
    assert served.status_code == 200 and served.content == PNG
    assert served.headers["content-type"] == "image/png"
    assert desk.client.get(f"/evidence/{case_id}/{'0' * 64}?sig=x").status_code == 404

    desk.click("U0NOBODY", "evidence_checked:1", buttons["evidence_checked:1"])
    desk.settle()
    assert any("approvers may mark" in m.text for m in desk.slack.ephemeral)
    assert desk.get(case_id)["evidence"][0]["provenance"] == "customer_input"

    desk.click("U0FIN1", "evidence_checked:1", buttons["evidence_checked:1"])
    desk.settle()
    item = desk.get(case_id)["evidence"][0]
    assert item["provenance"] == "verified_document" and item["checked_by"] == "U0FIN1"
    assert "*Evidence* (2, 1 checked)" in str(desk.card().blocks)
    actions = [r["action"] for r in desk.get(case_id)["audit"]]
    assert actions.count("evidence.checked") == 1
