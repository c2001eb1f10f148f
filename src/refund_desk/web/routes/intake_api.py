"""The intake API: `POST /api/v1/refund-requests`, `GET /api/v1/cases/{id}`.

Handlers are plain `def`s, so FastAPI runs their blocking database work in its thread pool and
the event loop stays free.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from sqlalchemy import select
from sqlmodel import Session, col

from refund_desk.api_keys import hash_key
from refund_desk.cases.errors import InvalidRequest, Unauthorized
from refund_desk.cases.intake import parse_request, submit
from refund_desk.cases.views import case_view
from refund_desk.customers import addresses
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import ApiKey, Case
from refund_desk.web import waiting

router = APIRouter(prefix="/api/v1")


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def authenticate(
    runtime: Annotated[Runtime, Depends(get_runtime)],
    authorization: Annotated[str | None, Header()] = None,
) -> ApiKey:
    scheme, _, key = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthorized("unauthorized", "Send an API key as `Authorization: Bearer <key>`.")
    with runtime.db.read() as session:
        row = session.scalars(
            select(ApiKey).where(col(ApiKey.key_hash) == hash_key(key.strip()))
        ).first()
    if row is None or row.revoked_at is not None:
        raise Unauthorized("unauthorized", "The API key is not valid.")
    return row


@router.post("/refund-requests", status_code=201)
async def create_refund_request(
    request: Request,
    runtime: Annotated[Runtime, Depends(get_runtime)],
    api_key: Annotated[ApiKey, Depends(authenticate)],
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
    prefer: Annotated[str | None, Header()] = None,
) -> JSONResponse:
    """Answers once the case, its first audit record and its `advance` job are committed
    (status `received`); with `Prefer: wait=N` (N ≤ 10) it waits up to N seconds for the
    case to stop moving (an outcome, or a person's turn) and answers with it as it is then."""
    try:
        data = json.loads(await request.body() or b"null")
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequest("invalid_json", "The body is not valid JSON.") from None
    view, created = await run_in_threadpool(_create, runtime, data, api_key, idempotency_key)
    headers: dict[str, str] = {}
    wait = waiting.preferred_wait(prefer)
    if wait is not None:
        waiters: waiting.CaseWaiters = request.app.state.case_waiters
        view = await waiters.wait(
            view["id"],
            wait,
            lambda: run_in_threadpool(_view, runtime, view["id"]),
            first=view,
        )
        headers["Preference-Applied"] = f"wait={int(wait)}"
    return JSONResponse(view, status_code=201 if created else 200, headers=headers)


def _view(runtime: Runtime, case_id: str) -> dict[str, Any]:
    with runtime.db.read() as session:
        return case_view(session, case_id, with_audit=False)


def _create(
    runtime: Runtime, data: Any, api_key: ApiKey, idempotency_key: str | None
) -> tuple[dict[str, Any], bool]:
    refund_request = parse_request(data)
    if refund_request.callback_url and not runtime.settings.allow_private_callbacks:
        found = addresses.problem(refund_request.callback_url)
        if found:
            raise InvalidRequest(
                "invalid_request", "The request has invalid fields.", {"callback_url": found}
            )
    desk = runtime.desk
    answer: dict[str, Any] = {}

    def read_answer(session: Session, case: Case) -> None:
        # The answer is read in the capture's transaction: one transaction fewer.
        answer.update(case_view(session, case.id, with_audit=False))

    submitted = submit(
        desk,
        refund_request,
        actor=Actor("api", api_key.name),
        api_key_id=api_key.id,
        idempotency_key=idempotency_key or None,
        prepare=read_answer,
    )
    if desk.hand_off(submitted.job_id) and answer:
        return answer, True  # the worker advances the case; the answer does not wait
    # A replay, or the job ran here (no worker in this process): the case as it is now.
    return _view(runtime, submitted.case_id), submitted.created


@router.get("/cases/{case_id}")
def get_case(
    case_id: str,
    runtime: Annotated[Runtime, Depends(get_runtime)],
    api_key: Annotated[ApiKey, Depends(authenticate)],
) -> dict[str, Any]:
    with runtime.db.read() as session:
        return case_view(session, case_id, with_audit=True)
