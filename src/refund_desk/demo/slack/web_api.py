"""The Web API look-alike at `<base>/sandbox/slack/api/{method}`: the methods the app calls, with
Slack's answers, errors and limits.

Handlers are `async` and only touch the in-memory workspace under its lock, so they never block
the event loop; the app calls them both from job threads (sync client) and from listeners
(async client) in the same process.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from refund_desk.demo.slack import checks
from refund_desk.demo.slack.state import Message, Modal, SlackError, Workspace

if TYPE_CHECKING:
    from refund_desk.demo.slack import Sandbox

MAX_FILE_BYTES = 5_000_000
JSON_PARAMS = ("blocks", "view", "files", "attachments")
Handler = Callable[[Workspace, dict[str, Any], str], dict[str, Any]]


async def read_params(request: Request) -> dict[str, Any]:
    """Slack accepts form bodies, JSON bodies and query strings; so does the sandbox."""
    raw = await request.body()
    params: dict[str, Any] = dict(request.query_params)
    if raw:
        if "json" in request.headers.get("content-type", ""):
            try:
                body = json.loads(raw)
            except ValueError:
                raise SlackError("invalid_json") from None
            if not isinstance(body, dict):
                raise SlackError("invalid_json")
            params.update(body)
        else:
            params.update(parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True))
    for key in JSON_PARAMS:
        if isinstance(params.get(key), str):
            try:
                params[key] = json.loads(params[key])
            except ValueError:
                raise SlackError("invalid_arguments") from None
    return params


# ---------------------------------------------------------------- methods (lock held)


def auth_test(ws: Workspace, params: dict[str, Any], base: str) -> dict[str, Any]:
    return {
        "url": base,
        "team": "Demo Store",
        "user": "refunddesk",
        "team_id": "T0DEMO",
        "user_id": "U0BOT",
        "bot_id": "B0BOT",
    }


def post_message(ws: Workspace, params: dict[str, Any], base: str) -> dict[str, Any]:
    channel = ws.resolve_channel(params.get("channel"))
    checks.check_message(params)
    thread_ts = params.get("thread_ts") or None
    if thread_ts is not None and ws.find(channel.id, str(thread_ts)) is None:
        raise SlackError("thread_not_found")
    message = Message(
        channel.id,
        ws.new_ts(),
        str(params.get("text") or ""),
        list(params.get("blocks") or []),
        str(thread_ts) if thread_ts else None,
    )
    ws.add_message(message)
    return {"channel": channel.id, "ts": message.ts, "message": message.to_json()}


def update_message(ws: Workspace, params: dict[str, Any], base: str) -> dict[str, Any]:
    channel = ws.resolve_channel(params.get("channel"))
    message = ws.find(channel.id, str(params.get("ts") or ""))
    if message is None:
        raise SlackError("message_not_found")
    if "blocks" in params or params.get("text"):
        checks.check_message({"text": params.get("text") or message.text, **params})
    if params.get("text") is not None:
        message.text = str(params["text"])
    if params.get("blocks") is not None:
        message.blocks = list(params["blocks"])
    message.edited = True
    ws.changed()
    return {"channel": channel.id, "ts": message.ts, "text": message.text}


def post_ephemeral(ws: Workspace, params: dict[str, Any], base: str) -> dict[str, Any]:
    channel = ws.resolve_channel(params.get("channel"))
    user = str(params.get("user") or "")
    if user not in ws.users:
        raise SlackError("user_not_found")
    if channel.is_dm and channel.id != "D" + user[1:]:
        raise SlackError("user_not_in_channel")
    checks.check_message(params)
    ts = ws.new_ts()
    ws.add_ephemeral(
        user,
        Message(channel.id, ts, str(params.get("text") or ""), list(params.get("blocks") or [])),
    )
    return {"message_ts": ts}


def views_open(ws: Workspace, params: dict[str, Any], base: str) -> dict[str, Any]:
    view = checks.check_view(params.get("view"), kind="modal")
    user = ws.take_trigger(params.get("trigger_id"))
    modal = Modal(ws.new_id("V"), user, view)
    ws.modals[user] = modal
    ws.changed()
    return {"view": {"id": modal.id, **view, "state": {"values": {}}}}


def views_update(ws: Workspace, params: dict[str, Any], base: str) -> dict[str, Any]:
    view = checks.check_view(params.get("view"), kind="modal")
    modal = next((m for m in ws.modals.values() if m.id == params.get("view_id")), None)
    if modal is None:
        raise SlackError("not_found")
    modal.view, modal.errors = view, {}
    ws.changed()
    return {"view": {"id": modal.id, **view}}


def views_publish(ws: Workspace, params: dict[str, Any], base: str) -> dict[str, Any]:
    user = str(params.get("user_id") or "")
    if user not in ws.users:
        raise SlackError("user_not_found")
    view = checks.check_view(params.get("view"), kind="home")
    ws.homes[user] = view
    ws.changed()
    return {"view": {"id": f"VH{user}", **view}}


def conversations_open(ws: Workspace, params: dict[str, Any], base: str) -> dict[str, Any]:
    users = [u for u in str(params.get("users") or "").split(",") if u]
    if len(users) != 1:
        raise SlackError("users_list_not_supplied" if not users else "not_supported")
    channel = ws.dm_with(users[0])
    return {"channel": {"id": channel.id, "is_im": True, "user": users[0]}}


def users_info(ws: Workspace, params: dict[str, Any], base: str) -> dict[str, Any]:
    user = ws.users.get(str(params.get("user") or ""))
    if user is None:
        raise SlackError("user_not_found")
    return {
        "user": {
            "id": user.id,
            "name": user.id.lower(),
            "real_name": user.name,
            "profile": {"real_name": user.name, "title": user.role},
            "is_bot": False,
        }
    }


def files_upload_url(ws: Workspace, params: dict[str, Any], base: str) -> dict[str, Any]:
    name, length = params.get("filename"), str(params.get("length", ""))
    if not name or not length.isdigit():
        raise SlackError("invalid_arguments")
    if int(length) > MAX_FILE_BYTES:
        raise SlackError("file_too_large")
    file_id = ws.new_id("F")
    ws.files[file_id] = {"name": str(name), "length": int(length), "content": b"", "shares": []}
    return {"upload_url": f"{base}sandbox/slack/upload/{file_id}", "file_id": file_id}


def files_complete(ws: Workspace, params: dict[str, Any], base: str) -> dict[str, Any]:
    items = params.get("files")
    if not isinstance(items, list) or not items:
        raise SlackError("invalid_arguments")
    channel = ws.resolve_channel(params["channel_id"]) if params.get("channel_id") else None
    out = []
    for item in items:
        file = ws.files.get(str(item.get("id")))
        if file is None or not file.get("uploaded"):
            raise SlackError("file_not_found")
        file["title"] = item.get("title") or file["name"]
        out.append({"id": item["id"], "title": file["title"], "name": file["name"]})
    if channel is not None:
        names = ", ".join(f"{f['title']}" for f in out)
        comment = str(params.get("initial_comment") or "")
        text = f"{comment}\n:page_facing_up: {names}".strip()
        thread_ts = params.get("thread_ts") or None
        message = Message(channel.id, ws.new_ts(), text, [], str(thread_ts) if thread_ts else None)
        ws.add_message(message)
        for f in out:
            ws.files[f["id"]]["shares"].append(channel.id)
    return {"files": out}


def files_info(ws: Workspace, params: dict[str, Any], base: str) -> dict[str, Any]:
    file_id = str(params.get("file") or "")
    file = ws.files.get(file_id)
    if file is None:
        raise SlackError("file_not_found")
    return {
        "file": {
            "id": file_id,
            "name": file["name"],
            "title": file.get("title") or file["name"],
            "size": len(file["content"]),
            "url_private": f"{base}sandbox/slack/files/{file_id}/{file['name']}",
        }
    }


METHODS: dict[str, Handler] = {
    "auth.test": auth_test,
    "chat.postMessage": post_message,
    "chat.update": update_message,
    "chat.postEphemeral": post_ephemeral,
    "views.open": views_open,
    "views.update": views_update,
    "views.publish": views_publish,
    "conversations.open": conversations_open,
    "users.info": users_info,
    "files.getUploadURLExternal": files_upload_url,
    "files.completeUploadExternal": files_complete,
    "files.info": files_info,
}


def _token(request: Request, params: dict[str, Any]) -> str:
    header = request.headers.get("authorization", "")
    return header.removeprefix("Bearer ").strip() or str(params.get("token") or "")


def router(sandbox: Sandbox) -> APIRouter:
    ws = sandbox.workspace
    api = APIRouter(prefix="/sandbox/slack")

    @api.api_route("/api/{method}", methods=["GET", "POST"])
    async def web_api(method: str, request: Request) -> JSONResponse:
        try:
            params = await read_params(request)
        except SlackError as exc:
            return JSONResponse({"ok": False, "error": exc.code})
        token = _token(request, params)
        if token != sandbox.bot_token:
            return JSONResponse({"ok": False, "error": "invalid_auth" if token else "not_authed"})
        handler = METHODS.get(method)
        if handler is None:
            return JSONResponse({"ok": False, "error": "unknown_method"})
        try:
            with ws.lock:
                answer = handler(ws, params, str(request.base_url))
        except checks.InvalidBlocks as exc:
            return JSONResponse({"ok": False, "error": exc.code, "errors": [exc.why]})
        except SlackError as exc:
            return JSONResponse({"ok": False, "error": exc.code})
        return JSONResponse({"ok": True, **answer})

    @api.post("/upload/{file_id}")
    async def upload(file_id: str, request: Request) -> Response:
        data = await request.body()
        with ws.lock:
            file = ws.files.get(file_id)
            if file is None or file.get("uploaded"):
                return Response("unknown upload url", status_code=404)
            if len(data) != file["length"]:
                return Response("length does not match", status_code=400)
            file.update(content=data, uploaded=True)
        return Response(f"OK - {len(data)}")

    @api.get("/files/{file_id}/{name}")
    async def download(file_id: str, name: str, request: Request) -> Response:
        if _token(request, {}) != sandbox.bot_token:
            return Response("not authorized", status_code=403)
        with ws.lock:
            file = ws.files.get(file_id)
        if file is None:
            return Response("no such file", status_code=404)
        return Response(file["content"], media_type="application/octet-stream")

    @api.post("/respond/{key}")
    async def respond(key: str, request: Request) -> JSONResponse:
        """A `response_url`: Bolt's respond() lands here as an ephemeral message."""
        target = sandbox.response_urls.get(key)
        if target is None:
            return JSONResponse({"ok": False, "error": "expired_url"}, status_code=404)
        try:
            params = await read_params(request)
        except SlackError as exc:
            return JSONResponse({"ok": False, "error": exc.code}, status_code=400)
        user, channel = target
        with ws.lock:
            ws.add_ephemeral(
                user,
                Message(
                    channel, ws.new_ts(), str(params.get("text") or ""), params.get("blocks") or []
                ),
            )
        return JSONResponse({"ok": True})

    return api
