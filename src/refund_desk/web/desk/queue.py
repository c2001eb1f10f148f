"""My queue: the cases the signed-in person may decide, most urgent first, with the card's
buttons; and the decision itself, through the same function, token and checks as a Slack click.

A button posts its single-use token to a confirmation page that says what this person's click
will do (`approvals.preview`, the text Slack's modal shows: "approval 1 of 2: nothing is paid
yet"), or why it would be refused; confirming calls `approvals.act`, which consumes the token in
one short transaction. Its jobs (the card's update in Slack, the refund) start as a Slack click's
do.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from sqlalchemy import func, select
from sqlmodel import Session, col

from refund_desk import clock
from refund_desk.bot.blocks.cards import CardContext, _buttons, until
from refund_desk.bot.card_facts import _why
from refund_desk.cases import approvals, tokens
from refund_desk.cases.approvals import DECIDABLE, may_decide, preview_in
from refund_desk.cases.errors import CaseError
from refund_desk.cases.quorum import approval_count, approvals_needed
from refund_desk.governance.versions import load_version
from refund_desk.runtime import Runtime
from refund_desk.storage.models import AuditRecord, Case
from refund_desk.text import Text
from refund_desk.web.desk.access import reader
from refund_desk.web.desk.render import csrf_ok, keep, page
from refund_desk.web.desk.session import Viewer

router = APIRouter(include_in_schema=False)
SHOWN = 20  # cases on the page, as in App Home
SCANNED = 2000  # waiting cases looked at, most urgent first, to find them
LABELS = {
    "approve": "Approve",
    "approve_partial": "Approve partially",
    "deny": "Deny",
    "escalate": "Escalate",
}


def record_mark(runtime: Runtime) -> str:
    """Where the record stands: the newest audit record's number. Every change of a case writes
    one in its own transaction, so a page drawn at mark N is current while the mark is N."""
    with runtime.db.read() as session:
        return str(session.scalar(select(func.max(AuditRecord.seq))) or 0)


@dataclass(frozen=True)
class Button:
    action: str
    label: str
    token: str


@dataclass(frozen=True)
class Row:
    """A case in the queue: what its card says, why it is this person's, and their buttons."""

    case: Case
    why: str | None  # why a person decides: the rule's description
    who: Text  # "You decide as a finance approver, limit 5,000.00 USD"
    due: datetime | None
    due_in: str | None
    approvals: int
    needed: int
    buttons: tuple[Button, ...]
    refused: Text | None  # why Approve is not theirs (over their limit, say)


def my_queue_rows(runtime: Runtime, user: str, now: datetime) -> list[Row]:
    """The cases ``user`` may decide now, soonest deadline first (no deadline last, then the
    oldest), each with only the buttons whose click ``user`` may make."""
    desk = runtime.desk
    with desk.db.read() as session:
        waiting = session.scalars(
            select(Case)
            .where(col(Case.status).in_(DECIDABLE))
            .order_by(col(Case.sla_due_at).is_(None), col(Case.sla_due_at), col(Case.created_at))
            .limit(SCANNED)
        ).all()
        rows: list[Row] = []
        for case in waiting:
            if len(rows) >= SHOWN:
                break
            if may_decide(session, case, user, desk.directory):
                row = _row(session, runtime, case, user, now)
                if row is not None:
                    rows.append(row)
        return rows


