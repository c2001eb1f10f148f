"""Installing from the manifest: Slack checks the request URL before there is a bot token, and
the server checks the workspace against the policy (the doctor job) and tells the leads."""

from __future__ import annotations

import json
from collections.abc import Callable

from fastapi.testclient import TestClient

from refund_desk.bot.doctor import queue_doctor
from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.runtime import build
from refund_desk.storage.db import Database
from refund_desk.web.app import create_app
from tests.conftest import _raise_crash, make_settings
from tests.helpers import ACME
from tests.slack_helpers import SIGNING_SECRET, SlackHarness, sign


def _signed_json(payload: dict[str, object]) -> tuple[str, dict[str, str]]:
    body = json.dumps(payload)
    headers = sign(body)
    headers["Content-Type"] = "application/json"
    return body, headers


def test_the_request_url_is_verified_as_soon_as_the_signing_secret_is_set(
    sqlite_url: str,
) -> None:
    settings = make_settings(sqlite_url, SLACK_SIGNING_SECRET=SIGNING_SECRET)  # no token yet
    db = Database.from_url(sqlite_url)
    runtime = build(settings, db=db, processor=SandboxProcessor(db, crash=_raise_crash))
    try:
        client = TestClient(create_app(runtime, scheduler=False))
        body, headers = _signed_json({"type": "url_verification", "challenge": "c-123"})
        answer = client.post("/slack/events", content=body, headers=headers)
        assert answer.status_code == 200 and answer.json() == {"challenge": "c-123"}
        unsigned = client.post(
            "/slack/events", content=body, headers={"Content-Type": "application/json"}
        )
        assert unsigned.status_code == 401
        form = "command=%2Frefund&user_id=U0OPS1"
        said = client.post("/slack/events", content=form, headers=sign(form))
        assert said.status_code == 200 and "SLACK_BOT_TOKEN" in said.text
    finally:
        db.dispose()


def test_the_installed_app_answers_url_verification_too(
    sqlite_url: str, slack_desk: Callable[[str, str], SlackHarness]
) -> None:
    desk = slack_desk(sqlite_url, ACME.read_text())
    body, headers = _signed_json({"type": "url_verification", "challenge": "c-456"})
    answer = desk.post_slack(body, headers)
    assert answer.status_code == 200 and answer.json()["challenge"] == "c-456"


def test_the_doctor_job_tells_the_leads_what_to_fix(
    sqlite_url: str, slack_desk: Callable[[str, str], SlackHarness]
) -> None:
    desk = slack_desk(sqlite_url, ACME.read_text())
    desk.slack.workspace.channels["C0POLICY"].member = False
    desk.runtime.desk.jobs.run_now(queue_doctor(desk.surface, "publish"))
    [dm] = [m for m in desk.slack.messages if m.channel == "D0LEAD1"]
    assert "C0POLICY" in dm.text and "/invite @Refund Desk" in dm.text
    assert "C0FINANCE" not in dm.text  # only what fails
    desk.slack.workspace.channels["C0POLICY"].member = True
    desk.runtime.desk.jobs.run_now(queue_doctor(desk.surface, "publish"))
    assert len([m for m in desk.slack.messages if m.channel == "D0LEAD1"]) == 1
