"""The intake API's request and answers as pydantic models, and the OpenAPI document built on them.

The models describe what the routes already send: the case is `cases/views.py`'s dict (every
field, with its type and nullability), the error envelope is `web/errors.py`'s. The routes keep
answering with those dicts; the models are the contract's description, for `/openapi.json`,
`/docs` and the MCP tools, never a second serializer on the answer's path.

The request is `cases/intake.RefundRequest` itself. Its validators check more than its field
types say (a known currency, an amount with no more decimals than the currency has, a reason
from the list, a source and an external id that are not the system's own), so
`refund_request_schema` spells those rules out for the document: a body the document calls
valid is one the API takes, as long as the payment exists at the processor in that currency.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from email_validator import SPECIAL_USE_DOMAIN_NAMES
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field

from refund_desk import money
from refund_desk.cases.intake import INTERNAL_SOURCES, SLACK_JOB, SOURCES, RefundRequest
from refund_desk.cases.lifecycle import Status
from refund_desk.cases.ports import REASONS
from refund_desk.web.waiting import MAX_WAIT_SECONDS

__all__ = [
    "ApiError",
    "AuditRecord",
    "CaseDetail",
    "CasePage",
    "CaseView",
    "CustomerErased",
    "Deciders",
    "ErrorBody",
    "RefundRequest",
    "describe",
    "refund_request_schema",
]

API_PREFIX = "/api/v1/"
BEARER = "apiKey"  # the security scheme's name in the document
REF = "#/components/schemas/"

# ---------------------------------------------------------------- the error envelope


class ApiError(BaseModel):
    code: str = Field(description="Stable, machine-readable: `case_not_found`, `unauthorized`…")
    message: str = Field(description="A sentence for a person.")
    fields: dict[str, str] = Field(
        description="What is wrong with each field of the request, by name (empty if none)."
    )


class ErrorBody(BaseModel):
    """Every error the HTTP routes answer: `{"error": {code, message, fields}}`."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "error": {
                        "code": "invalid_request",
                        "message": "The request has invalid fields.",
                        "fields": {"currency": "the payment is in EUR"},
                    }
                }
            ]
        }
    )

    error: ApiError


# ---------------------------------------------------------------- a case


class DecisionView(BaseModel):
    outcome: str | None = Field(
        description="`approve`, `deny`, `review` (a person decides) or `inform` (a policy "
        "question answered); null until the policy has decided."
    )
    rule: str | None = Field(description="The deciding rule's id, `default` or `guardrail:…`.")
    tier: int | None = Field(description="The policy's tier: 1 (answer) to 4 (two approvers).")
    policy_version: int | None = Field(description="The policy version the case is pinned to.")
    reason: str | None = Field(description="Why it could not be decided, or what the policy says.")


class RuleTrace(BaseModel):
    rule: str
    result: bool | None = Field(description="null: the rule could not be evaluated (`error`).")
    error: str | None = None


class DecisionDetail(DecisionView):
    trace: list[RuleTrace] = Field(description="How each rule evaluated, in order.")
    approvers: str | None = Field(description="The approver group the policy named.")
    counterfactual: str | None = Field(description="What would have changed the outcome.")


class EvidenceItem(BaseModel):
    """A file or a link the customer gave. Personal parts (`url`, `filename`) read `[erased]`
    once the customer's data is erased."""

    model_config = ConfigDict(extra="allow")

    id: str
    kind: str = Field(description="`file` or `link`.")
    sha256: str | None = None
    content_type: str | None = None
    size: int | None = None
    filename: str | None = None
    url: str | None = None
    source: str | None = None
    provenance: str | None = None
    checked_by: str | None = None
    checked_at: str | None = None


class RefundView(BaseModel):
    id: str = Field(description="The processor's refund id, else our execution id.")
    processor: str | None
    execution_id: str
    amount: str = Field(description="In major units, as a decimal string.")
    status: str = Field(description="The processor's status, else our execution's.")


class SlackCard(BaseModel):
    status: Literal["delivered"]
    channel: str
    ts: str


class SlackUndelivered(BaseModel):
    status: Literal["not delivered to Slack"]
    channel: str
    error: str = Field(description="Slack's error: `not_in_channel`, `is_archived`…")