def _row(session: Session, runtime: Runtime, case: Case, user: str, now: datetime) -> Row | None:
    """The card's facts and the buttons ``user`` may press: each one asked of the checks its
    click makes (`approvals.preview_in`), so no button here is refused when pressed."""
    desk = runtime.desk
    policy = load_version(session, case.policy_version) if case.policy_version else None
    ctx = CardContext(
        case=case,
        email=None,
        approvals=approval_count(session, case),
        needed=approvals_needed(case),
        channel_group=None,
        now=now,
    )
    buttons: list[Button] = []
    who: Text | None = None
    refused: Text | None = None
    for button in _buttons(ctx, desk.secret):
        token = str(button.value)
        try:
            seen = preview_in(
                session, case, tokens.verify(desk.secret, token, now=now), user, desk.directory
            )
        except CaseError as refusal:
            if button.action_id == "approve":
                refused = refusal.text
            continue
        who = who or seen.who
        label = str(button.text.text) if button.text else LABELS[str(button.action_id)]
        buttons.append(Button(str(button.action_id), label, token))
    if not buttons or who is None:
        return None
    return Row(
        case=case,
        why=_why(case, policy),
        who=who,
        due=case.sla_due_at,
        due_in=until(case.sla_due_at, now),
        approvals=ctx.approvals,
        needed=ctx.needed,
        buttons=tuple(buttons),
        refused=refused,
    )


@router.get("/desk")
def my_queue(request: Request, viewer: Viewer = Depends(reader)) -> Response:
    runtime: Runtime = request.app.state.runtime
    mark = record_mark(runtime)
    rows = my_queue_rows(runtime, viewer.user, clock.now())
    said = request.query_params.get("said")
    return page(
        request,
        viewer,
        "queue.html",
        title="My queue",
        section="queue",
        mark=mark,
        rows=rows,
        said=said,
        said_case=request.query_params.get("case"),
        labels=LABELS,
        shown=SHOWN,
    )


@router.post("/desk/decide/confirm")
def confirm(
    request: Request,
    viewer: Viewer = Depends(reader),
    token: str = Form(""),
    csrf: str = Form(""),
) -> Response:
    """What this person's click will do, said before it does anything (Slack's modal)."""
    if not csrf_ok(request, viewer, csrf):
        return page(request, viewer, "forbidden.html", title="Not accepted", status=403)
    runtime: Runtime = request.app.state.runtime
    try:
        seen = approvals.preview(runtime.desk, token_value=token, user=viewer.user)
    except approvals.Refused as refusal:
        return _refused(request, viewer, refusal)
    return page(
        request,
        viewer,
        "confirm.html",
        title=LABELS.get(seen.action, "Decide"),
        section="queue",
        seen=seen,
        token=token,
        ceiling=seen.ceiling,
    )


@router.post("/desk/decide")
def decide(
    request: Request,
    viewer: Viewer = Depends(reader),
    token: str = Form(""),
    csrf: str = Form(""),
    reason: str = Form(""),
    amount: str = Form(""),
) -> Response:
    """The decision: `approvals.act`, exactly as a Slack click; then back to the queue."""
    if not csrf_ok(request, viewer, csrf):
        return page(request, viewer, "forbidden.html", title="Not accepted", status=403)
    runtime: Runtime = request.app.state.runtime
    try:
        outcome = approvals.act(
            runtime.desk,
            token_value=token,
            user=viewer.user,
            reason=reason.strip() or None,
            amount=amount.strip() or None,
        )
    except approvals.Refused as refusal:
        return _refused(request, viewer, refusal)
    for job in outcome.jobs:  # the card's update in Slack, the refund: as after a Slack click
        runtime.desk.start(job)
    query = f"?case={outcome.case_id}&said={_q(outcome.message)}"
    return keep(request, RedirectResponse(f"/desk{query}", 303))


def _refused(request: Request, viewer: Viewer, refusal: approvals.Refused) -> Response:
    case = refusal.case if isinstance(refusal, approvals.ClickRefused) else None
    return page(
        request,
        viewer,
        "refused.html",
        title="Not decided",
        section="queue",
        status=409,
        refusal=refusal.text,
        about=case,
    )


def _q(text: str) -> str:
    return quote(text, safe="")


@router.get("/desk/changes")
def changes(request: Request, since: str = "", viewer: Viewer = Depends(reader)) -> Response:
    """Whether the record moved since a page was drawn (the page's script asks every 2 s)."""
    mark = record_mark(request.app.state.runtime)
    body = {"changed": mark != since, "mark": mark}
    return JSONResponse(body, headers={"Cache-Control": "no-store"})
