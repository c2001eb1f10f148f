"""`refund-desk slack doctor` against the Slack emulator: a workspace that fails each check, and
one that passes them all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from refund_desk.demo.slack import Channel, SlackEmulator
from refund_desk.settings import load_settings
from tests.cli_helpers import run
from tests.helpers import ACME
from tests.slack_helpers import SIGNING_SECRET, TOKEN, emulator

pytestmark = pytest.mark.usefixtures("cli_db")
POLICY = ACME.read_text().replace(
    "managers: {members: [U0MGR1], limit: 10000}",
    "managers: {members: [U0MGR1], usergroup: S0MANAGERS, limit: 10000}",
)


@pytest.fixture()
def slack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[SlackEmulator]:
    with emulator() as served:
        monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
        monkeypatch.setenv("SLACK_SIGNING_SECRET", SIGNING_SECRET)
        monkeypatch.setenv("SLACK_API_URL", served.api_url)
        load_settings.cache_clear()
        policy = tmp_path / "policy.yaml"
        policy.write_text(POLICY)
        run("policy", "publish", str(policy))
        yield served
    load_settings.cache_clear()


def test_a_healthy_workspace_passes_every_check(slack: SlackEmulator) -> None:
    slack.workspace.usergroups["S0MANAGERS"] = ["U0MGR1"]
    output = run("slack", "doctor")
    assert not [line for line in output.splitlines() if line.startswith("FAIL")], output
    assert "all 7 checks passed" in output
    for line in ("token: works", "channel C0FINANCE", "channel C0POLICY", "user group S0MANAGERS"):
        assert line in output


def test_a_broken_workspace_fails_with_one_line_and_a_fix_per_problem(
    slack: SlackEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = slack.workspace
    ws.channels["C0FINANCE"].member = False
    ws.channels["C0POLICY"] = Channel("C0POLICY", "refund-policy", archived=True)
    del ws.channels["C0REFUNDS"]
    slack.scopes.remove("usergroups:read")
    output = run("slack", "doctor", code=1)
    fails = [line for line in output.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 5, output
    assert any("scopes: missing usergroups:read" in f and "reinstall" in f for f in fails)
    assert any("C0FINANCE" in f and "/invite @Refund Desk" in f for f in fails)
    assert any("C0POLICY" in f and "archived" in f for f in fails)
    assert any("C0REFUNDS" in f and "channel_not_found" in f for f in fails)
    assert any("S0MANAGERS" in f and "no_such_subteam" in f for f in fails)


def test_a_wrong_token_or_no_secret_fails(
    slack: SlackEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-revoked")
    monkeypatch.delenv("SLACK_SIGNING_SECRET")
    load_settings.cache_clear()
    output = run("slack", "doctor", code=1)
    assert "FAIL token: auth.test answered invalid_auth" in output
    assert "FAIL signing secret" in output and "SLACK_APP_TOKEN" in output
