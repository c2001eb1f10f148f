"""The Slack emulator: one workspace, its Web API, `response_url`s and signed requests to the app,
and Sign in with Slack (OpenID Connect, `oidc.py`) for the desk on the web.

The demo mounts its routers into the app (`router()`); tests serve its Web API alone on loopback
(`start()`) and read what the app did with the query helpers. `rate_limits["chat.postMessage"]
= 2`: the next two such calls answer 429 with `Retry-After`; `"chat.postMessage U0MGR1"` limits
only the calls to that channel.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, FastAPI

from refund_desk.bot.doctor import REQUIRED_SCOPES
from refund_desk.demo.slack.oidc import OpenIdProvider
from refund_desk.demo.slack.state import Channel, Message, User, Workspace
from refund_desk.demo.slack.web_api import ResponseUrl

# What an install from manifest.yml grants the bot token (Slack's `x-oauth-scopes` header):
# the scopes the app needs, exactly.
GRANTED_SCOPES = REQUIRED_SCOPES
MAX_RESPONSE_URLS = 200
MAX_CALLS = 5000
RESPONSE_URL_USES = 5  # Slack accepts five posts to one response_url ...
RESPONSE_URL_SECONDS = 30 * 60  # ... within thirty minutes


@dataclass
class SlackEmulator:
    workspace: Workspace
    bot_token: str
    signing_secret: str
    response_urls: OrderedDict[str, ResponseUrl] = field(default_factory=OrderedDict)
    calls: deque[tuple[str, dict[str, Any]]] = field(
        default_factory=lambda: deque(maxlen=MAX_CALLS)
    )
    rate_limits: dict[str, int] = field(default_factory=dict)  # method -> 429s still to answer
    retry_after: int = 1
    scopes: list[str] = field(default_factory=lambda: list(GRANTED_SCOPES))
    base_url: str | None = None  # set by start(): the root of the emulator served alone
    # The app registered for Sign in with Slack: client id and secret, its redirect URLs.
    oidc: OpenIdProvider = field(default_factory=OpenIdProvider)
    _server: Any = None
    _thread: threading.Thread | None = None

    @classmethod
    def create(
        cls,
        *,
        users: list[User],
        channels: list[Channel],
        usergroups: dict[str, list[str]] | None = None,
        bot_token: str | None = None,
        signing_secret: str | None = None,
    ) -> SlackEmulator:
        workspace = Workspace()
        workspace.users = {u.id: u for u in users}
        workspace.channels = {c.id: c for c in channels}
        workspace.usergroups = {k: list(v) for k, v in (usergroups or {}).items()}
        return cls(
            workspace=workspace,
            bot_token=bot_token or "xoxb-sandbox-" + secrets.token_hex(12),
            signing_secret=signing_secret or secrets.token_hex(20),
        )

    # ------------------------------------------------------------ serving

    def router(self) -> APIRouter:
        """The Web API, Sign in with Slack and the demo's page, mounted into the demo's app."""
        from refund_desk.demo.slack import oidc, page, web_api

        combined = APIRouter()
        combined.include_router(oidc.router(self))  # before the Web API's /api/{method}
        combined.include_router(web_api.router(self))
        combined.include_router(page.router(self))
        return combined

    def start(self) -> str:
        """Serve the Web API (and Sign in with Slack: `issuer`) alone on loopback; returns its
        URL for `SLACK_API_URL`."""
        import uvicorn

        from refund_desk.demo.slack import oidc, web_api

        app = FastAPI()
        app.include_router(oidc.router(self))
        app.include_router(web_api.router(self))
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the Slack emulator did not start")
            time.sleep(0.01)
        self.base_url = f"http://127.0.0.1:{port}/"
        return self.api_url

    def __enter__(self) -> SlackEmulator:
        """`with emulator as slack:` serves it on loopback for the block."""
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
            self._server = self._thread = None

    @property
    def api_url(self) -> str:
        assert self.base_url is not None, "start() the emulator first"
        return f"{self.base_url}sandbox/slack/api/"

    @property
    def issuer(self) -> str:
        """Where Sign in with Slack lives when served alone (the desk's `SLACK_OIDC_ISSUER`)."""
        assert self.base_url is not None, "start() the emulator first"
        return f"{self.base_url}sandbox/slack"

    def response_url(
        self, base: str, user: str, channel: str, message_ts: str | None = None
    ) -> str:
        """A response_url for an interaction by `user` in `channel` (on `message_ts`)."""
        key = secrets.token_urlsafe(12)
        expires = time.monotonic() + RESPONSE_URL_SECONDS
        with self.workspace.lock:
            self.response_urls[key] = ResponseUrl(
                user, channel, message_ts, RESPONSE_URL_USES, expires
            )
            while len(self.response_urls) > MAX_RESPONSE_URLS:
                self.response_urls.popitem(last=False)
        return f"{base}sandbox/slack/respond/{key}"

    # ------------------------------------------------------------ what the app did

    def methods(self) -> list[str]:
        return [method for method, _ in self.calls]

    @property
    def messages(self) -> list[Message]:
        return self.workspace.messages

    def in_channel(self, channel: str) -> list[Message]:
        """The messages in `channel` outside threads, oldest first."""
        return [m for m in self.messages if m.channel == channel and m.thread_ts is None]

    def thread(self, parent: Message) -> list[Message]:
        return [
            m for m in self.messages if m.channel == parent.channel and m.thread_ts == parent.ts
        ]

    @staticmethod
    def buttons(message: Message) -> dict[str, str]:
        """action_id -> value of every button on a message."""
        out: dict[str, str] = {}
        for block in message.blocks:
            for element in block.get("elements", []) if block.get("type") == "actions" else []:
                out[element["action_id"]] = element.get("value", "")
        return out

    @property
    def ephemeral(self) -> list[Message]:
        """Every ephemeral message (its recipient in `to`), oldest first."""
        with self.workspace.lock:
            shown = [m for ms in self.workspace.ephemerals.values() for m in ms]
        return sorted(shown, key=lambda m: m.ts)

    @property
    def views(self) -> list[dict[str, Any]]:
        """Every modal opened with views.open, oldest first."""
        return self.workspace.opened

    @property
    def home(self) -> dict[str, dict[str, Any]]:
        """user -> the App Home view last published for them."""
        return self.workspace.homes

    # ------------------------------------------------------------ files

    def add_file(self, name: str, content: str) -> str:
        """A file a person uploaded (e.g. into a modal's file input); returns its id."""
        data = content.encode()
        with self.workspace.lock:
            file_id = self.workspace.new_id("F")
            self.workspace.files[file_id] = {
                "name": name,
                "length": len(data),
                "content": data,
                "uploaded": True,
                "shares": [],
            }
        return file_id

    def uploads(self, channel: str) -> list[dict[str, Any]]:
        """Files the app shared into `channel` (content decoded)."""
        with self.workspace.lock:
            files = list(self.workspace.files.values())
        return [{**f, "content": f["content"].decode()} for f in files if channel in f["shares"]]
