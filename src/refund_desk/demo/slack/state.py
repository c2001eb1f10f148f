"""The emulator's in-memory workspace: users, user groups, channels (with the bot's membership),
messages and threads, ephemerals, modals and App Home views per user, uploaded files.

Everything is guarded by one lock and every method is quick (no I/O), so the Web API handlers
can call it from the event loop. `version` grows with each change; the page polls it.
"""

from __future__ import annotations

import itertools
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

TRIGGER_SECONDS = 3.0  # Slack's trigger_id expires three seconds after the interaction
MAX_MESSAGES = 2000  # the oldest messages go first: the demo must not grow without bound
MAX_EPHEMERALS = 50  # per user
MAX_VIEWS = 200  # the modals opened, newest last (a record for tests)


@dataclass
class User:
    id: str
    name: str
    role: str


@dataclass
class Channel:
    id: str
    name: str
    is_dm: bool = False
    member: bool = True  # the bot is in the channel (it must be invited to post there)
    archived: bool = False


@dataclass
class Message:
    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]] = field(default_factory=list)
    thread_ts: str | None = None
    updates: int = 0  # chat.update calls on this message
    user: str = "bot"
    to: str | None = None  # an ephemeral's recipient
    files: list[dict[str, Any]] = field(default_factory=list)  # shared files: id, name, title

    def to_json(self) -> dict[str, Any]:
        return {
            "channel": self.channel,
            "ts": self.ts,
            "text": self.text,
            "blocks": self.blocks,
            "thread_ts": self.thread_ts,
            "edited": self.updates > 0,
            "user": self.user,
            "files": self.files,
        }


@dataclass
class Modal:
    id: str
    user: str
    view: dict[str, Any]
    errors: dict[str, str] = field(default_factory=dict)


class SlackError(Exception):
    """What Slack answers with `ok: false`."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class Workspace:
    users: dict[str, User] = field(default_factory=dict)
    usergroups: dict[str, list[str]] = field(default_factory=dict)  # id -> member user ids
    channels: dict[str, Channel] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)
    ephemerals: dict[str, list[Message]] = field(default_factory=dict)
    modals: dict[str, Modal] = field(default_factory=dict)  # user -> the open modal
    homes: dict[str, dict[str, Any]] = field(default_factory=dict)
    opened: list[dict[str, Any]] = field(default_factory=list)  # views.open, in order
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    triggers: dict[str, tuple[str, float]] = field(default_factory=dict)  # -> user, issued
    version: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    _seq: itertools.count = field(default_factory=lambda: itertools.count(1))
    _epoch: int = field(default_factory=lambda: int(time.time()))

    # ------------------------------------------------------------ helpers (lock held)

    def changed(self) -> None:
        self.version += 1

    def new_ts(self) -> str:
        """Like Slack's: the message's time in seconds, then a part that keeps it unique."""
        return f"{max(int(time.time()), self._epoch)}.{next(self._seq):06d}"

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._seq):06d}"

    def resolve_channel(self, channel: object) -> Channel:
        """A channel id, or a user id (a DM with the bot, as Slack allows)."""
        key = str(channel or "")
        if key.startswith("U") and key in self.users:
            return self.dm_with(key)
        if key.startswith("D") and "U" + key[1:] in self.users:
            return self.dm_with("U" + key[1:])
        found = self.channels.get(key)
        if found is None:
            raise SlackError("channel_not_found")
        return found

    def writable(self, channel: object) -> Channel:
        """A channel the bot may post in: Slack refuses one it is not in, or an archived one."""
        found = self.resolve_channel(channel)
        if not found.member:
            raise SlackError("not_in_channel")
        if found.archived:
            raise SlackError("is_archived")
        return found

    def dm_with(self, user: str) -> Channel:
        if user not in self.users:
            raise SlackError("user_not_found")
        dm_id = "D" + user[1:]
        if dm_id not in self.channels:
            self.channels[dm_id] = Channel(dm_id, self.users[user].name, is_dm=True)
        return self.channels[dm_id]

    def find(self, channel: str, ts: str) -> Message | None:
        return next((m for m in self.messages if m.channel == channel and m.ts == ts), None)

    def add_message(self, message: Message) -> None:
        self.messages.append(message)
        if len(self.messages) > MAX_MESSAGES:
            del self.messages[: len(self.messages) - MAX_MESSAGES]
        self.changed()

    def add_ephemeral(self, user: str, message: Message) -> None:
        message.to = user
        items = self.ephemerals.setdefault(user, [])
        items.append(message)
        del items[:-MAX_EPHEMERALS]
        self.changed()

    # ------------------------------------------------------------ interactions

    def issue_trigger(self, user: str) -> str:
        """A trigger_id for an interaction by `user`; views.open must use it within 3 s."""
        with self.lock:
            now = time.monotonic()
            self.triggers = {k: t for k, t in self.triggers.items() if now - t[1] < TRIGGER_SECONDS}
            trigger = f"{int(time.time())}.{secrets.token_hex(6)}"
            self.triggers[trigger] = (user, now)
            return trigger

    def take_trigger(self, trigger_id: object) -> str:
        """The user a trigger belongs to; each trigger opens at most one modal."""
        user, issued = self.triggers.pop(str(trigger_id or ""), ("", 0.0))
        if not user:
            raise SlackError("invalid_trigger_id")
        if time.monotonic() - issued > TRIGGER_SECONDS:
            raise SlackError("expired_trigger_id")
        return user

    def snapshot(self, user: str) -> dict[str, Any]:
        """What `user` sees: every channel they are in, their ephemerals, modal and home."""
        with self.lock:
            modal = self.modals.get(user)
            dm = "D" + user[1:]
            return {
                "version": self.version,
                "users": [u.__dict__ for u in self.users.values()],
                "channels": [
                    c.__dict__ for c in self.channels.values() if not c.is_dm or c.id == dm
                ],
                "messages": [
                    m.to_json()
                    for m in self.messages
                    if not m.channel.startswith("D") or m.channel == dm
                ],
                "ephemerals": [m.to_json() for m in self.ephemerals.get(user, [])],
                "modal": None
                if modal is None
                else {"id": modal.id, "view": modal.view, "errors": modal.errors},
                "home": self.homes.get(user),
            }
