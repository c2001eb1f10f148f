"""The sandbox's web page and its JSON endpoints.

`GET /sandbox/` serves a plain HTML/JS page (no build step, no network) that polls
`/sandbox/state`. Clicks, modal submissions, slash commands and App Home visits come back to
`/sandbox/act/*`, which turn them into the signed requests Slack would send. A case's record is
the web desk's (`/desk/cases/{id}`): the page links there, one record view, not two.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlmodel import col

from refund_desk import money
from refund_desk.demo.slack import requests as events
from refund_desk.demo.slack.modals import submission_values
from refund_desk.demo.slack.state import Message, SlackError
from refund_desk.storage.models import Case, SlackMessage

if TYPE_CHECKING:
    from refund_desk.demo.slack.emulator import SlackEmulator
    from refund_desk.runtime import Runtime

STATIC = {"page.js": "text/javascript", "page.css": "text/css", "index.html": "text/html"}
CASES_SHOWN = 60


class Click(BaseModel):
    user: str = Field(max_length=20)
    channel: str = Field(max_length=20)
    ts: str = Field(max_length=30)
    block_id: str = Field(max_length=255)
    action_id: str = Field(max_length=255)


class Submit(BaseModel):
    user: str = Field(max_length=20)
    view_id: str = Field(max_length=30)
    values: dict[str, str | None] = Field(default_factory=dict)


class Command(BaseModel):
    user: str = Field(max_length=20)
    channel: str = Field(max_length=20)
    text: str = Field(min_length=1, max_length=4000)


class Visit(BaseModel):  # closing a modal, opening App Home
    user: str = Field(max_length=20)


def _static(name: str) -> str:
    return resources.files("refund_desk.demo.slack").joinpath("static", name).read_text()


def _refused(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"ok": False, "error": message}, status_code=status)


def _amount_line(case: Case) -> str:
    """ "200.00 of 320.00 USD (partial)" when a person refunded less than was asked."""
    asked = case.asked() if case.status == "refunded" else None
    return money.format_share(case.amount, asked, case.currency)


def _cases(runtime: Runtime) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The newest cases and which Slack message shows which case (the app's own record)."""
    with runtime.db.read() as session:
        rows = session.scalars(
            select(Case).order_by(col(Case.created_at).desc()).limit(CASES_SHOWN)
        ).all()
        cases = [
            {
                "id": c.id,
                "status": c.status,
                "amount": _amount_line(c),
                "rule": (c.decision or {}).get("rule"),
                "tier": (c.decision or {}).get("tier"),
                "source": c.source,
                "requested_by": c.requested_by,
                "payment": c.payment_id,
            }
            for c in rows
        ]
        shown = {  # a backtest's report is remembered there too: it is not a case
            f"{m.channel}/{m.ts}": str(m.case_id)
            for m in session.scalars(
                select(SlackMessage).where(col(SlackMessage.kind) != "report").limit(5000)
            ).all()
        }
    return cases, shown


