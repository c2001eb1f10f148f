"""The Web API look-alike at `<base>/sandbox/slack/api/{method}`: the methods the app calls, with
Slack's answers, errors and limits. `METHODS` says what Slack's own description says of each
(checked by the tests): read methods take query or form arguments only, and get none from a JSON
body, as with Slack. Handlers only touch the in-memory workspace under its lock, so they never
block the event loop (the app calls them from job threads and from listeners, in one process).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from refund_desk.demo.slack import checks, state
from refund_desk.demo.slack.state import Message, Modal, SlackError, Workspace

if TYPE_CHECKING:
    from refund_desk.demo.slack.emulator import SlackEmulator

MAX_FILE_BYTES = 5_000_000
JSON_PARAMS = ("blocks", "view", "files", "attachments")
Handler = Callable[[Workspace, dict[str, Any], str], dict[str, Any]]


async def read_params(request: Request, *, json_body: bool = True) -> dict[str, Any]:
    """The arguments from the query string and a form body, and a JSON body where the method
    takes one (Slack ignores a JSON body to a read method)."""
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
            if json_body:
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
    channel = ws.writable(params.get("channel"))
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
    channel = ws.writable(params.get("channel"))
    message = ws.find(channel.id, str(params.get("ts") or ""))
    if message is None:
        raise SlackError("message_not_found")
    if "blocks" in params or params.get("text"):
        checks.check_message({"text": params.get("text") or message.text, **params})
    if params.get("text") is not None:
        message.text = str(params["text"])
    if params.get("blocks") is not None:
        message.blocks = list(params["blocks"])
    message.updates += 1
    ws.changed()
    return {"channel": channel.id, "ts": message.ts, "text": message.text}


def permalink(ws: Workspace, params: dict[str, Any], base: str) -> dict[str, Any]:
    channel = ws.resolve_channel(params.get("channel"))
    ts = str(params.get("message_ts") or "")
    if ws.find(channel.id, ts) is None:
        raise SlackError("message_not_found")
    return {
        "channel": channel.id,
        "permalink": f"{base}archives/{channel.id}/p{ts.replace('.', '')}",
    }


def post_ephemeral(ws: Workspace, params: dict[str, Any], base: str) -> dict[str, Any]:
    channel = ws.writable(params.get("channel"))
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
    ws.opened.append(view)
    del ws.opened[: -state.MAX_VIEWS]
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


def conversations_info(ws: Workspace, params: dict[str, Any], base: str) -> dict[str, Any]:
    channel = ws.resolve_channel(params.get("channel"))
    return {
        "channel": {
            "id": channel.id,
            "name": channel.name,
            "is_channel": not channel.is_dm,
            "is_im": channel.is_dm,
            "is_member": channel.member,
            "is_archived": channel.archived,
        }
    }


def usergroup_members(ws: Workspace, params: dict[str, Any], base: str) -> dict[str, Any]:
    members = ws.usergroups.get(str(params.get("usergroup") or ""))
    if members is None:
        raise SlackError("no_such_subteam")
    return {"users": list(members)}


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
    channel = ws.writable(params["channel_id"]) if params.get("channel_id") else None
    out = []
    for item in items:
        file = ws.files.get(str(item.get("id")))
        if file is None or not file.get("uploaded"):
            raise SlackError("file_not_found")
        file["title"] = item.get("title") or file["name"]
        out.append({"id": item["id"], "title": file["title"], "name": file["name"]})
    if channel is not None:  # a message that carries the files, as Slack shares them
        text = ":page_facing_up: " + ", ".join(f["title"] for f in out)
        thread_ts = params.get("thread_ts") or None
        message = Message(channel.id, ws.new_ts(), text, [], str(thread_ts) if thread_ts else None)
        message.files = [dict(f) for f in out]
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


@dataclass(frozen=True)
class Method:
    """A Web API method as Slack describes it: which arguments it requires, and whether it
    takes a JSON body (write methods) or only query and form arguments (read methods, and the
    file upload steps, which `slack_sdk` sends as forms)."""

    run: Handler
    required: tuple[str, ...] = ()
    json_body: bool = True


METHODS: dict[str, Method] = {
    "auth.test": Method(auth_test),
    "chat.postMessage": Method(post_message, ("channel",)),
    "chat.update": Method(update_message, ("channel", "ts")),
    "chat.postEphemeral": Method(post_ephemeral, ("channel", "user")),
    "chat.getPermalink": Method(permalink, ("channel", "message_ts"), json_body=False),
    "views.open": Method(views_open, ("trigger_id", "view")),
    "views.update": Method(views_update, ("view",)),
    "views.publish": Method(views_publish, ("user_id", "view")),
    "conversations.open": Method(conversations_open),
    "conversations.info": Method(conversations_info, ("channel",), json_body=False),
    "users.info": Method(users_info, ("user",), json_body=False),
    "usergroups.users.list": Method(usergroup_members, ("usergroup",), json_body=False),
    "files.getUploadURLExternal": Method(files_upload_url, ("filename", "length"), False),
    "files.completeUploadExternal": Method(files_complete, ("files",), json_body=False),
    "files.info": Method(files_info, ("file",), json_body=False),
}


def _token(request: Request, params: dict[str, Any]) -> str:
    header = request.headers.get("authorization", "")
    return header.removeprefix("Bearer ").strip() or str(params.get("token") or "")


def call(emulator: SlackEmulator, method: str, params: dict[str, Any], base: str) -> JSONResponse:
    """One Web API call, recorded: a rate limit a test asked for, the token, the arguments."""
    emulator.calls.append((method, params))
    with emulator.workspace.lock:
        # "chat.postMessage" limits every such call; "chat.postMessage U0MGR1" one channel's.
        key = next(
            (
                k
                for k in (f"{method} {params.get('channel')}", method)
                if emulator.rate_limits.get(k, 0) > 0
            ),
            None,
        )
        if key is not None:
            emulator.rate_limits[key] -= 1
            return JSONResponse(
                {"ok": False, "error": "ratelimited"},
                status_code=429,
                headers={"Retry-After": str(emulator.retry_after)},
            )
    spec = METHODS.get(method)
    if spec is None:
        return JSONResponse({"ok": False, "error": "unknown_method"})
    if any(params.get(name) in (None, "") for name in spec.required):
        return JSONResponse({"ok": False, "error": "invalid_arguments"})
    try:
        with emulator.workspace.lock:
            answer = spec.run(emulator.workspace, params, base)
    except checks.InvalidBlocks as exc:
        return JSONResponse({"ok": False, "error": exc.code, "errors": [exc.why]})
    except SlackError as exc:
        return JSONResponse({"ok": False, "error": exc.code})
    # Slack says on every answer which scopes the token has.
    return JSONResponse(
        {"ok": True, **answer}, headers={"x-oauth-scopes": ",".join(emulator.scopes)}
    )


def router(emulator: SlackEmulator) -> APIRouter:
    ws = emulator.workspace
    api = APIRouter(prefix="/sandbox/slack")

    @api.api_route("/api/{method}", methods=["GET", "POST"])
    async def web_api(method: str, request: Request) -> JSONResponse:
        spec = METHODS.get(method)
        try:
            params = await read_params(request, json_body=spec is None or spec.json_body)
        except SlackError as exc:
            return JSONResponse({"ok": False, "error": exc.code})
        token = _token(request, params)
        if token != emulator.bot_token:
            return JSONResponse({"ok": False, "error": "invalid_auth" if token else "not_authed"})
        return call(emulator, method, params, str(request.base_url))

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
        if _token(request, {}) != emulator.bot_token:
            return Response("not authorized", status_code=403)
        with ws.lock:
            file = ws.files.get(file_id)
        if file is None:
            return Response("no such file", status_code=404)
        return Response(file["content"], media_type="application/octet-stream")

    @api.post("/respond/{key}")
    async def respond(key: str, request: Request) -> JSONResponse:
        """A `response_url`: an ephemeral to the person (the default), a message in the channel
        (`response_type: in_channel`), or the original message replaced."""
        try:
            params = await read_params(request)
        except SlackError as exc:
            return JSONResponse({"ok": False, "error": exc.code}, status_code=400)
        with ws.lock:
            target = emulator.response_urls.get(key)
            if target is None or target.uses <= 0 or time.monotonic() > target.expires:
                return JSONResponse({"ok": False, "error": "expired_url"}, status_code=404)
            target.uses -= 1
            try:
                respond_to(ws, target, params)
            except SlackError as exc:
                return JSONResponse({"ok": False, "error": exc.code}, status_code=400)
        return JSONResponse({"ok": True})

    return api


@dataclass
class ResponseUrl:
    """Where a `response_url` answers: Slack takes five posts to one within 30 minutes."""

    user: str
    channel: str
    message_ts: str | None
    uses: int
    expires: float


def respond_to(ws: Workspace, target: ResponseUrl, params: dict[str, Any]) -> None:
    original = ws.find(target.channel, target.message_ts) if target.message_ts else None
    checks.check_message(params)
    text, blocks = str(params.get("text") or ""), list(params.get("blocks") or [])
    if params.get("replace_original") in (True, "true"):
        if original is None:
            raise SlackError("message_not_found")
        original.text, original.blocks = text, blocks
        original.updates += 1
        ws.changed()
    elif params.get("response_type") == "in_channel":
        thread = params.get("thread_ts") or None
        ws.add_message(Message(target.channel, ws.new_ts(), text, blocks, thread))
    else:
        ws.add_ephemeral(target.user, Message(target.channel, ws.new_ts(), text, blocks))