_MAJOR = "In major units, as a decimal string (`25.00` USD, `5000` JPY)."
_CASE_EXAMPLE: dict[str, Any] = {
    "id": "case_6b1f0c2e9a7d4e31b2c0",
    "status": "received",
    "revision": 0,
    "amount": "30.00",
    "currency": "USD",
    "amount_source": "customer_input",
    "requested_amount": "30.00",
    "refunded_amount": "0.00",
    "partial": False,
    "payment": "py_5e01132ed84c6be4583afb34",
    "processor": "sandbox",
    "source": "api",
    "external_id": "ticket-4711",
    "reason": "damaged",
    "reason_source": "customer_input",
    "customer_verified": True,
    "possible_duplicate": False,
    "duplicate_of": None,
    "appeal_of": None,
    "evidence": [],
    "decision": {
        "outcome": None,
        "rule": None,
        "tier": None,
        "policy_version": 3,
        "reason": None,
    },
    "customer_message": None,
    "park_reason": None,
    "escalation_level": 0,
    "sla_due_at": None,
    "refunds": [],
    "created_at": "2026-11-02T09:14:03.512000+00:00",
    "updated_at": "2026-11-02T09:14:03.512000+00:00",
    "erased_at": None,
    "slack": None,
}


class CaseView(BaseModel):
    """A case as the API shows it (`cases/views.case_view`)."""

    model_config = ConfigDict(json_schema_extra={"examples": [_CASE_EXAMPLE]})

    id: str
    status: Status
    revision: int = Field(description="Goes up with every change of the case.")
    amount: str = Field(description=f"The amount decided on (or asked). {_MAJOR}")
    currency: str = Field(description="ISO 4217, upper case.")
    amount_source: str
    requested_amount: str | None = Field(description=f"What the customer asked. {_MAJOR}")
    refunded_amount: str = Field(description=f"What was paid back. {_MAJOR}")
    partial: bool = Field(description="Refunded, for less than was asked.")
    payment: str
    processor: str | None
    source: str
    external_id: str | None
    reason: str | None
    reason_source: str | None
    customer_verified: bool
    possible_duplicate: bool
    duplicate_of: str | None
    appeal_of: str | None
    evidence: list[EvidenceItem]
    decision: DecisionView
    customer_message: str | None = Field(description="What the customer was told, once told.")
    park_reason: str | None
    escalation_level: int
    sla_due_at: datetime | None
    refunds: list[RefundView]
    created_at: datetime
    updated_at: datetime
    erased_at: datetime | None = Field(description="When the customer's data was erased.")
    slack: SlackCard | SlackUndelivered | None = Field(
        description="Where the case's card is in Slack, or why Slack would not take it."
    )


class AuditRecord(BaseModel):
    """One record of the audit chain (HMAC-linked: `prev_hash` is the previous record's)."""

    seq: int
    at: datetime
    case_id: str | None
    correlation_id: str | None
    actor_kind: str
    actor_id: str | None
    action: str
    policy_version: int | None
    payload: dict[str, Any]
    prev_hash: str
    hash: str


class Deciders(BaseModel):
    """Who may decide the case now, as the card and a click see it."""

    approvers: str | None = Field(description="The group, by name; null once escalated.")
    managers: bool = Field(description="Whether the managers may decide.")
    people: list[str] = Field(description="Everyone named: Slack user ids and user group ids.")
    escalated_by: str | None


class CaseDetail(CaseView):
    """A case with its record: the decision's trace, the facts, the advice, the audit chain."""

    model_config = ConfigDict(json_schema_extra=None)

    decision: DecisionDetail
    facts: dict[str, Any] | None = Field(description="The frozen facts the policy decided on.")
    advice: dict[str, Any] | None = Field(description="The advisor's advice, if asked.")
    earlier_messages: str | None = Field(
        default=None,
        description="What the customer's message quoted or carried under it (earlier mails,"
        " forwards, signatures), kept for a person; the advisor reads none of it. Null when"
        " there was none or the customer was erased.",
    )
    provenance: dict[str, Any] | None = Field(description="Where each decisive field came from.")
    audit: list[AuditRecord]
    deciders: Deciders | None = Field(description="null: the case waits for nobody.")


class CasePage(BaseModel):
    """Cases oldest first; `next_cursor` asks for the next page (null: no more)."""

    cases: list[CaseView]
    next_cursor: str | None


