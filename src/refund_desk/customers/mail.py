"""Reading a raw RFC 822 message, as inbound-mail services forward it.

The standard library reads the sender, subject, Message-ID and thread headers, the text body
(the plain part, else the HTML part as text, `advisor.reply.html_to_text`) and attachments as
bytes. Which attachments are evidence is decided later, by content. The body is kept whole:
the intake splits what the customer wrote now from what it quotes (`advisor.reply.read`), and
the reference, amount and links here are read from what they wrote now only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from email.utils import parseaddr
from functools import cached_property

from refund_desk.advisor import reply

MAX_TEXT = 10_000
_OUR_ID = re.compile(r"<tell\.\d+\.(case_[0-9a-f]{20})@")
_SUBJECT_REF = re.compile(r"\[(case_[0-9a-f]{20})\]")
_PAYMENT = re.compile(
    r"(?:payment|order|reference|ref)[^\S\n]*(?:id|no\.?|number|#)?[^\S\n]*[:#]?[^\S\n]*"
    r"([A-Za-z]{2,6}_[A-Za-z0-9]{6,60})",
    re.IGNORECASE,
)
_ANY_ID = re.compile(r"\b((?:py|pi|ch|pay|ord)_[A-Za-z0-9]{6,60})\b")
_AMOUNT = re.compile(
    r"^\s*amount\s*:\s*[^\d\n]{0,4}(\d+(?:[.,]\d{1,3})?)\s*$", re.IGNORECASE | re.MULTILINE
)


@dataclass
class InboundMail:
    sender: str
    name: str | None
    subject: str
    message_id: str | None
    references: list[str]
    text: str
    attachments: list[tuple[str, bytes]] = field(default_factory=list)  # (filename, bytes)

    def thread_case(self) -> str | None:
        """The case our outcome email was about, when this is a reply to it."""
        for ref in self.references:
            found = _OUR_ID.search(ref)
            if found:
                return found.group(1)
        found = _SUBJECT_REF.search(self.subject)
        return found.group(1) if found else None

    @cached_property
    def current(self) -> str:
        """What the sender wrote now: the body without its quoted history and footers."""
        return reply.read(self.text, sender=self.sender).current

    def payment_reference(self) -> str | None:
        return find_payment(self.subject, self.current)

    def amount(self) -> str | None:
        found = _AMOUNT.search(self.current)
        return found.group(1).replace(",", ".") if found else None


def find_payment(*texts: str | None) -> str | None:
    """A payment or order reference written in free text ("Order: py_…", or a bare id)."""
    for text in texts:
        found = _PAYMENT.search(text or "") or _ANY_ID.search(text or "")
        if found:
            return found.group(1)
    return None


class NotAnEmail(ValueError):
    pass


def parse(raw: bytes) -> InboundMail:
    msg = message_from_bytes(raw, policy=policy.default)
    if not isinstance(msg, EmailMessage):
        raise NotAnEmail("not an RFC 822 message")
    name, sender = parseaddr(str(msg.get("From", "")))
    if not sender or "@" not in sender:
        raise NotAnEmail("the message has no sender address")
    refs = [str(msg.get("In-Reply-To", "")), *str(msg.get("References", "")).split()]
    return InboundMail(
        sender=sender.strip(),
        name=name or None,
        subject=str(msg.get("Subject", "")).strip()[:300],
        message_id=(str(msg.get("Message-ID", "")).strip() or None),
        references=[r for r in refs if r],
        text=_text(msg)[:MAX_TEXT],
        attachments=_attachments(msg),
    )


def _text(msg: EmailMessage) -> str:
    body = msg.get_body(preferencelist=("plain", "html"))
    if body is None:
        return ""
    try:
        content = body.get_content()
    except (LookupError, ValueError):  # an unknown charset: take what decodes
        payload = body.get_payload(decode=True)
        content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    if body.get_content_subtype() == "html":
        return reply.html_to_text(str(content)).strip()
    return str(content).strip()


def _attachments(msg: EmailMessage) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for part in msg.iter_attachments():
        payload = part.get_payload(decode=True)
        if isinstance(payload, bytes) and payload:
            out.append((part.get_filename() or "attachment", payload))
    return out
