"""Every command that lists or reports answers --json; closed choices are enums (completion)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from refund_desk.cli.common import progress
from tests.cli_helpers import run
from tests.helpers import ACME


def test_listing_and_reporting_commands_answer_json(cli_db: Path, tmp_path: Path) -> None:
    run("policy", "publish", str(ACME))
    verified = json.loads(run("audit", "verify", "--json"))
    assert verified["ok"] is True and verified["count"] == 1
    [version] = json.loads(run("policy", "history", "--json"))
    assert (version["version"], version["active"], version["policy"]) == (1, True, "acme-refunds")
    run("policy", "draft", str(ACME))
    [draft] = json.loads(run("policy", "drafts", "--json"))
    assert draft["valid"] is True and draft["published_version"] is None
    backtest = json.loads(run("policy", "backtest", "v1", "--days", "7", "--json"))
    assert backtest["label"] == "v1" and backtest["cases"] == 0
    assert json.loads(run("advisor", "stats", "--json")) == []
    reconciled = json.loads(run("reconcile", "--json"))
    assert reconciled["findings"] == [] and reconciled["refunds_seen"] == 0
    assert json.loads(run("api-key", "list", "--json")) == []
    [change] = json.loads(run("policy", "diff", "v1", str(_loosened(tmp_path)), "--json"))
    assert change["kind"] == "changed" and change["name"] == "damaged-small"


def test_advisor_eval_answers_json(tmp_path: Path) -> None:
    labelled = tmp_path / "set.jsonl"
    labelled.write_text(
        json.dumps(
            {
                "text": "The vase arrived broken",
                "reason": "damaged",
                "payment": None,
                "amount": None,
                "currency": None,
            }
        )
        + "\n"
    )
    report = json.loads(run("advisor", "eval", str(labelled), "--offline", "--json"))
    assert report["requests"] == 1 and set(report["accuracy"]) >= {"reason", "amount"}
    assert sum(report["confusion"]["damaged"].values()) == 1  # labelled -> advised -> count


def _loosened(tmp_path: Path) -> Path:
    new = tmp_path / "v2.yaml"
    new.write_text(ACME.read_text().replace("request.amount <= 50", "request.amount <= 60"))
    return new


def test_closed_choices_are_checked_and_listed(cli_db: Path) -> None:
    assert "approve-all" in run("policy", "mode", "--help")
    assert "Invalid value" in run("policy", "mode", "sometimes", code=2)
    run("policy", "publish", str(ACME))
    run("policy", "mode", "approve-all")
    assert "timeout-after-success" in run("sandbox", "fault", "--help")
    assert "sandbox fault: decline for 2 call(s)" in run(
        "sandbox", "fault", "decline", "--times", "2"
    )
    assert "--install-completion" in run("--help")


def test_progress_bars_draw_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Tty()
    monkeypatch.setattr(sys, "stderr", terminal)
    with progress("exporting cases") as advance:
        advance(5, 10)
    assert "exporting cases" in terminal.getvalue() and "5/10" in terminal.getvalue()
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    with progress("exporting cases") as advance:
        advance(5, 10)
    assert piped.getvalue() == ""
