"""My queue: the cases the signed-in person may decide, most urgent first."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy import func, select

from refund_desk.runtime import Runtime
from refund_desk.storage.models import AuditRecord
from refund_desk.web.desk.access import reader
from refund_desk.web.desk.render import page
from refund_desk.web.desk.session import Viewer

router = APIRouter(include_in_schema=False)


def record_mark(runtime: Runtime) -> str:
    """Where the record stands: the newest audit record's number. Every change of a case writes
    one in its own transaction, so a page drawn at mark N is current while the mark is N."""
    with runtime.db.read() as session:
        return str(session.scalar(select(func.max(AuditRecord.seq))) or 0)


@router.get("/desk")
def my_queue(request: Request, viewer: Viewer = Depends(reader)) -> Response:
    runtime: Runtime = request.app.state.runtime
    return page(
        request,
        viewer,
        "queue.html",
        title="My queue",
        section="queue",
        mark=record_mark(runtime),
        rows=[],
    )


@router.get("/desk/changes")
def changes(request: Request, since: str = "", viewer: Viewer = Depends(reader)) -> Response:
    """Whether the record moved since a page was drawn (the page's script asks every 2 s)."""
    mark = record_mark(request.app.state.runtime)
    return JSONResponse(
        {"changed": mark != since, "mark": mark}, headers={"Cache-Control": "no-store"}
    )
