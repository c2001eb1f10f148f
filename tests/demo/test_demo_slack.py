"""The demo's Slack emulator answers like Slack (and refuses what Slack refuses); the demo's
policy covers every tier; the demo never starts with real Slack credentials."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from refund_desk.bot.blocks import cards
from refund_desk.cases.approvals import Preview
from refund_desk.demo.runner import channels_from, policy_source, users_from
from refund_desk.demo.slack import SlackEmulator
from refund_desk.demo.slack.modals import REQUIRED, submission_values
from refund_desk.demo.slack.web_api import METHODS
from refund_desk.policy import parse_policy, run_policy_tests
from refund_desk.text import text
from tests.demo.demo_process import clean_env


@pytest.fixture()
def sandbox() -> SlackEmulator:
    doc = parse_policy(policy_source())
    return SlackEmulator.create(users=users_from(doc), channels=channels_from(doc))


@pytest.fixture()
def slack(sandbox: SlackEmulator) -> Any:
    app = FastAPI()
    app.include_router(sandbox.router())
    client = TestClient(app)

    def call(method: str, token: str | None = sandbox.bot_token, **params: Any) -> dict[str, Any]:
        """Sent as slack_sdk sends it: read methods and the upload steps as query or form
        arguments, the others as a JSON body."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        url = f"/sandbox/slack/api/{method}"
        spec = METHODS.get(method)
        if spec is None or spec.json_body:
            response = client.post(url, json=params, headers=headers)
        else:
            form = {k: v if isinstance(v, str) else json.dumps(v) for k, v in params.items()}
            response = client.post(url, data=form, headers=headers)
        assert response.status_code == 200
        return dict(response.json())

    call.client = client  # type: ignore[attr-defined]
    return call


def section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def test_it_wants_the_bot_token_and_known_methods(slack: Any) -> None:
    assert slack("auth.test", token=None)["error"] == "not_authed"
    assert slack("auth.test", token="xoxb-someone-else")["error"] == "invalid_auth"
    assert slack("auth.test")["ok"] is True
    assert slack("chat.delete", channel="C0REFUNDS", ts="1.1")["error"] == "unknown_method"


def test_messages_keep_slacks_limits(slack: Any) -> None:
    assert slack("chat.postMessage", channel="C0NOPE", text="hi")["error"] == "channel_not_found"
    assert slack("chat.postMessage", channel="C0REFUNDS")["error"] == "no_text"
    many = [section("x")] * 51
    assert slack("chat.postMessage", channel="C0REFUNDS", blocks=many)["error"] == "invalid_blocks"
    long = [section("x" * 3001)]
    refused = slack("chat.postMessage", channel="C0REFUNDS", blocks=long)
    assert refused["error"] == "invalid_blocks" and "3000" in refused["errors"][0]
    header = [{"type": "header", "text": {"type": "plain_text", "text": "h" * 151}}]
    assert (
        slack("chat.postMessage", channel="C0REFUNDS", blocks=header)["error"] == "invalid_blocks"
    )
    assert slack("chat.update", channel="C0REFUNDS", ts="1.000001", text="x")["error"] == (
        "message_not_found"
    )


def test_a_thread_an_update_an_ephemeral_and_a_dm(slack: Any, sandbox: SlackEmulator) -> None:
    posted = slack("chat.postMessage", channel="C0REFUNDS", text="card", blocks=[section("a")])
    reply = slack("chat.postMessage", channel="C0REFUNDS", thread_ts=posted["ts"], text="reply")
    assert reply["ok"]
    assert slack("chat.update", channel="C0REFUNDS", ts=posted["ts"], text="new")["ok"]
    assert slack("chat.postEphemeral", channel="C0REFUNDS", user="U0NOBODY", text="x")["error"] == (
        "user_not_found"
    )
    assert slack("chat.postEphemeral", channel="C0REFUNDS", user="U0LEAD1", text="only you")["ok"]
    dm = slack("conversations.open", users="U0MGR1")["channel"]["id"]
    assert slack("chat.postMessage", channel=dm, text="escalated")["ok"]
    assert slack("users.info", user="U0NOBODY")["error"] == "user_not_found"
    assert slack("users.info", user="U0FIN1")["user"]["real_name"] == "Farah Nasser"

    lead, manager = sandbox.workspace.snapshot("U0LEAD1"), sandbox.workspace.snapshot("U0MGR1")
    texts = [(m["text"], m["edited"], m["thread_ts"]) for m in lead["messages"]]
    assert texts == [("new", True, None), ("reply", False, posted["ts"])]
    assert [m["text"] for m in lead["ephemerals"]] == ["only you"]
    assert manager["ephemerals"] == []
    assert [m["text"] for m in manager["messages"] if m["channel"] == dm] == ["escalated"]


