"""API keys for integrators: made, listed, rotated and revoked here; only a hash is stored.

Creating, rotating and revoking a key are audit records (the key itself never is), so who
could send requests, and since when, is part of the record. A rotation makes a new key and
gives the old one a grace period (default 24 hours) during which both work; then the old
one stops by itself. When a key was last used is written at most once a minute.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, func, or_, select, update
from sqlmodel import Session, col

from refund_desk import clock
from refund_desk.cases.errors import InvalidRequest, NotFound
from refund_desk.storage.audit import Actor, AuditLog
from refund_desk.storage.db import Database
from refund_desk.storage.models import ApiKey

KEY_PREFIX = "rdk_"
# What a key may do: read cases and the policy, or also propose refunds (file requests). No
# key approves, denies or pays anything: that is the policy's or a person's.
SCOPES = ("read", "propose")
USE_RESOLUTION = timedelta(minutes=1)  # `last_used_at` is written at most this often


@dataclass(frozen=True)
class KeyInfo:
    name: str
    prefix: str  # the first characters of the key, to tell keys apart
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None = None
    expires_at: datetime | None = None  # a rotated key's end of grace
    scope: str = "propose"

    def state(self, now: datetime) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None:
            return "expired" if self.expires_at <= now else "rotating"
        return "active"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_api_key(db: Database, name: str, *, audit: AuditLog | None = None,
                   actor: Actor | None = None, scope: str = "propose") -> str:  # fmt: skip
    """Make a key, store only its hash, and return the key (shown once)."""
    name = name.strip()
    if not name or len(name) > 100:
        raise InvalidRequest("bad_name", "A key needs a name of 1 to 100 characters.")
    if scope not in SCOPES:
        raise InvalidRequest("bad_scope", f"A key's scope is one of {', '.join(SCOPES)}.")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    with db.write() as session:
        row = ApiKey(name=name, prefix=key[:10], key_hash=hash_key(key), created_at=clock.now())
        row.scope = scope
        session.add(row)
        if audit is not None and actor is not None:
            audit.append(session, action="api_key.created", actor=actor,
                         payload={"name": name, "prefix": key[:10], "scope": scope})  # fmt: skip
    return key


def list_api_keys(session: Session) -> list[KeyInfo]:
    rows = session.scalars(select(ApiKey).order_by(col(ApiKey.created_at), col(ApiKey.id))).all()
    return [
        KeyInfo(r.name, r.prefix, r.created_at, r.revoked_at, r.last_used_at, r.expires_at, r.scope)
        for r in rows
    ]


@dataclass(frozen=True)
class Presented:
    """The stored state of a key a request presented: what authenticating it needs."""

    id: int
    name: str
    revoked_at: datetime | None
    expires_at: datetime | None
    last_used_at: datetime | None
    scope: str = "propose"

    @property
    def may_propose(self) -> bool:
        return self.scope == "propose"


_KEYS = ApiKey.__table__  # type: ignore[attr-defined]
_PRESENTED = (  # built once: it runs for every API request
    select(
        _KEYS.c.id,
        _KEYS.c.name,
        _KEYS.c.revoked_at,
        _KEYS.c.expires_at,
        _KEYS.c.last_used_at,
        _KEYS.c.scope,
    ).where(_KEYS.c.key_hash == bindparam("key_hash"))
)


def presented(db: Database, key_hash: str) -> Presented | None:
    """The stored state of the key with this hash (`hash_key`), if it is one of ours (whether
    it is usable: `usable`)."""
    with db.look() as connection:
        row = connection.execute(_PRESENTED, {"key_hash": key_hash}).first()
    return None if row is None else Presented(*row)


def usable(row: ApiKey | Presented, now: datetime) -> bool:
    """Not revoked, and not past the grace period of a rotation."""
    return row.revoked_at is None and (row.expires_at is None or row.expires_at > now)


def mark_used(db: Database, row: Presented, now: datetime) -> None:
    """Record that the key was used; at most once a minute, so a busy key costs no writes."""
    if row.last_used_at is not None and now - row.last_used_at < USE_RESOLUTION:
        return
    with db.write() as session:
        session.execute(
            update(ApiKey)
            .where(
                col(ApiKey.id) == row.id,
                or_(
                    col(ApiKey.last_used_at).is_(None),
                    col(ApiKey.last_used_at) < now - USE_RESOLUTION,
                ),
            )
            .values(last_used_at=now)
        )


def rotate_api_key(db: Database, name: str, *, grace: timedelta, audit: AuditLog,
                   actor: Actor) -> str:  # fmt: skip
    """A new key named `name`; the live ones keep working for `grace`, then stop."""
    if grace < timedelta(0):
        raise InvalidRequest("bad_grace", "The grace period cannot be negative.")
    now = clock.now()
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    with db.write() as session:
        rows = [
            r
            for r in session.scalars(select(ApiKey).where(col(ApiKey.name) == name)).all()
            if usable(r, now)
        ]
        if not rows:
            if session.scalar(select(func.count()).where(col(ApiKey.name) == name)):
                raise InvalidRequest("no_live_key", f"No key named {name!r} is live to rotate.")
            raise NotFound("api_key_not_found", f"No API key is named {name!r}.")
        ends = now + grace
        for row in rows:
            row.expires_at = min(row.expires_at, ends) if row.expires_at else ends
            session.add(row)
        new = ApiKey(name=name, prefix=key[:10], key_hash=hash_key(key), created_at=now)
        new.scope = rows[-1].scope  # the new key may do what the one it replaces could
        session.add(new)
        audit.append(
            session,
            action="api_key.rotated",
            actor=actor,
            payload={
                "name": name,
                "prefix": key[:10],
                "previous": [r.prefix for r in rows],
                "grace_seconds": int(grace.total_seconds()),
                "previous_expire_at": ends.isoformat(),
            },
        )
    return key


def revoke_api_key(db: Database, name: str, *, audit: AuditLog, actor: Actor) -> int:
    """Revoke every live key with this name at once; returns how many were revoked."""
    with db.write() as session:
        rows = session.scalars(
            select(ApiKey).where(col(ApiKey.name) == name, col(ApiKey.revoked_at).is_(None))
        ).all()
        if not rows:
            known = session.scalar(select(func.count()).where(col(ApiKey.name) == name))
            if known:
                raise InvalidRequest("already_revoked", f"Every key named {name!r} is revoked.")
            raise NotFound("api_key_not_found", f"No API key is named {name!r}.")
        now = clock.now()
        for row in rows:
            row.revoked_at = now
            session.add(row)
        audit.append(session, action="api_key.revoked", actor=actor,
                     payload={"name": name, "prefixes": [r.prefix for r in rows]})  # fmt: skip
        return len(rows)
