"""API keys for integrators: made, listed and revoked here; only a hash is ever stored.

Creating and revoking a key are audit records (the key itself never is), so who could send
requests, and since when, is part of the record.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlmodel import Session, col

from refund_desk import clock
from refund_desk.cases.errors import InvalidRequest, NotFound
from refund_desk.storage.audit import Actor, AuditLog
from refund_desk.storage.db import Database
from refund_desk.storage.models import ApiKey

KEY_PREFIX = "rdk_"


@dataclass(frozen=True)
class KeyInfo:
    name: str
    prefix: str  # the first characters of the key, to tell keys apart
    created_at: datetime
    revoked_at: datetime | None


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_api_key(db: Database, name: str, *, audit: AuditLog | None = None,
                   actor: Actor | None = None) -> str:  # fmt: skip
    """Make a key, store only its hash, and return the key (shown once)."""
    name = name.strip()
    if not name or len(name) > 100:
        raise InvalidRequest("bad_name", "A key needs a name of 1 to 100 characters.")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    with db.write() as session:
        session.add(
            ApiKey(name=name, prefix=key[:10], key_hash=hash_key(key), created_at=clock.now())
        )
        if audit is not None and actor is not None:
            audit.append(session, action="api_key.created", actor=actor,
                         payload={"name": name, "prefix": key[:10]})  # fmt: skip
    return key


def list_api_keys(session: Session) -> list[KeyInfo]:
    rows = session.scalars(select(ApiKey).order_by(col(ApiKey.created_at), col(ApiKey.id))).all()
    return [KeyInfo(r.name, r.prefix, r.created_at, r.revoked_at) for r in rows]


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