class CustomerErased(BaseModel):
    erased: bool
    cases: list[str] = Field(description="The cases whose personal data was erased.")
    evidence_files: int = Field(description="Evidence files deleted.")
    already_erased: bool = Field(description="Nothing was left to erase.")


# ---------------------------------------------------------------- the request, as validated


def _amount_pattern(decimals: int) -> str:
    """A plain decimal string above zero, below 10^15 minor units, with at most `decimals`
    significant decimals (trailing zeros are exact: `5000.00` JPY): what `money.to_minor`
    takes."""
    fraction = rf"(\.[0-9]{{1,{decimals}}}0*)?" if decimals else r"(\.0+)?"
    whole = rf"0*[1-9][0-9]{{0,{14 - decimals}}}{fraction}"
    if not decimals:
        return f"^{whole}$"
    return rf"^({whole}|0+\.[0-9]{{0,{decimals - 1}}}[1-9]0*)$"


def _any_case(text: str) -> str:
    """A regex matching `text` in any case (the document's regexes take no flags)."""
    return "".join(
        f"[{c.upper()}{c.lower()}]" if c.isalpha() else "\\" + c if c in ".^$*+?()[]{}|\\" else c
        for c in text
    )


def refund_request_schema(processors: list[str] | None = None) -> dict[str, Any]:
    """`RefundRequest`'s JSON schema with what its validators and the API's own checks refuse
    spelled out (`processors`: the names this desk refunds through; all by default)."""
    schema = RefundRequest.model_json_schema()
    props = schema["properties"]
    codes = sorted(money.CURRENCIES)
    props["currency"] = {
        "type": "string",
        "enum": codes,
        "title": "Currency",
        "description": "ISO 4217, the payment's (read in any case).",
        "examples": ["USD"],
    }
    props["amount"] = {
        "anyOf": [{"type": "string", "maxLength": 32}, {"type": "null"}],
        "default": None,
        "title": "Amount",
        "description": "What the customer asks, in major units as a decimal string, above zero "
        "and with no more decimals than the currency has; null: the whole payment.",
        "examples": ["30.00"],
    }
    by_decimals: dict[int, list[str]] = {}
    for code in codes:
        by_decimals.setdefault(money.CURRENCIES[code], []).append(code)
    schema["allOf"] = [
        {
            "if": {"properties": {"currency": {"enum": group}}, "required": ["currency"]},
            "then": {
                "properties": {
                    "amount": {
                        "anyOf": [
                            {"type": "string", "pattern": _amount_pattern(decimals)},
                            {"type": "null"},
                        ]
                    }
                }
            },
        }
        for decimals, group in sorted(by_decimals.items())
    ]
    props["reason"] = {
        "anyOf": [{"type": "string", "enum": list(REASONS)}, {"type": "null"}],
        "default": None,
        "title": "Reason",
    }
    props["source"] = {
        "type": "string",
        "enum": [s for s in SOURCES if s not in INTERNAL_SOURCES],
        "default": "api",
        "title": "Source",
    }
    job = _any_case(SLACK_JOB)
    props["external_id"] = {
        "anyOf": [
            {"type": "string", "maxLength": 200, "not": {"pattern": rf"^\s*{job}"}},
            {"type": "null"},
        ],
        "default": None,
        "title": "External Id",
        "description": f"Your id for the request (ids starting `{SLACK_JOB}` are the desk's own).",
    }
    label = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    props["callback_url"] = {
        "anyOf": [
            {
                "type": "string",
                "maxLength": 2000,
                "pattern": rf"^https?://(?:{label}\.)+[A-Za-z]{{2,63}}(?::[0-9]{{1,5}})?"
                r"(?:[/?#][^\s]*)?$",
            },
            {"type": "null"},
        ],
        "default": None,
        "title": "Callback Url",
        "description": "Where the outcome is POSTed: a public host (not loopback, private, "
        "link-local or a cloud metadata address).",
    }
    if processors is not None:
        props["processor"] = {
            "anyOf": [{"type": "string", "enum": processors}, {"type": "null"}],
            "default": None,
            "title": "Processor",
            "description": "Where the payment's id alone does not say.",
        }
    special = "|".join(_any_case(name) for name in SPECIAL_USE_DOMAIN_NAMES)
    props["email"]["not"] = {"pattern": rf"@(?:[^@]*\.)?(?:{special})\.?$"}
    props["email"]["description"] = (
        "The customer's address, at a domain that can receive mail (not "
        + ", ".join(f"`.{name}`" for name in SPECIAL_USE_DOMAIN_NAMES)
        + ")."
    )
    props["payment"]["description"] = "The payment's id at the processor."
    props["payment"]["examples"] = ["pi_3PqX8c2eZvKYlo2C1a2b3c4d"]
    props["email"]["examples"] = ["ada@example.com"]
    schema["examples"] = [
        {
            "payment": "pi_3PqX8c2eZvKYlo2C1a2b3c4d",
            "email": "ada@example.com",
            "currency": "USD",
            "amount": "30.00",
            "reason": "damaged",
            "message": "The mug arrived in pieces.",
            "external_id": "ticket-4711",
        }
    ]
    return schema


