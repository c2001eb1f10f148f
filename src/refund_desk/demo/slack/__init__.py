"""A local Slack look-alike for `refund-desk demo`: the Web API the app calls, a web page that
shows the workspace, and signed requests to `/slack/events` for every click, as Slack sends them.

It is a development and demo tool, mounted only by the demo (never with real Slack credentials).
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass, field

from fastapi import APIRouter

from refund_desk.demo.slack.state import Channel, User, Workspace

MAX_RESPONSE_URLS = 200


@dataclass
class Sandbox:
    workspace: Workspace
    bot_token: str
    signing_secret: str
    response_urls: OrderedDict[str, tuple[str, str]] = field(default_factory=OrderedDict)

    @classmethod
    def create(cls, *, users: list[User], channels: list[Channel]) -> Sandbox:
        workspace = Workspace()
        workspace.users = {u.id: u for u in users}
        workspace.channels = {c.id: c for c in channels}
        return cls(
            workspace=workspace,
            bot_token="xoxb-sandbox-" + secrets.token_hex(12),
            signing_secret=secrets.token_hex(20),
        )

    def response_url(self, base: str, user: str, channel: str) -> str:
        """A response_url for an interaction, answered as an ephemeral to `user`."""
        key = secrets.token_urlsafe(12)
        self.response_urls[key] = (user, channel)
        while len(self.response_urls) > MAX_RESPONSE_URLS:
            self.response_urls.popitem(last=False)
        return f"{base}sandbox/slack/respond/{key}"

    def router(self) -> APIRouter:
        from refund_desk.demo.slack import page
        from refund_desk.demo.slack import web_api as api

        combined = APIRouter()
        combined.include_router(api.router(self))
        combined.include_router(page.router(self))
        return combined


__all__ = ["Channel", "Sandbox", "User", "Workspace"]