def router(sandbox: SlackEmulator) -> APIRouter:
    ws = sandbox.workspace
    page = APIRouter()

    @page.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/sandbox/")

    @page.get("/sandbox", include_in_schema=False)
    @page.get("/sandbox/", include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(_static("index.html"), headers={"Cache-Control": "no-store"})

    @page.get("/sandbox/static/{name}", include_in_schema=False)
    async def static(name: str) -> Response:
        if name not in STATIC:
            return Response("not found", status_code=404)
        return Response(_static(name), media_type=STATIC[name])

    @page.get("/sandbox/state")
    def state(request: Request, user: str = "") -> JSONResponse:
        """What the chosen user sees, plus the case list (a plain def: it reads the database)."""
        if user not in ws.users:
            user = next(iter(ws.users))
        snapshot = ws.snapshot(user)
        snapshot["user"] = user
        snapshot["cases"], snapshot["shown"] = _cases(request.app.state.runtime)
        return JSONResponse(snapshot, headers={"Cache-Control": "no-store"})

    @page.get("/sandbox/files/{file_id}/{name}")
    async def shared_file(file_id: str, name: str) -> Response:
        """A file shared in a channel, opened from the page as Slack's client opens it (a
        backtest's CSV): shown as text in the browser, never run."""
        with ws.lock:
            file = ws.files.get(file_id)
            shared = file is not None and bool(file.get("shares")) and file["name"] == name
        if not shared or file is None:
            return Response("no such file in a channel", status_code=404)
        return Response(
            file["content"],
            media_type="text/plain; charset=utf-8",
            headers={
                "Content-Disposition": f'inline; filename="{_safe_name(name)}"',
                "X-Content-Type-Options": "nosniff",
            },
        )

    @page.post("/sandbox/act/click")
    async def click(body: Click, request: Request) -> JSONResponse:
        if body.user not in ws.users:
            return _refused("unknown user")
        with ws.lock:
            message = ws.find(body.channel, body.ts)
            element = _button(message, body.block_id, body.action_id) if message else None
        if message is None or element is None:
            return _refused("no such button (the message may have changed)", 404)
        action = {
            "action_id": element["action_id"],
            "block_id": body.block_id,
            "value": element.get("value", ""),
            "type": "button",
            "text": element.get("text"),
        }
        base = str(request.base_url)
        content, kind = events.block_actions(sandbox, base, body.user, message, action)
        return _answered(await events.deliver(request.app, sandbox.signing_secret, content, kind))

    @page.post("/sandbox/act/submit")
    async def submit(body: Submit, request: Request) -> JSONResponse:
        with ws.lock:
            modal = ws.modals.get(body.user)
        if modal is None or modal.id != body.view_id:
            return _refused("this modal is no longer open", 404)
        values, missing = submission_values(modal.view, body.values)
        if missing:  # Slack's client checks required inputs before it sends anything
            with ws.lock:
                modal.errors = missing
                ws.changed()
            return JSONResponse({"ok": False, "errors": missing})
        content, kind = events.view_submission(sandbox, body.user, modal, values)
        answer = await events.deliver(request.app, sandbox.signing_secret, content, kind)
        with ws.lock:
            action = answer.body.get("response_action")
            if answer.status == 200 and action == "errors":
                modal.errors = {str(k): str(v) for k, v in answer.body.get("errors", {}).items()}
            elif answer.status == 200 and action == "update" and "view" in answer.body:
                modal.view, modal.errors = answer.body["view"], {}
            elif answer.status == 200 and ws.modals.get(body.user) is modal:
                del ws.modals[body.user]
            ws.changed()
        return _answered(answer)

    @page.post("/sandbox/act/close")
    async def close(body: Visit) -> JSONResponse:
        with ws.lock:
            if ws.modals.pop(body.user, None) is not None:
                ws.changed()
        return JSONResponse({"ok": True})

    @page.post("/sandbox/act/command")
    async def command(body: Command, request: Request) -> JSONResponse:
        if body.user not in ws.users or body.channel not in ws.channels:
            return _refused("unknown user or channel")
        name, _, text = body.text.strip().partition(" ")
        if name not in ("/refund", "/refund-policy"):
            with ws.lock:
                ws.add_ephemeral(
                    body.user,
                    Message(body.channel, ws.new_ts(), f"{name} is not a valid command."),
                )
            return JSONResponse({"ok": False, "error": f"{name} is not a valid command"})
        base = str(request.base_url)
        content, kind = events.slash_command(sandbox, base, body.user, body.channel, name, text)
        answer = await events.deliver(request.app, sandbox.signing_secret, content, kind)
        reply = answer.body.get("text")
        if answer.status == 200 and reply:  # an ack with text is shown to the user only
            with ws.lock:
                ws.add_ephemeral(body.user, Message(body.channel, ws.new_ts(), str(reply)))
        return _answered(answer)

    @page.post("/sandbox/act/home")
    async def home(body: Visit, request: Request) -> JSONResponse:
        if body.user not in ws.users:
            return _refused("unknown user")
        content, kind = events.app_home_opened(body.user)
        return _answered(await events.deliver(request.app, sandbox.signing_secret, content, kind))

    return page


def _safe_name(name: str) -> str:
    return "".join(c for c in name if c.isalnum() or c in "-_.") or "file"


def _button(message: Message, block_id: str, action_id: str) -> dict[str, Any] | None:
    for block in message.blocks:
        if block.get("type") != "actions" or block.get("block_id") != block_id:
            continue
        for element in block.get("elements", []):
            if element.get("action_id") == action_id:
                return dict(element)
    return None


def _answered(answer: events.Answer) -> JSONResponse:
    body: dict[str, Any] = {"ok": answer.status == 200, "status": answer.status}
    if answer.late:
        body["warning"] = f"the app answered after {answer.seconds:.1f}s; Slack gives up at 3s"
    if answer.status != 200:
        body["error"] = answer.body.get("error") or f"the app answered HTTP {answer.status}"
    return JSONResponse(body)


__all__ = ["SlackError", "router"]
