"""Backup → restore into a fresh database → `audit verify` finds the same head hash, on
SQLite (online backup) and PostgreSQL (pg_dump / pg_restore)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from refund_desk.runtime import Runtime
from refund_desk.storage.audit import head, verify_chain
from refund_desk.storage.backup import BackupError, backup, libpq_url
from refund_desk.storage.db import Database
from tests.cli_helpers import run
from tests.conftest import PG_URL, TEST_SECRET
from tests.helpers import published


def _some_history(runtime: Runtime) -> str:
    desk = published(runtime)
    body = desk.post(desk.request(desk.payment("30.00"), "20.00")).json()
    assert body["status"] == "refunded"
    return str(body["id"])


@pytest.fixture()
def restored_pg() -> Iterator[str]:
    name = f"rd_restore_{os.getpid()}"
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _restore(kind: str, file: Path, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":  # stop the server, put the file in place
        target = tmp_path / "restored.db"
        shutil.copyfile(file, target)
        return f"sqlite:///{target}"
    url = str(request.getfixturevalue("restored_pg"))
    pg_restore = shutil.which("pg_restore")
    assert pg_restore is not None, "pg_restore is needed beside pg_dump"
    subprocess.run(
        [pg_restore, "--no-owner", "--exit-on-error", "-d", libpq_url(url), str(file)],
        check=True,
        capture_output=True,
    )
    return url


def test_backup_restores_to_the_same_verifiable_record(
    any_runtime: Runtime, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    case_id = _some_history(any_runtime)
    kind = "sqlite" if any_runtime.db.is_sqlite else "postgres"
    with any_runtime.db.read() as session:
        count, head_hash = head(session)
    assert count >= 6

    file = tmp_path / "refund-desk.backup"
    seen: list[tuple[int, int]] = []
    done = backup(
        any_runtime.db,
        any_runtime.settings.database_url,
        file,
        progress=lambda a, b: seen.append((a, b)),
    )
    assert (done.records, done.head_hash) == (count, head_hash)
    assert done.size == file.stat().st_size > 0
    if kind == "sqlite":
        assert seen and seen[-1][0] == seen[-1][1]
    with pytest.raises(BackupError, match="exists"):
        backup(any_runtime.db, any_runtime.settings.database_url, file)

    # The live database goes on after the backup; the restore holds the record up to it.
    _some_history(any_runtime)
    restored = Database.from_url(_restore(kind, file, tmp_path, request))
    try:
        with restored.read() as session:
            result = verify_chain(TEST_SECRET, session, anchor=head_hash)
            assert result.ok, result.problem
            assert (result.count, result.head_hash) == (count, head_hash)
            from refund_desk.storage.models import Case

            case = session.get(Case, case_id)
            assert case is not None and case.status == "refunded" and case.amount == 2000
    finally:
        restored.dispose()


def test_backup_command_prints_the_head_and_restores_on_sqlite(
    cli_db: Path, tmp_path: Path
) -> None:
    run("api-key", "create", "--name", "shop")
    verified = run("audit", "verify")
    file = tmp_path / "nightly.db"
    answer = json.loads(run("backup", str(file), "--json"))
    assert answer["audit_records"] == 1 and answer["head_hash"] in verified
    assert "exists" in run("backup", str(file), code=1)
    restored = tmp_path / "restored.db"
    shutil.copyfile(file, restored)
    engine = Database.from_url(f"sqlite:///{restored}")
    secret = (cli_db / "cli.db.secret").read_text().strip()
    with engine.read() as session:
        result = verify_chain(secret, session, anchor=answer["head_hash"])
    engine.dispose()
    assert result.ok and result.head_hash == answer["head_hash"]
