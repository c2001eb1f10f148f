"""Schemathesis hooks for `test_openapi.py` (loaded by `st run` through SCHEMATHESIS_HOOKS).

A document can say what a well-formed request is, not which payments exist: a request the
document calls valid names, once drawn, a payment that exists at the processor in the request's
currency (the test made one in each), and a `cursor` the API gave. Only positive cases are
changed, and only where the drawn value is itself valid: a negative case keeps its violation.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import schemathesis
from schemathesis import Case, GenerationMode
from schemathesis.hooks import HookContext

PAYMENTS: dict[str, str] = json.loads(os.environ.get("REFUND_DESK_TEST_PAYMENTS", "{}"))
CURSOR = os.environ.get("REFUND_DESK_TEST_CURSOR", "")
PAYMENT_ID = re.compile(r"[A-Za-z0-9_\-]{3,100}")


def _positive(case: Case) -> bool:
    return case.meta is not None and case.meta.generation.mode == GenerationMode.POSITIVE


def _existing(case: Case) -> Case:
    """`case` naming what exists where it names a valid payment or cursor."""
    if case.method == "POST" and case.path == "/api/v1/refund-requests":
        body: Any = case.body
        if isinstance(body, dict) and isinstance(body.get("payment"), str):
            existing = PAYMENTS.get(str(body.get("currency")))
            if existing is not None and PAYMENT_ID.fullmatch(body["payment"]):
                case.body = {**body, "payment": existing}
    cursor = (case.query or {}).get("cursor") if case.path == "/api/v1/cases" else None
    if case.method == "GET" and isinstance(cursor, str) and cursor:
        case.query = {**(case.query or {}), "cursor": CURSOR}
    return case


@schemathesis.hook
def map_case(context: HookContext, case: Case) -> Case:
    return _existing(case) if _positive(case) else case


@schemathesis.hook
def before_add_examples(context: HookContext, examples: list[Case]) -> None:
    """The document's own examples (the Examples phase): valid, so made to name what exists."""
    for case in examples:
        _existing(case)
