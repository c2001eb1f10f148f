"""`POST /webhooks/email`: a raw RFC 822 message becomes a case; replies thread onto it."""

from __future__ import annotations

import hashlib

from refund_desk.customers import mail as mail_parsing
from tests.customers.conftest import PNG, Channels, raw_email
from tests.helpers import CUSTOMER


def test_raw_email_becomes_a_case_with_its_attachment_as_evidence(channels: Channels) -> None:
    payment = channels.payment("30.00")
    raw = raw_email(
        subject=f"Refund for order {payment}",
        text="Amount: 20.00\nThe vase arrived broken, see the photo.",
        attachments=[("vase.png", "image/png", PNG), ("card.vcf", "text/vcard", b"BEGIN:VCARD")],
    )
    response = channels.post_email(raw)
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["attachments"] == 1 and body["skipped_attachments"] == 1
    view = channels.get(body["case"])
    assert view["source"] == "email" and view["amount"] == "20.00"
    assert view["customer_verified"] is True
    [item] = view["evidence"]
    assert item["sha256"] == hashlib.sha256(PNG).hexdigest() and item["source"] == "email"
    assert channels.evidence_file(body["case"]) == PNG
    # The same message delivered again (an inbound service retrying) is the same case.
    again = channels.post_email(raw)
    assert again.status_code == 200 and again.json()["case"] == body["case"]
    assert channels.case_count() == 1


def test_email_needs_the_shared_secret(channels: Channels) -> None:
    raw = raw_email(subject="refund", text="py_123456789")
    assert channels.post_email(raw, secret="wrong").status_code == 401
    no_auth = channels.client.post("/webhooks/email", content=raw)
    assert no_auth.status_code == 401
    assert no_auth.json()["error"]["code"] == "unauthorized"
    assert channels.case_count() == 0


def test_email_without_a_reference_or_from_a_stranger_writes_nothing(channels: Channels) -> None:
    payment = channels.payment("30.00")
    before = channels.counts()
    missing = channels.post_email(raw_email(subject="Help", text="My vase broke."))
    assert missing.status_code == 422
    assert missing.json()["error"]["code"] == "payment_reference_missing"
    stranger = channels.post_email(
        raw_email(sender="mallory@example.com", subject=f"Order {payment}", text="refund pls")
    )
    assert stranger.status_code == 422 and stranger.json()["error"]["code"] == "not_matched"
    assert channels.counts() == before


def test_reply_to_our_outcome_threads_onto_the_same_case(channels: Channels) -> None:
    payment = channels.payment("900.00")
    first = channels.post_email(
        raw_email(subject=f"Refund {payment}", text="Amount: 600.00\nIt never worked.")
    ).json()
    case_id = first["case"]
    from tests.customers.test_customer_tell import _act

    _act(channels, case_id, "deny", "U0FIN1", reason="We need a photo of the damage.")
    channels.sweep()
    [outcome] = channels.mail.inbox.to(CUSTOMER)
    assert outcome["In-Reply-To"] == "<m1@example.com>"
    assert str(outcome["Subject"]).startswith("Re: Refund")
    reply = raw_email(
        subject=str(outcome["Subject"]),
        text="Here is the photo.\n\nOn Monday Acme wrote:\n> We need a photo",
        attachments=[("damage.jpg", "image/jpeg", b"\xff\xd8\xff\xe0" + b"\x00" * 32)],
        message_id="<m2@example.com>",
        In_Reply_To=str(outcome["Message-ID"]),
    )
    response = channels.post_email(reply)
    assert response.status_code == 200 and response.json() == {
        "case": case_id,
        "threaded": True,
        "attachments": 1,
        "skipped_attachments": 0,
    }
    assert channels.case_count() == 1
    replies = [m for m in channels.told(case_id) if m.direction == "in"]
    assert len(replies) == 1
    assert "Here is the photo." in (channels.runtime.desk.vault.decrypt(replies[0].body) or "")
    assert len(channels.get(case_id)["evidence"]) == 1
    assert channels.post_email(reply).status_code == 200  # a retried reply is recorded once
    assert len([m for m in channels.told(case_id) if m.direction == "in"]) == 1


def test_parser_reads_html_only_mail_and_finds_references() -> None:
    from email.message import EmailMessage

    msg = EmailMessage()
    msg["From"] = "a@example.com"
    msg["Subject"] = "hello"
    msg.set_content("<p>Payment ID: <b>pi_3Nabcdef12</b></p>", subtype="html")
    parsed = mail_parsing.parse(msg.as_bytes())
    assert parsed.payment_reference() == "pi_3Nabcdef12"
    assert "<p>" not in parsed.text
