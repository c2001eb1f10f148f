"""The intake API: `POST /api/v1/refund-requests`, `GET /api/v1/cases/{id}`.

The reading routes are plain `def`s, so FastAPI runs their blocking database work in its
thread pool; intake is a coroutine that hands its whole capture (the key, the body, the case)
to one thread hop once the intake gate admits it. The event loop never waits on the database.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from refund_desk import clock
from refund_desk.api_keys import Presented, hash_key, mark_used, presented, usable
from refund_desk.cases import listing
from refund_desk.cases.approvals import waiting_for
from refund_desk.cases.errors import Forbidden, InvalidRequest, Unauthorized
from refund_desk.cases.evidence import EvidenceStore
from refund_desk.cases.intake import RefundRequest, refuse_internal, submit
from refund_desk.cases.lifecycle import Status
from refund_desk.cases.views import case_view, new_case_view
from refund_desk.customers import addresses, erasure
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import Case
from refund_desk.web import api_models, waiting
from refund_desk.web.admission import admitted


async def get_runtime(request: Request) -> Runtime:
    """A coroutine: FastAPI runs a plain `def` dependency in a thread hop of its own, which
    for an attribute lookup cost more than the rest of a small request's routing."""
    runtime: Runtime = request.app.state.runtime
    return runtime


def check_key(runtime: Runtime, authorization: str | None, recent: RecentKeys) -> Presented:
    """The key's stored state if it is usable now, or 401; remembered as valid, or
    forgotten, in `recent` (the app's)."""
    key_hash = hash_key(bearer_key(authorization))
    row = presented(runtime.db, key_hash)
    now = clock.now()
    if row is None or not usable(row, now):
        recent.forget(key_hash)
        raise Unauthorized("unauthorized", "The API key is not valid.")
    recent.note(key_hash)
    mark_used(runtime.db, row, now)
    return row


class RecentKeys:
    """Key hashes the database found valid in the last `SECONDS`, in this process: only for
    whether `KeyFirst` checks a key before the body (every capture checks it again), a thread
    hop and a read that cost a quarter of intake's rate (docs/performance.md)."""

    SECONDS = 5.0
    MOST = 1000  # forgotten all at once beyond this many keys

    def __init__(self) -> None:
        self._seen: dict[str, float] = {}

    def recent(self, key_hash: str) -> bool:
        seen = self._seen.get(key_hash)
        return seen is not None and time.monotonic() - seen < self.SECONDS

    def note(self, key_hash: str) -> None:
        if len(self._seen) >= self.MOST:
            self._seen.clear()
        self._seen[key_hash] = time.monotonic()

    def forget(self, key_hash: str) -> None:
        self._seen.pop(key_hash, None)


def bearer_key(authorization: str | None) -> str:
    """The key of an `Authorization: Bearer <key>` header, or 401 (no database needed)."""
    scheme, _, key = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthorized("unauthorized", "Send an API key as `Authorization: Bearer <key>`.")
    return key.strip()