def test_a_modal_needs_a_fresh_trigger_of_its_user(slack: Any, sandbox: SlackEmulator) -> None:
    seen = Preview("c1", "deny", text("Case c1"), text("You"), text("Denies it."), "USD")
    view = cards.deny_modal(seen, "token", "C0REFUNDS").to_dict()
    assert slack("views.open", trigger_id="1.abc", view=view)["error"] == "invalid_trigger_id"
    trigger = sandbox.workspace.issue_trigger("U0FIN1")
    opened = slack("views.open", trigger_id=trigger, view=view)
    assert opened["ok"] and sandbox.workspace.modals["U0FIN1"].view["callback_id"] == "deny_modal"
    assert slack("views.open", trigger_id=trigger, view=view)["error"] == "invalid_trigger_id"
    too_long = {**view, "title": {"type": "plain_text", "text": "t" * 25}}
    trigger = sandbox.workspace.issue_trigger("U0FIN1")
    assert slack("views.open", trigger_id=trigger, view=too_long)["error"] == "invalid_blocks"
    assert slack("views.publish", user_id="U0FIN1", view=view)["error"] == "invalid_arguments"
    home = {"type": "home", "blocks": [section("queue")]}
    assert slack("views.publish", user_id="U0FIN1", view=home)["ok"]


def test_the_file_upload_steps(slack: Any, sandbox: SlackEmulator) -> None:
    step = slack("files.getUploadURLExternal", filename="backtest.csv", length=5)
    path = step["upload_url"].split("://", 1)[1].split("/", 1)[1]
    assert slack.client.post(f"/{path}", content=b"a,b\n").status_code == 400  # wrong length
    assert slack.client.post(f"/{path}", content=b"a,b\n1").status_code == 200
    done = slack(
        "files.completeUploadExternal",
        files=[{"id": step["file_id"], "title": "Backtest"}],
        channel_id="C0POLICY",
    )
    assert done["files"][0]["title"] == "Backtest"
    info = slack("files.info", file=step["file_id"])["file"]
    url_path = "/" + info["url_private"].split("://", 1)[1].split("/", 1)[1]
    assert slack.client.get(url_path).status_code == 403
    auth = {"Authorization": f"Bearer {sandbox.bot_token}"}
    assert slack.client.get(url_path, headers=auth).content == b"a,b\n1"
    # the page opens a file shared in a channel from its message, as Slack's client does
    [shared] = [m for m in sandbox.in_channel("C0POLICY") if m.files]
    [file] = shared.to_json()["files"]
    assert (file["id"], file["name"]) == (step["file_id"], "backtest.csv")
    assert file["title"] == "Backtest"
    opened = slack.client.get(f"/sandbox/files/{file['id']}/backtest.csv")
    assert opened.status_code == 200 and opened.content == b"a,b\n1"
    assert opened.headers["content-type"].startswith("text/plain")
    assert slack.client.get(f"/sandbox/files/{file['id']}/other.csv").status_code == 404
    unshared = slack("files.getUploadURLExternal", filename="x.csv", length=1)["file_id"]
    assert slack.client.get(f"/sandbox/files/{unshared}/x.csv").status_code == 404


def test_a_submission_is_shaped_like_slacks_and_required_inputs_are_checked() -> None:
    view = cards.file_case_modal("C0REFUNDS").to_dict()
    values, missing = submission_values(view, {"payment": "py_1", "reason": "not-a-reason"})
    assert missing == {b: REQUIRED for b in ("email", "currency", "reason")}
    values, missing = submission_values(
        view, {"payment": "py_1", "email": "a@example.com", "currency": "USD", "reason": "damaged"}
    )
    assert missing == {}
    assert values["reason"]["value"]["selected_option"]["value"] == "damaged"
    assert cards.modal_values({"state": {"values": values}})["payment"] == "py_1"


def test_the_demo_policy_covers_every_tier_and_its_tests_pass() -> None:
    doc = parse_policy(policy_source())
    assert all(r.passed for r in run_policy_tests(doc))
    outcomes = {(r.outcome, r.tier) for r in doc.rules}
    assert any(r.outcome == "deny" for r in doc.rules)
    assert {("approve", 2), ("review", 3), ("review", 4)} <= outcomes
    assert any(g.channel for g in doc.approvers.values())
    roles = {u.id: u.role for u in users_from(doc)}
    assert "operator" in roles["U0OPS1"] and "lead" in roles["U0LEAD1"]
    assert "manager" in roles["U0MGR1"]


def test_the_demo_refuses_real_slack_credentials(tmp_path: Any) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "refund_desk", "demo", "--dir", str(tmp_path / "d")],
        env={**clean_env(), "SLACK_BOT_TOKEN": "xoxb-a-real-workspace"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "never runs against real Slack" in result.stderr


def test_an_unknown_slash_command_is_answered_like_slack(
    slack: Any, sandbox: SlackEmulator
) -> None:
    answer = slack.client.post(
        "/sandbox/act/command", json={"user": "U0OPS1", "channel": "C0REFUNDS", "text": "/nope x"}
    )
    assert answer.json()["ok"] is False
    seen = sandbox.workspace.snapshot("U0OPS1")["ephemerals"]
    assert [m["text"] for m in seen] == ["/nope is not a valid command."]
