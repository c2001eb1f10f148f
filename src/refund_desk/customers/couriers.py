"""Couriers: the adapters that carry a customer message out (SMTP, signed webhook, helpdesk).

Each runs inside the `customer.tell` job, outside any transaction, with a short timeout, and
turns failures into `DeliveryFailed` without quoting addresses (errors reach logs and audit).
"""

from __future__ import annotations

import json
import smtplib
import ssl
import time
from email.message import EmailMessage
from email.utils import formatdate
from urllib.parse import parse_qs, quote, unquote, urlsplit

import httpx

from refund_desk import crypto
from refund_desk.customers import addresses
from refund_desk.customers.outcomes import Courier, DeliveryFailed, Outbound
from refund_desk.settings import Settings

TIMEOUT = 5.0
SIGNATURE_HEADER = "X-Refund-Desk-Signature"

SUBJECTS = {
    "refunded": "Your refund has been issued",
    "partially_refunded": "Your refund has been issued",
    "denied": "About your refund request",
    "in_review": "We are looking at your refund request",
}


def sign(secret: str, body: bytes, *, now: float | None = None) -> str:
    """`t=<unix>,v1=<hex HMAC-SHA256 of "t.body">`, as DESIGN.md's contract says."""
    t = str(int(now if now is not None else time.time()))
    return f"t={t},v1={crypto.mac(secret.encode(), t.encode() + b'.' + body).hex()}"


class SmtpCourier:
    channel = "email"

    def __init__(self, url: str, sender: str) -> None:
        self.url = urlsplit(url)
        if self.url.scheme not in ("smtp", "smtps") or not self.url.hostname:
            raise ValueError("SMTP_URL must look like smtp://host:port or smtps://host:port")
        self.sender = sender

    def message(self, out: Outbound) -> EmailMessage:
        domain = self.sender.rpartition("@")[2].strip(">") or "refund-desk.invalid"
        msg = EmailMessage()
        msg["From"] = self.sender
        msg["To"] = out.to_email or ""
        thread = out.reply.get("subject")
        subject = SUBJECTS.get(out.kind, "About your refund request")
        if thread:
            subject = thread if thread.lower().startswith("re:") else f"Re: {thread}"
        msg["Subject"] = f"{subject} [{out.case_id}]"
        msg["Date"] = formatdate(usegmt=True)
        msg["Message-ID"] = f"<tell.{out.message_id}.{out.case_id}@{domain}>"
        msg["Auto-Submitted"] = "auto-replied" if out.reply.get("message_id") else "auto-generated"
        if out.reply.get("message_id"):
            msg["In-Reply-To"] = out.reply["message_id"]
            msg["References"] = " ".join(
                [*out.reply.get("references", []), out.reply["message_id"]]
            )
        msg.set_content(f"{out.full_text()}\n\nYour reference: {out.case_id}\n")
        return msg

    def send(self, out: Outbound) -> str | None:
        if not out.to_email:
            raise DeliveryFailed("no email address on the case", transient=False)
        msg = self.message(out)
        url = self.url
        port = url.port or (465 if url.scheme == "smtps" else 25)
        try:
            if url.scheme == "smtps":
                client: smtplib.SMTP = smtplib.SMTP_SSL(
                    url.hostname or "", port, timeout=TIMEOUT, context=ssl.create_default_context()
                )
            else:
                client = smtplib.SMTP(url.hostname or "", port, timeout=TIMEOUT)
            with client:
                if url.scheme == "smtp" and parse_qs(url.query).get("starttls") == ["true"]:
                    client.starttls(context=ssl.create_default_context())
                if url.username:
                    client.login(unquote(url.username), unquote(url.password or ""))
                client.send_message(msg)
        except smtplib.SMTPRecipientsRefused:
            raise DeliveryFailed("the mail server refused the recipient", transient=False) from None
        except (OSError, smtplib.SMTPException) as exc:
            raise DeliveryFailed(f"SMTP delivery failed ({type(exc).__name__})") from None
        return str(msg["Message-ID"])


