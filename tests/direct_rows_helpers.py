"""Helpers for the tests of direct rows (`storage/direct_rows.py`): one flow run with direct
rows and again with them off, and what a case left in the database, ids and times put
aside, to compare the two."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import select
from sqlmodel import col

from refund_desk.cases import approvals
from refund_desk.cases.errors import CaseError
from refund_desk.governance import admin
from refund_desk.storage import direct_rows
from refund_desk.storage.audit import Actor
from refund_desk.storage.db import Database
from refund_desk.storage.models import (
    AuditRecord,
    Case,
    Control,
    CustomerMessage,
    Execution,
    Job,
)
from tests.conftest import SimulatedCrash
from tests.helpers import Harness, button_token


def without_direct_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hot transactions through the ORM, as before direct rows."""
    monkeypatch.setattr(direct_rows, "use_direct_rows", lambda session: None)


def state_of(db: Database, case_id: str) -> dict[str, Any]:
    """What a case left in the database, with its ids and times put aside."""
    with db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None
        executions = session.scalars(
            select(Execution)
            .where(col(Execution.case_id) == case_id)
            .order_by(col(Execution.created_at), col(Execution.id))
        ).all()
        records = session.scalars(
            select(AuditRecord)
            .where(col(AuditRecord.case_id) == case_id)
            .order_by(col(AuditRecord.seq))
        ).all()
        messages = session.scalars(
            select(CustomerMessage)
            .where(col(CustomerMessage.case_id) == case_id)
            .order_by(col(CustomerMessage.id))
        ).all()
        jobs = session.scalars(select(Job).order_by(col(Job.id))).all()
        volatile = {case.id: "<case>", case.correlation_id: "<correlation>"}
        volatile[case.payment_id] = "<payment>"
        volatile[case.email_hash] = "<email>"
        for n, execution in enumerate(executions):
            volatile[execution.id] = f"<execution {n}>"
            volatile[execution.idempotency_key] = f"<idempotency {n}>"
            if execution.processor_refund_id:
                volatile[execution.processor_refund_id] = f"<refund {n}>"
        state = {
            "case": _columns(case, drop={"email_enc", "name_enc", "message_enc"}),
            "executions": [_columns(e) for e in executions],
            "audit": [
                {
                    "action": r.action,
                    "actor": f"{r.actor_kind}:{r.actor_id}",
                    "payload": _numbered(r.payload, "message_id", [m.id for m in messages]),
                }
                for r in records
            ],
            "messages": [_columns(m, drop={"id"}) for m in messages],
            "jobs": [
                {
                    **_columns(j, drop={"id", "lease_owner"}),
                    "payload": _numbered(j.payload, "message_id", [m.id for m in messages]),
                }
                for j in jobs
                if case.id in json.dumps(j.payload)
            ],
        }
    dumped = json.dumps(state, default=_times, sort_keys=True)
    for value, name in volatile.items():
        dumped = dumped.replace(value, name)
    # the advice's summary is sealed under the customer's key: a fresh nonce each time
    dumped = re.sub(r'"summary": "[^"]*"', '"summary": "<sealed>"', dumped)
    # a denial's appeal link carries a signed token of its own
    dumped = re.sub(r'https?://[^\s"\\]+', "<link>", dumped)
    dumped = re.sub(r"[A-Za-z0-9_=-]{20,}\.[0-9a-f]{64}", "<token>", dumped)  # signed tokens
    dumped = re.sub(r"\w+day \d{2} \w+ \d{4}, \d{2}:\d{2}", "<when>", dumped)  # "answer by"
    return dict(json.loads(dumped))


def _numbered(payload: dict[str, Any], key: str, ids: list[Any]) -> dict[str, Any]:
    """`payload` with the id under `key` as its place among `ids` (ids differ between runs)."""
    if key not in payload:
        return payload
    return {**payload, key: ids.index(payload[key]) if payload[key] in ids else "<other>"}


def _columns(row: Any, *, drop: set[str] = frozenset()) -> dict[str, Any]:  # type: ignore[assignment]
    return {k: v for k, v in row.model_dump().items() if k not in drop}


def _times(value: Any) -> Any:
    if isinstance(value, datetime):
        return "<time>"
    raise TypeError(type(value))


def control_state(control: Control) -> dict[str, Any]:
    """The control row's switches, its times put aside."""
    times = ("updated_at", "breaker_tripped_at", "shadow_started_at")
    return {k: v for k, v in control.model_dump().items() if k not in times}


def same(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    """Equal, or a message naming the first difference."""
    for part in ours:
        a, b = ours[part], theirs[part]
        if isinstance(a, list) and isinstance(b, list):
            assert len(a) == len(b), (part, a, b)
            for n, (x, y) in enumerate(zip(a, b, strict=True)):
                assert x == y, (part, n, x, y)
        elif isinstance(a, dict) and isinstance(b, dict):
            for key in sorted({*a, *b}):
                assert a.get(key) == b.get(key), f"{part}.{key}:\n{a.get(key)}\n{b.get(key)}"
        assert a == b, part


LEAD = "U0LEAD1"


def click(
    h: Harness, case_id: str, action: str, user: str = LEAD, amount: str | None = None
) -> None:
    """`user` clicks `action` on the case's latest card (a refusal is let be); the jobs the
    click queues run at once."""
    rt = h.runtime.desk
    with h.runtime.db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None
        value = button_token(rt, case, action)
    try:
        outcome = approvals.act(rt, token_value=value, user=user, amount=amount)
    except CaseError:
        return
    for job in outcome.jobs:
        with contextlib.suppress(SimulatedCrash):
            rt.jobs.run_now(job)


def post_request(h: Harness, tag: str, n: list[int], **extra: Any) -> str:
    n[0] += 1
    email = f"{tag}-{n[0]}@example.com"
    payment = h.payment(email=email)
    body = h.request(payment, email=email)
    body.update(extra)
    if body.get("amount") is None:
        body.pop("amount", None)
    try:
        made = h.post(body)
    except SimulatedCrash:
        with h.runtime.db.read() as session:
            return str(
                session.scalars(select(Case.id).order_by(col(Case.created_at).desc())).first()
            )
    assert made.status_code in (200, 201, 202), made.text
    return str(made.json()["id"])


def sweep_all(h: Harness, ahead: float = 3600) -> None:
    for _ in range(3):
        with contextlib.suppress(SimulatedCrash):
            h.sweep(ahead)


def pause(h: Harness, on: bool) -> None:
    with h.runtime.db.write() as session:
        admin.set_paused(session, h.runtime.desk.audit, paused=on, actor=Actor("human", LEAD))


@contextlib.contextmanager
def before_execution(h: Harness, fn: Callable[[], None]) -> Any:
    desk = h.runtime.desk
    original = desk.run_claimed

    def first(job: Any) -> None:
        fn()
        original(job)

    desk.run_claimed = first  # type: ignore[method-assign]
    try:
        yield
    finally:
        desk.run_claimed = original  # type: ignore[method-assign]


FOR_A_PERSON = "I changed my mind about the colour, please take it back."
