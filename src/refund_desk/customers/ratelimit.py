"""Fixed-window rate limits kept in the database, so every replica and restart counts alike.

Keys are keyed hashes (of an email, an IP), never the raw values. One upsert per attempt:
`INSERT … ON CONFLICT DO UPDATE SET count = count + 1 RETURNING count`, atomic on both
SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete
from sqlmodel import col

from refund_desk.storage.db import Database, upsert
from refund_desk.storage.models import RateLimit


def hit(db: Database, key: str, *, limit: int, window_seconds: int, now: datetime) -> bool:
    """Count one attempt for `key`; True while the window's count is within `limit`."""
    window = int(now.timestamp()) // window_seconds
    insert = upsert(db)
    count_col = col(RateLimit.count)
    stmt = (
        insert(RateLimit)
        .values(key=key[:100], window=window, count=1)
        .on_conflict_do_update(index_elements=["key", "window"], set_={"count": count_col + 1})
        .returning(count_col)
    )
    with db.write() as session:
        count = int(session.execute(stmt).scalar_one())
        if count == 1:  # first hit of a window: forget windows that are long over
            session.execute(
                delete(RateLimit).where(
                    col(RateLimit.key) == key[:100], col(RateLimit.window) < window - 1
                )
            )
    return count <= limit
