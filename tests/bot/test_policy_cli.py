"""`refund-desk policy …`: the lifecycle from the admin's command line, on a real SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from refund_desk.bot.cli import app
from refund_desk.settings import load_settings
from tests.helpers import ACME

runner = CliRunner()


@pytest.fixture(autouse=True)
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.delenv("REFUND_DESK_SECRET", raising=False)
    load_settings.cache_clear()
    yield tmp_path
    load_settings.cache_clear()


def run(*args: str, code: int = 0) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, result.output
    return result.output


def write(tmp: Path, name: str, text: str) -> str:
    path = tmp / name
    path.write_text(text)
    return str(path)


def test_the_first_publish_runs_the_backtest_and_says_zero_cases_is_a_valid_run() -> None:
    out = run("policy", "publish", str(ACME))
    assert "0 cases" in out and "That is a valid run" in out
    assert "published acme-refunds v1" in out


def test_publish_refuses_a_failing_embedded_test(env: Path) -> None:
    broken = ACME.read_text().replace(
        "expect: {outcome: approve, rule: damaged-small}", "expect: {outcome: deny}"
    )
    out = run("policy", "publish", write(env, "broken.yaml", broken), code=1)
    assert "1 policy test(s) failed" in out


def test_backtest_diff_rollback_and_the_switches(env: Path) -> None:
    run("policy", "publish", str(ACME))
    stricter = ACME.read_text().replace("request.amount <= 50 and", "request.amount <= 10 and")
    stricter = stricter.replace("{amount: 20, reason: damaged}", "{amount: 5, reason: damaged}")
    new = write(env, "v2.yaml", stricter)
    report = env / "report.csv"
    out = run("policy", "backtest", new, "--days", "7", "--csv", str(report))
    assert "Backtest of v2.yaml over the last 7 days" in out and "recorded for hash" in out
    assert report.read_text().startswith("case_id,created_at,amount")
    assert "Backtest of v1" in run("policy", "backtest", "v1")
    assert "~ changed damaged-small: when:" in run("policy", "diff", "v1", new)
    assert "published acme-refunds v2" in run("policy", "publish", new)
    assert "rolled back to v1" in run("policy", "rollback", "v1")
    assert "(rollback to v1)" in run("policy", "history")
    assert "no policy version v9" in run("policy", "rollback", "v9", code=1)
    assert "paused execution" in run("policy", "pause")
    assert "resumed execution (0 waiting refunds)" in run("policy", "resume")
    assert "set the mode to approve-all" in run("policy", "mode", "approve-all")
    assert "Mode must be one of" in run("policy", "mode", "yolo", code=1)
    assert "audit chain" not in run("audit", "verify")  # ok: every change on the record