# ---------------------------------------------------------------- the document


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description}


UNAUTHORIZED = _error("No API key, or one that is not valid (`unauthorized`).")
INVALID = _error("A field is not valid: `error.fields` says which and why.")
INTAKE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "model": CaseView,
        "description": "The case this `Idempotency-Key` already made (same body).",
    },
    201: {
        "model": CaseView,
        "description": "The case, with its first audit record and its work committed "
        "(`received`; with `Prefer: wait=N`, as it is when it stops moving or after N s).",
        "headers": {
            "Preference-Applied": {
                "description": "`wait=N`: the `Prefer: wait` the answer honoured.",
                "schema": {"type": "string"},
            }
        },
    },
    400: _error("The body could not be read as text (`http_error`)."),
    401: UNAUTHORIZED,
    403: _error("The key may read, not file requests (scope `read`: `read_only_key`)."),
    409: _error("This `Idempotency-Key` was used with another body (`idempotency_key_reused`)."),
    422: _error(
        "Not a request this desk can take: a field, an unknown payment "
        "(`payment_not_found`), another currency (`currency_mismatch`)…"
    ),
    503: {
        **_error("The processor could not be reached; nothing was written. Send it again."),
        "headers": {
            "Retry-After": {"description": "Seconds to wait.", "schema": {"type": "string"}}
        },
    },
}
LIST_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": CasePage, "description": "A page of cases."},
    401: UNAUTHORIZED,
    422: INVALID,
}
CASE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": CaseDetail, "description": "The case with its record."},
    401: UNAUTHORIZED,
    404: _error("No such case (`case_not_found`)."),
}
ERASE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": CustomerErased, "description": "Erased (or already erased)."},
    401: UNAUTHORIZED,
    404: _error("No case of this customer is on record (`customer_not_found`)."),
}

IDEMPOTENCY_KEY = (
    "Any string up to 200 characters: the same key with the same body answers with the same "
    "case (200), with another body 409. Keys are the API key's own."
)
PREFER = (
    f"`wait=N` (N ≤ {int(MAX_WAIT_SECONDS)}): answer once the case stops moving (an outcome, or "
    "a person's turn), or after N seconds. Other preferences are ignored (RFC 7240)."
)


def describe(app: FastAPI, processors: list[str] | None = None) -> None:
    """Make `app.openapi()` the document with the API's security and the request's rules:
    every `/api/v1/` operation needs the bearer key, and `RefundRequest` is described with
    `refund_request_schema`. Built once, on the first request for it."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = get_openapi(
            title=app.title,
            version=app.version,
            summary="Refund requests in; cases, decisions and their record out.",
            description="Every `/api/v1/` route takes an API key (`refund-desk api-key "
            "create`) as `Authorization: Bearer <key>`; errors are `ErrorBody`.",
            routes=app.routes,
        )
        components = document.setdefault("components", {})
        components.setdefault("securitySchemes", {})[BEARER] = {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key: `Authorization: Bearer rdk_…`.",
        }
        components.setdefault("schemas", {})["RefundRequest"] = refund_request_schema(processors)
        for path, operations in document.get("paths", {}).items():
            for operation in operations.values():
                if path.startswith(API_PREFIX):
                    operation["security"] = [{BEARER: []}]
                # FastAPI's own 422 (`{"detail": [...]}`) is not what this app answers: the
                # app's handler writes the envelope, by field.
                invalid = operation.get("responses", {}).get("422", {})
                for media in invalid.get("content", {}).values():
                    if media.get("schema") == {"$ref": f"{REF}HTTPValidationError"}:
                        media["schema"] = {"$ref": f"{REF}ErrorBody"}
        schemas = components["schemas"]
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]
