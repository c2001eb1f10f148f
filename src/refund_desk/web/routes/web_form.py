"""`GET/POST /request`: the customer's own refund form.

Order of checks on a POST: the CSRF pair, the fields and files (type by content, size), the
rate limits (per email and per IP, counted in the database), then the customer against the
system of record. Only a request that passes all of them stores files and becomes a case; any
refusal re-renders the form with the errors (or answers JSON to a JSON client).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from email_validator import EmailNotValidError, validate_email
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile

from refund_desk import money
from refund_desk.cases import evidence
from refund_desk.cases.errors import CaseError
from refund_desk.cases.intake import amount_problem, quoted
from refund_desk.cases.ports import REASONS
from refund_desk.cases.views import case_view
from refund_desk.crypto import keyed_hash
from refund_desk.customers import intake as channels
from refund_desk.customers import ratelimit
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor
from refund_desk.web import pages
from refund_desk.web.admission import admitted
from refund_desk.web.errors import error_response

router = APIRouter()
PURPOSE = "request"
PER_EMAIL_PER_HOUR = 5
PER_IP_PER_HOUR = 20
MAX_BODY = (evidence.MAX_FILES + 1) * evidence.MAX_BYTES
_PAYMENT = re.compile(r"^[A-Za-z0-9_\-]{3,100}$")

FIELDS = (
    pages.Field(
        "email",
        "Your email address",
        "email",
        required=True,
        hint="The address you used when you paid.",
        attrs={"autocomplete": "email"},
    ),
    pages.Field(
        "payment",
        "Payment or order reference",
        required=True,
        hint="As shown on your receipt, for example py_1a2b3c.",
        attrs={"autocomplete": "off", "spellcheck": "false"},
    ),
    pages.Field(
        "amount",
        "Amount to refund",
        hint="Leave empty to ask for everything that is left to refund.",
        attrs={"inputmode": "decimal"},
    ),
    pages.Field(
        "reason",
        "Reason",
        "select",
        options=(
            ("", "Choose a reason"),
            *((r, r.replace("_", " ").capitalize()) for r in REASONS),
        ),
    ),
    pages.Field("message", "What happened?", "textarea", attrs={"maxlength": "10000"}),
    pages.Field(
        "evidence",
        "Photos or documents",
        "file",
        hint=f"Up to {evidence.MAX_FILES} files: PNG, JPEG, GIF, WebP or PDF, "
        f"{evidence.MAX_BYTES // (1024 * 1024)} MB each.",
        attrs={"multiple": "", "accept": ",".join((*evidence.IMAGE_TYPES, "application/pdf"))},
    ),
)


def _form(
    request: Request,
    *,
    values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
    form_error: str | None = None,
    status: int = 200,
    code: str = "invalid_request",
) -> Response:
    errors = errors or {}
    if pages.wants_json(request) and status >= 400:
        return error_response(code, form_error or "The request has invalid fields.", status, errors)
    runtime: Runtime = request.app.state.runtime
    cookie, new = pages.csrf_cookie(request)
    token = pages.csrf_token(runtime.desk.secret, cookie, PURPOSE, runtime.desk.now().timestamp())
    response = pages.render(
        "request_form.html",
        title="Request a refund",
        status=status,
        fields=FIELDS,
        values=values or {},
        errors=errors,
        form_error=form_error,
        labels={f.name: f.label for f in FIELDS},
        csrf=token,
    )
    return pages.set_csrf_cookie(response, request, cookie) if new else response


@router.get("/request")
def request_form(request: Request) -> Response:
    return _form(request)


@router.post("/request")
async def submit_form(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    desk = runtime.desk
    if int(request.headers.get("content-length") or 0) > MAX_BODY:
        return _form(request, form_error="The files are too large.", status=413, code="too_large")
    try:
        form = await request.form(max_files=evidence.MAX_FILES + 1, max_fields=20)
    except Exception:  # a malformed multipart body
        return _form(
            request, form_error="The form could not be read.", status=400, code="invalid_body"
        )
    values = {k: v.strip() for k, v in form.items() if isinstance(v, str) and k != "csrf_token"}
    cookie = request.cookies.get(pages.CSRF_COOKIE)
    token = form.get("csrf_token")
    if not pages.csrf_ok(
        desk.secret,
        cookie,
        token if isinstance(token, str) else None,
        PURPOSE,
        desk.now().timestamp(),
    ):
        return _form(
            request,
            values=values,
            status=403,
            code="csrf_failed",
            form_error="This form has expired. Please check it and send it again.",
        )
    if values.get("website"):  # the hidden field only robots fill in
        return _form(
            request, status=400, code="rejected", form_error="The request could not be accepted."
        )
    errors = _check_fields(values)
    uploads, file_errors = await _read_files(form)
    errors.update(file_errors)
    if errors:
        return _form(request, values=values, errors=errors, status=422)
    if not await run_in_threadpool(_within_limits, runtime, values["email"], request):
        return _form(
            request,
            values=values,
            status=429,
            code="rate_limited",
            form_error="Too many requests. Please wait an hour and try again.",
        )
    assert isinstance(token, str)
    req = channels.ChannelRequest(
        source="web_form",
        email=values["email"],
        payment=values["payment"],
        amount=values.get("amount") or None,
        message=values.get("message") or None,
        reason=values.get("reason") or None,
        actor=Actor("customer", "web_form"),
        dedupe="form:" + hashlib.sha256(f"{cookie}|{token}".encode()).hexdigest()[:48],
        verify=True,
        uploads=uploads,
        links=evidence.links_in(values.get("message")),
    )
    try:
        view = await admitted(request, _receive, runtime, req)
    except CaseError as exc:
        status = exc.status if exc.status >= 400 else 422
        fields = {k: v for k, v in exc.fields.items() if k in {f.name for f in FIELDS}}
        form_error = exc.message if exc.code in ("not_matched",) or not fields else None
        return _form(
            request,
            values=values,
            errors=fields,
            form_error=form_error,
            status=status,
            code=exc.code,
        )
    return _done(request, view)


def _check_fields(values: dict[str, str]) -> dict[str, str]:
    """Each field as the customer typed it; what is wrong said in words that quote it (the
    amount's decimals are checked against the payment's currency once it is known)."""
    errors: dict[str, str] = {}
    email = values.get("email", "")
    if not email:
        errors["email"] = "Enter your email address."
    else:
        try:
            validate_email(email, check_deliverability=False)
        except EmailNotValidError:
            errors["email"] = (
                f"{quoted(email)} is not an email address; one reads like name@example.com."
            )
    if not values.get("payment"):
        errors["payment"] = "Enter the payment or order reference from your receipt."
    elif not _PAYMENT.match(values["payment"]):
        errors["payment"] = (
            f"{quoted(values['payment'])} is not a reference from a receipt; one has letters, "
            "digits, - and _ only, such as py_1a2b3c."
        )
    if problem := amount_problem(values.get("amount", "")):
        errors["amount"] = problem
    if values.get("reason") and values["reason"] not in REASONS:
        errors["reason"] = "Choose a reason from the list."
    if len(values.get("message", "")) > 10_000:
        errors["message"] = "The message is too long (10,000 characters at most)."
    return errors


async def _read_files(form: FormData) -> tuple[list[evidence.Upload], dict[str, str]]:
    files = [f for f in form.getlist("evidence") if isinstance(f, UploadFile) and f.filename]
    if len(files) > evidence.MAX_FILES:
        return [], {"evidence": f"Attach at most {evidence.MAX_FILES} files."}
    uploads: list[evidence.Upload] = []
    for number, upload in enumerate(files, start=1):
        data = await upload.read(evidence.MAX_BYTES + 1)
        try:
            uploads.append(
                evidence.check_upload(data, name=f"File {number}", filename=upload.filename)
            )
        except CaseError as exc:
            return [], {"evidence": exc.fields.get("evidence", exc.message)}
    return uploads, {}


def _within_limits(runtime: Runtime, email: str, request: Request) -> bool:
    """Count the attempt against the email and the IP; both must be within their limit."""
    desk, now = runtime.desk, runtime.desk.now()
    ip = request.client.host if request.client else "unknown"
    limits = {
        "form-email:" + desk.vault.email_hash(email): PER_EMAIL_PER_HOUR,
        "form-ip:" + keyed_hash(desk.secret, "ip-index", ip): PER_IP_PER_HOUR,
    }
    hits = [  # both are counted, whatever the first says
        ratelimit.hit(runtime.db, key, limit=limit, window_seconds=3600, now=now)
        for key, limit in limits.items()
    ]
    return all(hits)


def _receive(runtime: Runtime, req: channels.ChannelRequest) -> dict[str, Any]:
    desk = runtime.desk
    submitted = channels.receive(
        desk,
        req,
        store=evidence.EvidenceStore(runtime.settings.evidence_path()),
        base_url=runtime.settings.public_url,
    )
    desk.start(submitted.job_id)
    with runtime.db.read() as session:
        return case_view(session, submitted.case_id, with_audit=False)


def _done(request: Request, view: dict[str, Any]) -> Response:
    """What the customer sees: the reference, and the outcome if it is already known."""
    if pages.wants_json(request):
        return JSONResponse(
            {k: view[k] for k in ("id", "status", "amount", "currency")}, status_code=201
        )
    amount = money.format_money(money.to_minor(view["amount"], view["currency"]), view["currency"])
    if view["status"] in ("refunded", "denied") and view.get("customer_message"):
        outcome = str(view["customer_message"])
    else:
        outcome = f"We are looking at your request for {amount}. We will email you the outcome."
    response = pages.render(
        "request_done.html",
        title="Request received",
        status=201,
        outcome=outcome,
        reference=view["id"],
    )
    response.headers["X-Refund-Desk-Case"] = view["id"]
    return response
