"""My queue: the cases the signed-in person may decide, most urgent first, with the card's
buttons; and the decision itself, through the same function, token and checks as a Slack click.

A button opens a confirmation page that says what this person's click will do
(`approvals.preview`, the text Slack's modal shows: "approval 1 of 2: nothing is paid yet"), or
why it would be refused, and carries the single-use token of the case as that page shows it
(`tokens.for_case`, as a Slack card's buttons); confirming calls `approvals.act`, which consumes
the token in one short transaction. Its jobs (the card's update in Slack, the refund) start as
after a Slack click.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from sqlalchemy import func, select
from sqlmodel import col

from refund_desk import clock
from refund_desk.bot.blocks.cards import until
from refund_desk.bot.card_facts import _why
from refund_desk.cases import approvals, tokens
from refund_desk.cases.approvals import DECIDABLE, may_decide
from refund_desk.cases.quorum import approval_count, approvals_needed
from refund_desk.governance.versions import load_version
from refund_desk.runtime import Runtime
from refund_desk.storage.models import AuditRecord, Case
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
class Row:
    """A case in the queue: what its card says and the card's buttons."""

    case: Case
    why: str | None  # why a person decides: the rule's description
    group: str | None  # the approver group the policy named
    due: datetime | None
    due_in: str | None
    approvals: int
    needed: int

    @property
    def buttons(self) -> list[tuple[str, str]]:
        step = f" ({self.approvals + 1} of {self.needed})" if self.needed > 1 else ""
        return [
            (action, label + (step if action == "approve" else ""))
            for action, label in LABELS.items()
        ]


def my_queue_rows(runtime: Runtime, user: str, now: datetime) -> list[Row]:
    """The cases ``user`` may decide now (`approvals.may_decide`: the checks a click makes),
    soonest deadline first (no deadline last, then the oldest)."""
    desk = runtime.desk
    with desk.db.read() as session:
        waiting = session.scalars(  # ids first: a case is read only if it is looked at
            select(col(Case.id))
            .where(col(Case.status).in_(DECIDABLE))
            .order_by(col(Case.sla_due_at).is_(None), col(Case.sla_due_at), col(Case.created_at))
            .limit(SCANNED)
        ).all()
        rows: list[Row] = []
        for case_id in waiting:
            if len(rows) >= SHOWN:
                break
            case = session.get(Case, case_id)
            if case is not None and may_decide(session, case, user, desk.directory):
                policy = load_version(session, case.policy_version) if case.policy_version else None
                rows.append(
                    Row(
                        case=case,
                        why=_why(case, policy),
                        group=(case.decision or {}).get("approvers"),
                        due=case.sla_due_at,
                        due_in=until(case.sla_due_at, now),
                        approvals=approval_count(session, case),
                        needed=approvals_needed(case),
                    )
                )
        return rows


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
    case: str = Form(""),
    action: str = Form(""),
    revision: str = Form(""),
    csrf: str = Form(""),
) -> Response:
    """What this person's click will do, said before it does anything (Slack's modal), with
    the single-use token of the case as it is now: confirming consumes it."""
    if not csrf_ok(request, viewer, csrf):
        return page(request, viewer, "forbidden.html", title="Not accepted", status=403)
    runtime: Runtime = request.app.state.runtime
    desk = runtime.desk
    with desk.db.read() as session:
        found = session.get(Case, case)
        if found is None or action not in LABELS:
            return page(
                request,
                viewer,
                "record_missing.html",
                title="No such case",
                status=404,
                case_id=case,
            )
        token = tokens.for_case(desk.secret, found, action, now=desk.now())
        moved = str(found.revision) != revision
    try:
        seen = approvals.preview(desk, token_value=token, user=viewer.user)
    except approvals.Refused as refusal:
        return _refused(request, viewer, refusal)
    return page(
        request,
        viewer,
        "confirm.html",
        title=LABELS[seen.action],
        section="queue",
        seen=seen,
        token=token,
        ceiling=seen.ceiling,
        moved=moved,
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
