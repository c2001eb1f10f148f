"""`GET/POST /appeal/{token}` and `GET /evidence/{case}/{sha256}`.

A GET of an appeal link (what mail scanners and link previews do) shows a form and changes
nothing; only the form's POST, with its CSRF pair, creates the appeal.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from refund_desk import money
from refund_desk.cases import evidence
from refund_desk.cases.advisory import ERASED
from refund_desk.cases.desk import Desk
from refund_desk.cases.errors import CaseError
from refund_desk.cases.evidence import shown
from refund_desk.customers import appeals
from refund_desk.runtime import Runtime
from refund_desk.storage.models import Case
from refund_desk.web import pages
from refund_desk.web.errors import error_response

router = APIRouter()
PURPOSE = "appeal"
MESSAGE = pages.Field(
    "message",
    "What should we look at again?",
    "textarea",
    required=True,
    hint="Tell us what we missed. A different person will review your request.",
    attrs={"maxlength": "10000"},
)


def _refused(request: Request, exc: CaseError) -> Response:
    if pages.wants_json(request):
        return error_response(exc.code, exc.message, exc.status, exc.fields)
    return pages.render(
        "appeal_refused.html", title="Appeal", status=exc.status, message=exc.message
    )


def _form(
    request: Request,
    token: str,
    case: Case,
    *,
    values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
    form_error: str | None = None,
    status: int = 200,
) -> Response:
    desk: Desk = request.app.state.runtime.desk
    cookie, new = pages.csrf_cookie(request)
    csrf = pages.csrf_token(desk.secret, cookie, PURPOSE, desk.now().timestamp())
    amount = money.format_money(case.amount, case.currency)
    response = pages.render(
        "appeal_form.html",
        title="Appeal",
        status=status,
        amount=amount,
        reference=case.id,
        token=token,
        csrf=csrf,
        message_field=MESSAGE,
        values=values or {},
        errors=errors or {},
        form_error=form_error,
    )
    return pages.set_csrf_cookie(response, request, cookie) if new else response


@router.get("/appeal/{token}")
def appeal_form(request: Request, token: str) -> Response:
    desk: Desk = request.app.state.runtime.desk
    try:
        case = appeals.check(desk, token)
    except CaseError as exc:
        return _refused(request, exc)
    with desk.db.read() as session:
        already = appeals.existing_appeal(session, case.id)
    if already:
        return pages.render("appeal_received.html", title="Appeal", already=True, reference=already)
    return _form(request, token, case)


@router.post("/appeal/{token}")
async def appeal_submit(request: Request, token: str) -> Response:
    runtime: Runtime = request.app.state.runtime
    desk = runtime.desk
    try:
        case = await run_in_threadpool(appeals.check, desk, token)
    except CaseError as exc:
        return _refused(request, exc)
    form = await request.form(max_files=0, max_fields=5)
    message = str(form.get("message") or "").strip()
    csrf = form.get("csrf_token")
    if not pages.csrf_ok(
        desk.secret,
        request.cookies.get(pages.CSRF_COOKIE),
        csrf if isinstance(csrf, str) else None,
        PURPOSE,
        desk.now().timestamp(),
    ):
        return _form(
            request,
            token,
            case,
            values={"message": message},
            status=403,
            form_error="This form has expired. Please send it again.",
        )
    if not message or len(message) > 10_000:
        error = "Tell us what we should look at again." if not message else "Too long."
        return _form(
            request, token, case, values={"message": message}, errors={"message": error}, status=422
        )
    try:
        submitted = await run_in_threadpool(
            appeals.create,
            desk,
            token,
            message=message,
            base_url=runtime.settings.public_url,
            store=evidence.EvidenceStore(runtime.settings.evidence_path()),
        )
    except CaseError as exc:
        return _refused(request, exc)
    if submitted.job_id is not None:
        await run_in_threadpool(desk.start, submitted.job_id)
    if pages.wants_json(request):
        return JSONResponse(
            {"id": submitted.case_id, "appeal_of": case.id},
            status_code=201 if submitted.created else 200,
        )
    response = pages.render(
        "appeal_received.html",
        title="Appeal received",
        status=201 if submitted.created else 200,
        already=False,
        reference=submitted.case_id,
    )
    response.headers["X-Refund-Desk-Case"] = submitted.case_id
    return response


@router.get("/evidence/{case_id}/{sha256}")
def evidence_file(request: Request, case_id: str, sha256: str, sig: str = "") -> Response:
    """One evidence file, for whoever holds the signed link (the case card)."""
    runtime: Runtime = request.app.state.runtime
    desk = runtime.desk
    if not evidence.view_allowed(desk.secret, case_id, sha256, sig):
        return error_response("not_found", "No such evidence.", 404)
    filename = None
    with desk.db.read() as session:
        case = session.get(Case, case_id)
        item = (
            next((i for i in (case.evidence or []) if i.get("sha256") == sha256), None)
            if case and case.erased_at is None  # an erased customer's files are gone
            else None
        )
        try:
            store = evidence.EvidenceStore(runtime.settings.evidence_path())
            data = store.read(item, desk.vault, session) if item is not None else None
            if item is not None and data is not None:
                [opened] = shown(desk.vault, [item], session=session)
                filename = opened.get("filename")
        except ValueError:
            data = None
    if item is None or data is None:
        return error_response("not_found", "No such evidence.", 404)
    headers = {
        "Cache-Control": "private, max-age=3600",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "default-src 'none'; sandbox",
    }
    if filename and filename != ERASED:  # the name the customer gave it
        headers["Content-Disposition"] = f"inline; filename*=UTF-8''{quote(filename, safe='')}"
    return Response(data, media_type=str(item["content_type"]), headers=headers)
