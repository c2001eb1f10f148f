"""Slack's directory for the policy's user groups: `usergroups.users.list` (scope
`usergroups:read`), read at most 60 seconds before it is relied on.

`refresh()` is the only method that calls Slack; listeners and jobs call it before their
transaction (a click always sees membership at most a minute old, so someone removed from a
group can no longer approve open cases). `members()` answers from what was read, never older
than `MAX_AGE`, and says `DirectoryUnavailable` otherwise: a group nobody could read counts as
nobody.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from sqlalchemy import select, union
from sqlmodel import col

from refund_desk import clock
from refund_desk.bot.blocks.cards import DECIDABLE
from refund_desk.cases.people import DirectoryUnavailable
from refund_desk.governance.versions import load_version
from refund_desk.policy.schema import usergroups
from refund_desk.storage.db import Database
from refund_desk.storage.models import Case, Control

log = logging.getLogger(__name__)
MAX_AGE = timedelta(seconds=60)  # a reading is relied on for at most this long
REFRESH_AFTER = timedelta(seconds=45)  # refresh before it gets that old


# The policy versions that decide who may click: the active one and those open cases keep.
# Read before every click, as one statement on a plain connection (built once).
_VERSIONS_IN_FORCE = union(
    select(col(Case.policy_version)).where(col(Case.status).in_(DECIDABLE)),
    select(col(Control.active_version)).where(col(Control.id) == 1),
)


@dataclass
class SlackDirectory:
    client: WebClient  # a short timeout: it runs before a listener acknowledges
    db: Database
    _read: dict[str, tuple[datetime, frozenset[str]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # The user groups each policy version names (a published version never changes).
    _groups_of: dict[int, frozenset[str]] = field(default_factory=dict)

    def members(self, usergroup: str) -> frozenset[str]:
        with self._lock:
            reading = self._read.get(usergroup)
        if reading is None or clock.now() - reading[0] > MAX_AGE:
            raise DirectoryUnavailable(usergroup)
        return reading[1]

    def refresh(self, groups: Iterable[str] | None = None) -> None:
        """Read the groups (default: every group the active policy or an open case's policy
        names) whose reading is older than `REFRESH_AFTER`. Never inside a transaction."""
        wanted = set(groups) if groups is not None else self.named()
        now = clock.now()
        for group in sorted(wanted):
            with self._lock:
                reading = self._read.get(group)
            if reading is not None and now - reading[0] < REFRESH_AFTER:
                continue
            try:
                response = self.client.api_call(
                    "usergroups.users.list", http_verb="GET", params={"usergroup": group}
                )
            except (SlackApiError, OSError) as exc:
                log.warning("could not read Slack user group %s: %s", group, exc)
                continue
            users = frozenset(str(u) for u in response.get("users") or [])
            with self._lock:
                self._read[group] = (now, users)

    def named(self) -> set[str]:
        """The user groups of the active policy and of every version an open case keeps: one
        look for the versions; a version's groups are read once (versions never change)."""
        with self.db.look() as connection:
            versions = {v for v in connection.scalars(_VERSIONS_IN_FORCE) if v is not None}
        unknown = versions - self._groups_of.keys()
        if unknown:
            with self.db.read() as session:
                for version in unknown:
                    groups = frozenset(usergroups(load_version(session, version).doc))
                    self._groups_of[version] = groups
        return {group for version in versions for group in self._groups_of[version]}

    def people(self, ids: Iterable[str]) -> list[str]:
        """User ids for a list of people and user groups (a group: its members now)."""
        out: list[str] = []
        for item in ids:
            if item.startswith("S"):
                self.refresh([item])
                try:
                    out += sorted(self.members(item) - set(out))
                except DirectoryUnavailable:
                    continue
            elif item not in out:
                out.append(item)
        return out