class KeyFirst(APIRoute):
    """The API's routes check the API key before FastAPI reads a request's body (it reads a
    declared body before it solves dependencies): a bad key gets 401 before anything else,
    `100 Continue` included, and its body is never buffered. A key found valid in the last
    seconds (`RecentKeys`) is not looked up again here: the route checks it (`authenticate`,
    or the capture itself)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def checked(request: Request) -> Response:
            authorization = request.headers.get("authorization")
            recent: RecentKeys = request.app.state.recent_keys
            if not recent.recent(hash_key(bearer_key(authorization))):
                runtime: Runtime = request.app.state.runtime
                await run_in_threadpool(check_key, runtime, authorization, recent)
            return await handle(request)

        return checked


# The key is read from the header, not declared as a parameter: the document says it once, as
# the API's security scheme (`api_models.describe`).
KeyHeader = Annotated[str | None, Header(include_in_schema=False)]


def authenticate(
    request: Request,
    runtime: Annotated[Runtime, Depends(get_runtime)],
    authorization: KeyHeader = None,
) -> Presented:
    """The API key of a request to a reading route (a thread hop of its own), or 401."""
    return check_key(runtime, authorization, request.app.state.recent_keys)


# A body without a Content-Type is read as JSON, as clients that omit it expect.
router = APIRouter(prefix="/api/v1", route_class=KeyFirst, strict_content_type=False)

IDEMPOTENCY_KEY_MAX = 200


@router.post(
    "/refund-requests",
    status_code=201,
    response_class=JSONResponse,
    responses=api_models.INTAKE_RESPONSES,
    summary="Ask for a refund",
)
async def create_refund_request(
    refund_request: RefundRequest,
    request: Request,
    runtime: Annotated[Runtime, Depends(get_runtime)],
    authorization: KeyHeader = None,
    idempotency_key: Annotated[
        str | None,
        Header(max_length=IDEMPOTENCY_KEY_MAX, description=api_models.IDEMPOTENCY_KEY),
    ] = None,
    prefer: Annotated[
        str | None, Header(description=api_models.PREFER, examples=["wait=5"])
    ] = None,
) -> JSONResponse:
    """Answers once the case, its first audit record and its `advance` job are committed
    (status `received`); with `Prefer: wait=N` (N ≤ 10) it waits up to N seconds for the
    case to stop moving (an outcome, or a person's turn) and answers with it as it is then.

    401 comes before any other answer (`KeyFirst`); the key is checked again in the capture's
    own thread: one revoked while the request waited at the intake gate makes no case."""
    wait = waiting.preferred_wait(prefer)  # read before anything is written
    recent: RecentKeys = request.app.state.recent_keys
    view, created = await admitted(
        request, _create, runtime, refund_request, authorization, idempotency_key, recent
    )
    headers: dict[str, str] = {}
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
        return case_view(session, case_id, with_audit=False, vault=runtime.desk.vault)


def _create(
    runtime: Runtime,
    refund_request: RefundRequest,
    authorization: str | None,
    idempotency_key: str | None,
    recent: RecentKeys,
) -> tuple[dict[str, Any], bool]:
    """One thread hop for the capture: the key again, then the request, then the case."""
    api_key = check_key(runtime, authorization, recent)
    if not api_key.may_propose:
        raise Forbidden(
            "read_only_key", "This API key may read cases, not file refund requests (scope read)."
        )
    refund_request.amount_minor()  # amount errors by field, before anything is written
    refuse_internal(refund_request)  # `source: slack`, `slack-job-…`: the system's own
    if refund_request.callback_url and not runtime.settings.allow_private_callbacks:
        try:
            found = addresses.problem(refund_request.callback_url)
        except ValueError:  # `urlsplit`: "http://[" is no URL at all
            found = "must be a URL"
        if found:
            raise InvalidRequest(
                "invalid_request", "The request has invalid fields.", {"callback_url": found}
            )
    desk = runtime.desk
    submitted = submit(
        desk,
        refund_request,
        actor=Actor("api", api_key.name),
        api_key_id=api_key.id,
        idempotency_key=idempotency_key or None,
    )
    if desk.start(submitted.job_id) and submitted.row is not None:
        # The worker advances the case; the answer does not wait, and needs no read: it is
        # the case as the capture inserted it (nothing refers to it yet).
        return new_case_view(Case.model_construct(**submitted.row), submitted.processor), True
    # A replay, or the job ran here (no worker in this process): the case as it is now.
    return _view(runtime, submitted.case_id), submitted.created


# An ISO date or time, as `datetime.fromisoformat` reads it.
_WHEN = {"anyOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "date-time"}]}


@router.get("/cases", responses=api_models.LIST_RESPONSES, summary="List cases")
def list_cases(
    runtime: Annotated[Runtime, Depends(get_runtime)],
    api_key: Annotated[Presented, Depends(authenticate)],
    status: Annotated[str | None, Query(json_schema_extra={"enum": list(Status)})] = None,
    since: Annotated[
        str | None, Query(description="Created at or after.", json_schema_extra=_WHEN)
    ] = None,
    until: Annotated[
        str | None, Query(description="Created before.", json_schema_extra=_WHEN)
    ] = None,
    email: Annotated[str | None, Query(description="The customer's email.")] = None,
    payment: Annotated[str | None, Query(description="The payment's id.")] = None,
    cursor: Annotated[
        str | None, Query(description="The `next_cursor` of the page before.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=listing.PAGE)] = listing.PAGE,
) -> dict[str, Any]:
    """Cases oldest first, 100 a page; `next_cursor` asks for the next page (null: no more).
    Filters: status, since/until (ISO date or time, on creation), the customer's email,
    the payment."""
    filters = listing.Filters.read(
        runtime.desk.vault.email_hash,
        status=status,
        since=since,
        until=until,
        email=email,
        payment=payment,
    )
    with runtime.db.read() as session:
        cases, next_cursor = listing.page(session, filters, cursor=cursor, limit=limit)
        views = [
            case_view(session, c.id, with_audit=False, vault=runtime.desk.vault) for c in cases
        ]
    return {"cases": views, "next_cursor": next_cursor}


@router.get("/cases/{case_id}", responses=api_models.CASE_RESPONSES, summary="One case")
def get_case(
    case_id: str,
    runtime: Annotated[Runtime, Depends(get_runtime)],
    api_key: Annotated[Presented, Depends(authenticate)],
) -> dict[str, Any]:
    with runtime.db.read() as session:
        view = case_view(session, case_id, with_audit=True, vault=runtime.desk.vault)
        # who may decide it now, as the card and a click see it (null: it waits for nobody)
        case = session.get(Case, case_id)
        deciding = waiting_for(session, case) if case is not None else None
        view["deciders"] = deciding.to_json() if deciding is not None else None
        return view


@router.delete(
    "/customers/{email}", responses=api_models.ERASE_RESPONSES, summary="Erase a customer"
)
def erase_customer(
    email: str,
    runtime: Annotated[Runtime, Depends(get_runtime)],
    api_key: Annotated[Presented, Depends(authenticate)],
) -> dict[str, Any]:
    """Erase one customer's personal data (email, name, words, evidence) on every case;
    amounts, decisions, approvals and the audit chain stay. 404 if we hold none."""
    done = erasure.erase_customer(
        runtime.desk,
        email,
        actor=Actor("api", api_key.name),
        evidence=EvidenceStore(runtime.settings.evidence_path()),
        forget=runtime.sandbox.forget_customer if runtime.sandbox is not None else None,
    )
    return {
        "erased": True,
        "cases": done.cases,
        "evidence_files": done.evidence_files,
        "already_erased": done.already,
    }
