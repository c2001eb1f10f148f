"""Backups that restore to a verifiable record.

SQLite: SQLite's online backup, page by page while the server keeps running, into a new file
(restore: stop the server and put the file in place). PostgreSQL: `pg_dump --format=custom`
(restore: `pg_restore --no-owner -d NEWDB FILE`). Either way the answer names the audit head
at the time of the backup: `audit verify --anchor HASH` on the restored database proves it
is the same record.

The deployment secret is not in the backup and must be kept apart: without it the audit chain
cannot be verified and the personal fields cannot be read.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from refund_desk.storage.audit import head
from refund_desk.storage.db import Database

PAGES_PER_STEP = 1024  # SQLite copies this many pages, then lets writers in


class BackupError(Exception):
    """The backup could not be made; the message says why."""


@dataclass(frozen=True)
class BackupResult:
    path: Path
    records: int
    head_hash: str
    size: int


def backup(
    db: Database,
    url: str,
    target: Path,
    *,
    progress: Callable[[int, int], None] | None = None,
    overwrite: bool = False,
) -> BackupResult:
    """Write a consistent copy of the database to `target`; returns the audit head it holds."""
    if target.exists() and not overwrite:
        raise BackupError(f"{target} exists; choose a new file (a backup never overwrites)")
    target.parent.mkdir(parents=True, exist_ok=True)
    if db.is_sqlite:
        records, head_hash = _sqlite(url, target, progress)
    else:
        records, head_hash = _postgres(db, url, target)
    return BackupResult(target, records, head_hash, target.stat().st_size)


def _sqlite(url: str, target: Path, progress: Callable[[int, int], None] | None) -> tuple[int, str]:
    database = make_url(url).database
    if not database or database == ":memory:":
        raise BackupError("an in-memory database cannot be backed up")
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    source = sqlite3.connect(database)
    try:
        copy = sqlite3.connect(partial)
        try:

            def step(status: int, remaining: int, total: int) -> None:
                if progress is not None:
                    progress(total - remaining, total)

            source.backup(copy, pages=PAGES_PER_STEP, progress=step)
            copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
            row = copy.execute("SELECT seq, hash FROM audit_head WHERE id = 1").fetchone()
        finally:
            copy.close()
    except sqlite3.Error as exc:
        partial.unlink(missing_ok=True)
        raise BackupError(f"SQLite backup failed: {exc}") from exc
    finally:
        source.close()
    partial.rename(target)
    return (int(row[0]), str(row[1])) if row else (0, "0" * 64)


def libpq_url(url: str) -> str:
    """The SQLAlchemy URL as libpq (pg_dump, psql) reads it."""
    parsed = make_url(url).set(drivername="postgresql")
    return parsed.render_as_string(hide_password=False)


def _postgres(db: Database, url: str, target: Path) -> tuple[int, str]:
    pg_dump = shutil.which("pg_dump")
    if pg_dump is None:
        raise BackupError("pg_dump is not on PATH; install the PostgreSQL client tools")
    partial = target.with_name(target.name + ".partial")
    # The head first: the dump is a snapshot taken after it, so it holds at least this head;
    # the chain is append-only, so `audit verify --anchor` on the restore proves the prefix.
    with db.read() as session:
        records, head_hash = head(session)
    done = subprocess.run(
        [pg_dump, "--format=custom", "--no-owner", "--file", str(partial), libpq_url(url)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise BackupError(f"pg_dump failed: {done.stderr.strip()[:500]}")
    partial.rename(target)
    return records, head_hash
