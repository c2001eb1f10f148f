"""Errors the workflow raises. Each carries a machine code (for APIs and logs) and a sentence.

CaseError                 code + message
├── InvalidRequest        the input is wrong; `fields` says which field and why (HTTP 422)
│   └── NotMatched        the customer's email and reference do not match (422)
├── Unauthorized          no valid API key (401)
├── Forbidden             this person may not do this (403)
│   ├── Refused           an approval, deny or escalation refused (authority, limits, duties)
│   ├── TokenRefused      a button's token is forged, expired, used or stale
│   ├── NotALead          only the policy's leads change the policy
│   ├── EvidenceRefused   evidence refused (type, size, who may vouch)
│   └── AppealRefused     an appeal refused (used, expired, not a denial)
├── NotFound              no such case (404)
├── Conflict              an Idempotency-Key reused with another body, an invalid transition (409)
└── Unavailable           a dependency is down; nothing was written, try again (503)
"""

from __future__ import annotations

from refund_desk.text import Text


class CaseError(Exception):
    """``message`` is plain text (APIs, logs, the audit); ``text`` the same for a surface to
    render (a person named in it is a ``Person``, not a Slack mention)."""

    status = 400

    def __init__(
        self, code: str, message: str | Text, fields: dict[str, str] | None = None
    ) -> None:
        self.text = message if isinstance(message, Text) else Text.of(message)
        self.message = self.text.as_text()
        super().__init__(self.message)
        self.code = code
        self.fields = fields or {}


class InvalidRequest(CaseError):
    status = 422


class NotFound(CaseError):
    status = 404


class Conflict(CaseError):
    status = 409


class Unavailable(CaseError):
    status = 503


class NotMatched(InvalidRequest):
    """The customer is not who the system of record says; the answer reveals nothing more."""

    def __init__(self) -> None:
        super().__init__(
            "not_matched",
            "We could not match this email address to that payment or order reference. "
            "Please check both and try again.",
            {"email": "does not match the reference", "payment": "does not match the email"},
        )


class Unauthorized(CaseError):
    status = 401


class Forbidden(CaseError):
    status = 403


class Refused(Forbidden):
    """A person's approval, deny or escalation refused: authority, limits, duties, tokens."""


class TokenRefused(Forbidden):
    """A button's signed token is forged, expired, already used or for an older revision."""


class NotALead(Forbidden):
    """Only the active policy's leads change the policy."""


class EvidenceRefused(Forbidden):
    """Evidence refused: its type or size, or who may vouch for it."""


class AppealRefused(Forbidden):
    """An appeal refused: its link is used, expired, or not for a denial."""
