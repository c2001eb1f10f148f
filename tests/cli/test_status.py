"""`refund-desk status`: the dependencies, every replica's last sweep, the job backlog by kind
and the oldest waiting case; exit 1 when something is down."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from refund_desk import clock
from refund_desk.cases.listing import EXPORT_FIELDS
from refund_desk.cli.main import app
from refund_desk.settings import load_settings
from refund_desk.storage.db import Database
from refund_desk.web import health
from tests.cli_helpers import run, runner


def test_status_reports_replicas_backlog_and_says_down_without_a_sweeping_replica(
    cli_db: Path,
) -> None:
    run("db", "upgrade")
    down = runner.invoke(app, ["status", "--json"])
    assert down.exit_code == 1, down.output
    report = json.loads(down.stdout)
    assert report["status"] == "down"
    assert report["checks"]["scheduler"] == {
        "status": "down",
        "error": "no replica has run",
        "detail": {"replicas": []},
    }
    assert {j["kind"] for j in report["jobs"]} == {"audit.anchor", "customer.retention"}

    db = Database.from_url(load_settings().database_url)
    now = clock.now()
    with db.write() as session:
        health.heartbeat(session, "host:1", started_at=now, swept_at=now, sweep_seconds=30,
                         error=None)  # fmt: skip
        health.heartbeat(session, "host:2", started_at=now - timedelta(hours=1),
                         swept_at=now - timedelta(minutes=10), sweep_seconds=30,
                         error="OperationalError: gone")  # fmt: skip
    db.dispose()
    report = json.loads(run("status", "--json"))
    assert report["status"] == "ok"
    replicas = {r["replica"]: r for r in report["checks"]["scheduler"]["detail"]["replicas"]}
    assert replicas["host:1"]["sweeping"] is True
    assert replicas["host:2"]["sweeping"] is False
    assert replicas["host:2"]["last_error"] == "OperationalError: gone"
    assert report["jobs"][0]["pending"] == 1 and report["jobs"][0]["due"] == 1
    assert report["waiting_cases"] == 0 and report["oldest_waiting_case"] is None
    text = run("status")
    assert text.startswith("refund-desk: ok")
    assert "audit.anchor" in text and "replica host:2" in text


def test_cases_export_writes_csv_and_jsonl(cli_db: Path, tmp_path: Path) -> None:
    empty = run("cases", "export", "--since", "30d")
    assert empty.splitlines() == [",".join(EXPORT_FIELDS)]
    assert run("cases", "export", "--since", "30d", "--format", "jsonl") == ""
    out = tmp_path / "cases.csv"
    run("cases", "export", "--since", "2026-01-01", "--until", "2099-01-01", "-o", str(out))
    assert out.read_text().startswith("case_id,")
    assert "neither a duration" in run("cases", "export", "--since", "yesterday", code=2)
    assert "Invalid value" in run("cases", "export", "--since", "1d", "--format", "xml", code=2)
