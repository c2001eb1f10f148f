"""Errors the workflow raises. Each carries a machine code (for APIs and logs) and a sentence.

CaseError                 code + message
├── InvalidRequest        the input is wrong; `fields` says which field and why (HTTP 422)
├── NotFound              no such case (404)
├── Conflict              an Idempotency-Key reused with another body, a stale revision (409)
└── Unavailable           a dependency is down; nothing was written, try again (503)
"""

from __future__ import annotations


class CaseError(Exception):
    status = 400

    def __init__(self, code: str, message: str, fields: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.fields = fields or {}


class InvalidRequest(CaseError):
    status = 422


class NotFound(CaseError):
    status = 404


class Conflict(CaseError):
    status = 409


class Unavailable(CaseError):
    status = 503
