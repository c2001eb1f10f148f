"""A fake Slack Web API on loopback: the methods the app uses, Slack's limits, and a record.

It rejects what Slack would (unknown methods, no token, over 50 blocks, section text over
3,000 characters, an unknown channel) and can answer 429 with Retry-After, so the outbox's
patience is tested against an HTTP server, not a mock.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

TOKEN = "xoxb-test-token"
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_MESSAGE_TEXT = 40_000


@dataclass
class Message:
    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    thread_ts: str | None = None
    user: str | None = None  # for ephemeral messages
    updates: int = 0


@dataclass
class FakeSlack:
    channels: set[str] = field(default_factory=lambda: {"C0REFUNDS", "C0FINANCE", "C0POLICY"})
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    ephemeral: list[Message] = field(default_factory=list)
    views: list[dict[str, Any]] = field(default_factory=list)
    home: dict[str, dict[str, Any]] = field(default_factory=dict)
    rate_limits: dict[str, int] = field(default_factory=dict)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> name, content, shares
    lock: threading.Lock = field(default_factory=threading.Lock)
    _ts: itertools.count = field(default_factory=lambda: itertools.count(1))  # type: ignore[type-arg]
    server: ThreadingHTTPServer | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # a file's url_private, read with the bot token
                status, data = fake.download(self.path, self.headers.get("Authorization", ""))
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if self.path.startswith("/upload/"):  # files_upload_v2's step 2: raw bytes
                    status, data = fake.upload(self.path, self.rfile.read(length))
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                raw = self.rfile.read(length).decode() if length else ""
                status, body, headers = fake.handle(
                    self.path,
                    self.headers.get("Content-Type", ""),
                    raw,
                    self.headers.get("Authorization", ""),
                )
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/"

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    # ------------------------------------------------------------ queries for tests

    def methods(self) -> list[str]:
        return [m for m, _ in self.calls]

    def in_channel(self, channel: str) -> list[Message]:
        return [m for m in self.messages if m.channel == channel and m.thread_ts is None]

    def thread(self, parent: Message) -> list[Message]:
        return [m for m in self.messages if m.thread_ts == parent.ts]

    @staticmethod
    def buttons(message: Message) -> dict[str, str]:
        """action_id -> value of every button on a message."""
        out: dict[str, str] = {}
        for block in message.blocks:
            for element in block.get("elements", []) if block.get("type") == "actions" else []:
                out[element["action_id"]] = element.get("value", "")
        return out

    # ------------------------------------------------------------ the API

    def handle(
        self, path: str, content_type: str, raw: str, authorization: str
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        path, _, query = path.partition("?")
        method = path.rsplit("/", 1)[-1]
        if "json" in content_type:
            params = json.loads(raw or "{}")
        else:
            params = {k: v[0] for k, v in parse_qs(raw).items()}
        params.update({k: v[0] for k, v in parse_qs(query).items()})
        for key in ("blocks", "view"):
            if isinstance(params.get(key), str):
                params[key] = json.loads(params[key])
        with self.lock:
            self.calls.append((method, params))
            if self.rate_limits.get(method, 0) > 0:
                self.rate_limits[method] -= 1
                return 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "1"}
        token = authorization.removeprefix("Bearer ").strip() or params.get("token", "")
        if token != TOKEN:
            return 200, {"ok": False, "error": "not_authed" if not token else "invalid_auth"}, {}
        handler = getattr(self, "api_" + method.replace(".", "_"), None)
        if handler is None:
            return 404, {"ok": False, "error": "unknown_method"}, {}
        try:
            with self.lock:
                return 200, {"ok": True, **handler(params)}, {}
        except SlackError as exc:
            return 200, {"ok": False, "error": exc.code}, {}

    def _check_message(self, params: dict[str, Any]) -> None:
        channel = params.get("channel")
        if not channel:
            raise SlackError("channel_not_found")
        if not str(channel).startswith(("C", "D", "U")) or (
            str(channel).startswith("C") and channel not in self.channels
        ):
            raise SlackError("channel_not_found")
        text = params.get("text") or ""
        if len(text) > MAX_MESSAGE_TEXT:
            raise SlackError("msg_too_long")
        self._check_blocks(params.get("blocks") or [])
        if not text and not params.get("blocks"):
            raise SlackError("no_text")

    @staticmethod
    def _check_blocks(blocks: list[dict[str, Any]]) -> None:
        if len(blocks) > MAX_BLOCKS:
            raise SlackError("invalid_blocks")
        for block in blocks:
            texts = [block.get("text"), *(block.get("fields") or [])]
            for text in texts:
                if isinstance(text, dict) and len(text.get("text", "")) > MAX_SECTION_TEXT:
                    raise SlackError("invalid_blocks")

    def _new_ts(self) -> str:
        return f"1700000000.{next(self._ts):06d}"

    def api_auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": "https://fake.slack.test/",
            "team": "Fake",
            "user": "refunddesk",
            "team_id": "T0FAKE",
            "user_id": "U0BOT",
            "bot_id": "B0BOT",
        }

    def api_chat_postMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        self._check_message(params)
        channel = str(params["channel"])
        if channel.startswith("U"):
            channel = "D" + channel[1:]
        message = Message(
            channel,
            self._new_ts(),
            params.get("text", ""),
            params.get("blocks") or [],
            params.get("thread_ts"),
        )
        self.messages.append(message)
        return {"channel": channel, "ts": message.ts}

    def api_chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        self._check_blocks(params.get("blocks") or [])
        for message in self.messages:
            if message.channel == params.get("channel") and message.ts == params.get("ts"):
                message.text = params.get("text", message.text)
                message.blocks = params.get("blocks") or []
                message.updates += 1
                return {"channel": message.channel, "ts": message.ts}
        raise SlackError("message_not_found")

    def api_chat_postEphemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        self._check_message(params)
        if not params.get("user"):
            raise SlackError("user_not_in_channel")
        self.ephemeral.append(
            Message(
                str(params["channel"]),
                self._new_ts(),
                params.get("text", ""),
                params.get("blocks") or [],
                user=str(params["user"]),
            )
        )
        return {"message_ts": self._new_ts()}

    def api_views_open(self, params: dict[str, Any]) -> dict[str, Any]:
        if not params.get("trigger_id"):
            raise SlackError("invalid_trigger_id")
        view = params.get("view") or {}
        self._check_blocks(view.get("blocks") or [])
        self.views.append(view)
        return {"view": {"id": f"V{len(self.views)}", **view}}

    def api_views_publish(self, params: dict[str, Any]) -> dict[str, Any]:
        view = params.get("view") or {}
        if view.get("type") != "home" or len(view.get("blocks") or []) > 100:
            raise SlackError("invalid_arguments")
        self.home[str(params.get("user_id"))] = view
        return {"view": view}

    def api_conversations_open(self, params: dict[str, Any]) -> dict[str, Any]:
        users = str(params.get("users") or "")
        if not users.startswith("U"):
            raise SlackError("user_not_found")
        return {"channel": {"id": "D" + users[1:]}}

    # ------------------------------------------------------------ files

    def _base(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def add_file(self, name: str, content: str) -> str:
        """A file a user uploaded (e.g. into a modal's file input); returns its id."""
        file_id = f"F{len(self.files) + 1:04d}"
        self.files[file_id] = {"name": name, "content": content.encode(), "shares": []}
        return file_id

    def uploads(self, channel: str) -> list[dict[str, Any]]:
        """Files the app shared into ``channel`` (content decoded)."""
        return [
            {**f, "content": f["content"].decode()}
            for f in self.files.values()
            if any(share["channel"] == channel for share in f["shares"])
        ]

    def download(self, path: str, authorization: str) -> tuple[int, bytes]:
        if authorization.removeprefix("Bearer ").strip() != TOKEN:
            return 403, b"not authorized"
        parts = path.split("/")
        file = self.files.get(parts[2]) if len(parts) > 2 and parts[1] == "files" else None
        return (200, file["content"]) if file else (404, b"no such file")

    def upload(self, path: str, data: bytes) -> tuple[int, bytes]:
        with self.lock:
            file = self.files.get(path.rsplit("/", 1)[-1])
            if file is None or file.get("uploaded"):
                return 404, b"unknown upload url"
            if len(data) != file["length"]:
                return 400, b"length does not match"
            file.update(content=data, uploaded=True)
        return 200, f"OK - {len(data)}".encode()

    def api_files_getUploadURLExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        if not params.get("filename") or not str(params.get("length", "")).isdigit():
            raise SlackError("invalid_arguments")
        file_id = f"F{len(self.files) + 1:04d}"
        self.files[file_id] = {
            "name": params["filename"],
            "length": int(params["length"]),
            "content": b"",
            "shares": [],
        }
        return {"upload_url": f"{self._base()}/upload/{file_id}", "file_id": file_id}

    def api_files_completeUploadExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        items = params.get("files")
        items = json.loads(items) if isinstance(items, str) else items
        channel = params.get("channel_id")
        if channel and channel not in self.channels:
            raise SlackError("channel_not_found")
        out = []
        for item in items or []:
            file = self.files.get(item.get("id"))
            if file is None or not file.get("uploaded"):
                raise SlackError("file_not_found")
            file["title"] = item.get("title")
            if channel:
                share = {"channel": channel, "thread_ts": params.get("thread_ts")}
                file["shares"].append({**share, "comment": params.get("initial_comment")})
            out.append({"id": item["id"], "title": item.get("title"), "name": file["name"]})
        return {"files": out}

    def api_files_info(self, params: dict[str, Any]) -> dict[str, Any]:
        file_id = str(params.get("file") or "")
        file = self.files.get(file_id)
        if file is None:
            raise SlackError("file_not_found")
        return {
            "file": {
                "id": file_id,
                "name": file["name"],
                "size": len(file["content"]),
                "url_private": f"{self._base()}/files/{file_id}/{file['name']}",
            }
        }

    def api_users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        user = str(params.get("user") or "")
        if not user.startswith("U"):
            raise SlackError("user_not_found")
        return {"user": {"id": user, "name": user.lower(), "real_name": f"User {user}"}}


class SlackError(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code