class WebhookCourier:
    """The signed outcome, POSTed to the request's `callback_url` (or the configured one)."""

    channel = "webhook"

    def __init__(self, secret: str | None, *, allow_private: bool = False) -> None:
        self.secret = secret
        self.allow_private = allow_private

    def body(self, out: Outbound) -> bytes:
        event = {
            "id": f"msg_{out.message_id}",
            "type": "case.outcome",
            "case_id": out.case_id,
            "external_id": out.external_id,
            "status": out.status,
            "outcome": out.kind,
            "amount": out.amount,
            "currency": out.currency,
            "message": out.text,
            "appeal_url": out.appeal_url,
            "expected_by": out.expected_by.isoformat() if out.expected_by else None,
        }
        return json.dumps(event, separators=(",", ":"), sort_keys=True).encode()

    def send(self, out: Outbound) -> str | None:
        if not out.callback_url:
            raise DeliveryFailed("no callback URL", transient=False)
        if not self.secret:
            raise DeliveryFailed("REFUND_DESK_WEBHOOK_SECRET is not set; cannot sign")
        if not self.allow_private:  # checked again here: DNS may have changed since intake
            found = addresses.problem_resolved(out.callback_url)
            if found:
                raise DeliveryFailed(f"callback URL {found}", transient=False)
        body = self.body(out)
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(self.secret, body),
            "X-Refund-Desk-Delivery": f"msg_{out.message_id}",  # the same on every retry
            "User-Agent": "refund-desk",
        }
        try:
            response = httpx.post(
                out.callback_url,
                content=body,
                headers=headers,
                timeout=TIMEOUT,
                follow_redirects=False,
            )
        except httpx.HTTPError as exc:
            raise DeliveryFailed(f"webhook not reachable ({type(exc).__name__})") from None
        if not 200 <= response.status_code < 300:
            raise DeliveryFailed(f"webhook answered {response.status_code}")
        return f"msg_{out.message_id}"


class HelpdeskCourier:
    """A public comment on the ticket the request came from (Zendesk or Gorgias API)."""

    def __init__(self, channel: str, api_url: str, sender: str) -> None:
        parts = urlsplit(api_url)
        self.channel = channel
        self.auth = (unquote(parts.username or ""), unquote(parts.password or ""))
        host = parts.hostname or ""
        netloc = host + (f":{parts.port}" if parts.port else "")
        self.base = f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}"
        self.sender = sender

    def send(self, out: Outbound) -> str | None:
        # The ticket id came from a webhook body: one path segment, whatever it holds.
        ticket = quote(str(out.reply.get("ticket_id")), safe="")
        if self.channel == "zendesk":
            method, url = "PUT", f"{self.base}/api/v2/tickets/{ticket}.json"
            body: dict[str, object] = {
                "ticket": {"comment": {"body": out.full_text(), "public": True}}
            }
        else:
            method, url = "POST", f"{self.base}/api/tickets/{ticket}/messages"
            body = {
                "channel": "email",
                "via": "api",
                "from_agent": True,
                "body_text": out.full_text(),
                "sender": {"email": self.sender},
                "receiver": {"email": out.to_email},
            }
        try:
            response = httpx.request(method, url, json=body, auth=self.auth, timeout=TIMEOUT)
        except httpx.HTTPError as exc:
            raise DeliveryFailed(f"{self.channel} not reachable ({type(exc).__name__})") from None
        if not 200 <= response.status_code < 300:
            raise DeliveryFailed(f"{self.channel} answered {response.status_code}")
        return f"{self.channel}:{ticket}"


def from_settings(settings: Settings) -> dict[str, Courier]:
    sender = settings.mail_from or "refunds@refund-desk.invalid"
    couriers: dict[str, Courier] = {
        "webhook": WebhookCourier(
            settings.webhook_secret.get_secret_value() if settings.webhook_secret else None,
            allow_private=settings.allow_private_callbacks,
        )
    }
    if settings.smtp_url:
        couriers["email"] = SmtpCourier(settings.smtp_url, sender)
    for channel, api_url in (
        ("zendesk", settings.zendesk_api_url),
        ("gorgias", settings.gorgias_api_url),
    ):
        if api_url:
            couriers[channel] = HelpdeskCourier(channel, api_url.get_secret_value(), sender)
    return couriers
