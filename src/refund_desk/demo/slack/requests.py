"""What Slack sends to `/slack/events`, built and signed like Slack does, posted in-process.

The payloads follow Slack's shapes (block_actions, view_submission, slash commands,
event_callback); the signature is v0 HMAC-SHA256 of `v0:{timestamp}:{body}` with the signing
secret, so the app verifies them exactly as it verifies Slack.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import httpx

from refund_desk.demo.slack.state import Message, Modal

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from refund_desk.demo.slack.emulator import SlackEmulator

TEAM = {"id": "T0DEMO", "domain": "demo-store"}
APP_ID = "A0REFUNDDESK"
ACK_SECONDS = 3.0  # Slack shows an error when the app answers later than this


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]
    seconds: float

    @property
    def late(self) -> bool:
        return self.seconds > ACK_SECONDS


def sign(secret: str, body: str, timestamp: int | None = None) -> dict[str, str]:
    ts = str(timestamp if timestamp is not None else int(time.time()))
    digest = hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


async def deliver(app: ASGIApp, secret: str, body: str, content_type: str) -> Answer:
    """Post a signed request to the app, in-process, and read its acknowledgement."""
    headers = {**sign(secret, body), "Content-Type": content_type}
    transport = httpx.ASGITransport(app=app)
    start = time.monotonic()
    async with httpx.AsyncClient(transport=transport, base_url="http://sandbox") as client:
        response = await asyncio.wait_for(
            client.post("/slack/events", content=body, headers=headers), timeout=30
        )
    seconds = time.monotonic() - start
    try:
        data = response.json() if response.content else {}
    except ValueError:
        data = {"text": response.text}
    return Answer(response.status_code, data if isinstance(data, dict) else {}, seconds)


def _form(sandbox: SlackEmulator, kind: str, user: str, **payload: Any) -> tuple[str, str]:
    """An interaction's payload, with what every interaction carries."""
    payload = {
        "type": kind,
        "team": TEAM,
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": TEAM["id"]},
        "api_app_id": APP_ID,
        "token": "sandbox-verification-token",
        "trigger_id": sandbox.workspace.issue_trigger(user),
        **payload,
    }
    return urlencode({"payload": json.dumps(payload)}), "application/x-www-form-urlencoded"


def block_actions(
    sandbox: SlackEmulator, base: str, user: str, message: Message, action: dict[str, Any]
) -> tuple[str, str]:
    channel = sandbox.workspace.channels[message.channel]
    return _form(
        sandbox,
        "block_actions",
        user,
        container={
            "type": "message",
            "message_ts": message.ts,
            "channel_id": message.channel,
            "is_ephemeral": False,
        },
        channel={"id": channel.id, "name": channel.name},
        message={
            "type": "message",
            "ts": message.ts,
            "text": message.text,
            "blocks": message.blocks,
            **({"thread_ts": message.thread_ts} if message.thread_ts else {}),
        },
        response_url=sandbox.response_url(base, user, message.channel, message.ts),
        actions=[{**action, "action_ts": f"{time.time():.6f}"}],
    )


def view_submission(
    sandbox: SlackEmulator, user: str, modal: Modal, values: dict[str, dict[str, Any]]
) -> tuple[str, str]:
    view = modal.view
    return _form(
        sandbox,
        "view_submission",
        user,
        view={
            "id": modal.id,
            "team_id": TEAM["id"],
            "type": "modal",
            "callback_id": view.get("callback_id", ""),
            "private_metadata": view.get("private_metadata", ""),
            "title": view.get("title"),
            "blocks": view.get("blocks", []),
            "state": {"values": values},
            "hash": f"{int(time.time())}.{modal.id}",
            "app_id": APP_ID,
            "bot_id": "B0BOT",
        },
        response_urls=[],
    )


def slash_command(
    sandbox: SlackEmulator, base: str, user: str, channel: str, command: str, text: str
) -> tuple[str, str]:
    name = sandbox.workspace.channels[channel].name
    form = {
        "token": "sandbox-verification-token",
        "team_id": TEAM["id"],
        "team_domain": TEAM["domain"],
        "channel_id": channel,
        "channel_name": name,
        "user_id": user,
        "user_name": user.lower(),
        "command": command,
        "text": text,
        "api_app_id": APP_ID,
        "response_url": sandbox.response_url(base, user, channel),
        "trigger_id": sandbox.workspace.issue_trigger(user),
    }
    return urlencode(form), "application/x-www-form-urlencoded"


def app_home_opened(user: str) -> tuple[str, str]:
    now = time.time()
    payload = {
        "token": "sandbox-verification-token",
        "team_id": TEAM["id"],
        "api_app_id": APP_ID,
        "event": {
            "type": "app_home_opened",
            "user": user,
            "channel": "D" + user[1:],
            "tab": "home",
            "event_ts": f"{now:.6f}",
        },
        "type": "event_callback",
        "event_id": f"Ev{int(now * 1000)}",
        "event_time": int(now),
        "authorizations": [{"team_id": TEAM["id"], "user_id": "U0BOT", "is_bot": True}],
    }
    return json.dumps(payload), "application/json"
