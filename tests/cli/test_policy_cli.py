"""`refund-desk policy …`: the lifecycle from the admin's command line, on a real SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_helpers import run
from tests.helpers import ACME

pytestmark = pytest.mark.usefixtures("cli_db")


def write(tmp: Path, name: str, text: str) -> str:
    path = tmp / name
    path.write_text(text)
    return str(path)


def test_the_first_publish_runs_the_backtest_and_says_zero_cases_is_a_valid_run() -> None:
    out = run("policy", "publish", str(ACME))
    assert "0 cases" in out and "That is a valid run" in out
    assert "published acme-refunds v1" in out


def test_publish_refuses_a_failing_embedded_test(cli_db: Path) -> None:
    broken = ACME.read_text().replace(
        "expect: {outcome: approve, rule: damaged-small}", "expect: {outcome: deny}"
    )
    out = run("policy", "publish", write(cli_db, "broken.yaml", broken), code=1)
    assert "1 policy test(s) failed" in out


def test_backtest_diff_rollback_and_the_switches(cli_db: Path) -> None:
    run("policy", "publish", str(ACME))
    stricter = ACME.read_text().replace("request.amount <= 50 and", "request.amount <= 10 and")
    stricter = stricter.replace("{amount: 20, reason: damaged}", "{amount: 5, reason: damaged}")
    new = write(cli_db, "v2.yaml", stricter)
    report = cli_db / "report.csv"
    out = run("policy", "backtest", new, "--days", "7", "--csv", str(report))
    assert "Backtest of v2.yaml over the last 7 days" in out and "recorded for hash" in out
    assert report.read_text().startswith("case_id,created_at,amount")
    assert "Backtest of v1" in run("policy", "backtest", "v1")
    diff = run("policy", "diff", "v1", new)
    assert "refund themselves” (damaged-small): when request.amount <= 50 → 10\n" in diff
    assert "published acme-refunds v2" in run("policy", "publish", new)
    assert "rolled back to v1" in run("policy", "rollback", "v1")
    assert "• v3 (active): published by " in (said := run("policy", "history"))
    assert "(command line)" in said and ", rollback to v1 · hash " in said
    assert "no policy version v9" in run("policy", "rollback", "v9", code=1)
    assert "paused execution" in run("policy", "pause")
    assert "resumed execution (0 waiting refunds)" in run("policy", "resume")
    assert "set the mode to approve-all" in run("policy", "mode", "approve-all")
    assert "is not one of 'shadow'" in run("policy", "mode", "yolo", code=2)  # a closed choice
    assert "audit chain" not in run("audit", "verify")  # ok: every change on the record


def test_drafts_shadow_and_settings_from_the_command_line(cli_db: Path) -> None:
    run("policy", "publish", str(ACME))
    assert "Saved draft d1: valid" in run("policy", "draft", str(ACME))
    stricter = ACME.read_text().replace("limit: 500", "limit: 400")
    assert "Updated draft d1" in run(
        "policy", "draft", write(cli_db, "d.yaml", stricter), "--id", "1"
    )
    assert "d1" in run("policy", "drafts") and "valid" in run("policy", "drafts")
    assert "started a shadow run of d1" in run("policy", "shadow", "start", "d1")
    assert "d1" in run("policy", "shadow", "report")
    shown = json.loads(run("policy", "shadow", "report", "--json"))
    assert (shown["draft"], shown["cases"], shown["disagreements"]) == ("d1", 0, [])
    run("policy", "shadow", "stop")
    assert "No shadow run" in run("policy", "shadow", "report")
    assert json.loads(run("policy", "shadow", "report", "--json")) is None
    assert "shadow start DRAFT" in run("policy", "shadow", "start", code=1)
    assert "review sample to 5%" in run("policy", "review-rate", "5%")
    assert "not a share" in run("policy", "review-rate", "lots", code=1)
    assert "needs a second lead" in run("policy", "second-lead", "on")
    actions = run("audit", "export")
    for action in (
        "policy.draft_created",
        "policy.draft_updated",
        "policy.shadow_started",
        "policy.review_rate_set",
        "policy.setting_changed",
    ):
        assert action in actions


def test_publish_shows_what_the_new_version_loosens_and_records_its_proof(
    cli_db: Path, tmp_path: Path
) -> None:
    import json

    run("policy", "publish", str(ACME))
    looser = ACME.read_text().replace("request.amount <= 50 and", "request.amount <= 400 and")
    out = run("policy", "publish", write(tmp_path, "looser.yaml", looser))
    assert "Proved against v1: more permissive" in out and "published acme-refunds v2" in out
    exported = tmp_path / "audit.jsonl"
    run("audit", "export", "--output", str(exported))
    published = [
        json.loads(line)
        for line in exported.read_text().splitlines()
        if '"policy.published"' in line
    ]
    assert published[-1]["payload"]["proof"]["more_permissive"] is True
    assert "proof" not in published[0]["payload"]  # nothing to prove v1 against
