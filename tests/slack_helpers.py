"""Drive the Slack surface the way Slack does: signed HTTP requests built from fixtures, and the
Slack emulator (the demo's, served on loopback) as the workspace the app talks to."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi.testclient import TestClient

from refund_desk.bot.app import Surface
from refund_desk.demo.slack import Channel, SlackEmulator, User
from refund_desk.demo.slack import requests as slack_requests
from refund_desk.runtime import Runtime
from refund_desk.web.app import create_app
from tests.helpers import Harness

FIXTURES = Path(__file__).parent / "bot" / "fixtures" / "slack"
TOKEN = "xoxb-test-token"
SIGNING_SECRET = "slack-signing-secret-for-tests"
# The test workspace: the acme policy's people, two who are in no group, and its channels.
PEOPLE = ("U0OPS1", "U0LEAD1", "U0LEAD2", "U0FIN1", "U0FIN2", "U0MGR1", "U0STRANGER", "U0NOBODY")
CHANNELS = {"C0REFUNDS": "refunds", "C0FINANCE": "finance-approvals", "C0POLICY": "refund-policy"}


def slack_specs() -> Path | None:
    """Slack's own descriptions of its platform (`shared/slack/`: the Web API's OpenAPI, the
    manifest schema), beside the project or in a folder above it; None where absent."""
    root = Path(__file__).resolve().parents[1]
    return next(
        (p / "shared" / "slack" for p in root.parents if (p / "shared/slack").is_dir()), None
    )


def fixture(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / name).read_text()))


def emulator() -> SlackEmulator:
    """The test workspace, with the bot in every channel (not yet served: call start())."""
    return SlackEmulator.create(
        users=[User(uid, uid, "") for uid in PEOPLE],
        channels=[Channel(cid, name) for cid, name in CHANNELS.items()],
        bot_token=TOKEN,
        signing_secret=SIGNING_SECRET,
    )


def sign(
    body: str, *, timestamp: int | None = None, secret: str = SIGNING_SECRET
) -> dict[str, str]:
    """Slack's request signature (the emulator's signer) on a form body."""
    headers = slack_requests.sign(secret, body, timestamp)
    return {**headers, "Content-Type": "application/x-www-form-urlencoded"}


class SlackHarness(Harness):
    def __init__(self, runtime: Runtime, slack: SlackEmulator) -> None:
        super().__init__(runtime)
        self.slack = slack
        self.client = TestClient(create_app(runtime, scheduler=False))
        surface = self.client.app.state.slack  # type: ignore[attr-defined]
        assert isinstance(surface, Surface)
        self.surface = surface

    # ------------------------------------------------------------ requests

    def post_slack(self, body: str, headers: dict[str, str] | None = None) -> Any:
        return self.client.post("/slack/events", content=body, headers=headers or sign(body))

    def interaction(self, payload: dict[str, Any], **sign_kw: Any) -> Any:
        body = urlencode({"payload": json.dumps(payload)})
        return self.post_slack(body, sign(body, **sign_kw))

    def _from_slack(self, user: str, channel: str, message_ts: str | None = None) -> dict[str, str]:
        """What Slack adds to an interaction: a fresh trigger_id and a response_url."""
        base = self.slack.base_url or "http://slack.invalid/"
        return {
            "trigger_id": self.slack.workspace.issue_trigger(user),
            "response_url": self.slack.response_url(base, user, channel, message_ts),
        }

    def click(
        self, user: str, action: str, value: str, channel: str = "C0FINANCE", **sign_kw: Any
    ) -> Any:
        payload = fixture("block_actions.json")
        payload["user"]["id"] = user
        payload["channel"]["id"] = channel
        payload["container"]["channel_id"] = channel
        payload["actions"][0].update(action_id=action, value=value)
        payload.update(self._from_slack(user, channel, payload["container"].get("message_ts")))
        return self.interaction(payload, **sign_kw)

    def submit(
        self,
        user: str,
        callback_id: str,
        private_metadata: str,
        values: dict[str, str | None],
        view_id: str | None = None,
    ) -> Any:
        """A view submission; `view_id` names the open modal, as Slack's payload does."""
        payload = fixture("view_submission.json")
        payload["user"]["id"] = user
        payload["trigger_id"] = self.slack.workspace.issue_trigger(user)
        view = payload["view"]
        if view_id is not None:
            view["id"] = view_id
        view["callback_id"] = callback_id
        view["private_metadata"] = private_metadata
        # Each input answers with its element's type, as Slack's view state does.
        opened = [v for v in self.slack.views if v.get("callback_id") == callback_id]
        types = {
            b["block_id"]: b["element"]["type"]
            for b in (opened[-1]["blocks"] if opened else [])
            if b.get("type") == "input"
        }
        state: dict[str, Any] = {}
        for block_id, value in values.items():
            kind = types.get(block_id, "plain_text_input")
            if kind == "static_select":
                state[block_id] = {"value": {"type": kind, "selected_option": {"value": value}}}
            else:
                state[block_id] = {"value": {"type": kind, "value": value}}
        view["state"] = {"values": state}
        return self.interaction(payload)

    def opened(self, user: str) -> dict[str, Any] | None:
        """The modal open for `user` now (a click opens one: what it does, or why not)."""
        modal = self.slack.workspace.modals.get(user)
        return modal.view if modal is not None else None

    def refused(self, user: str) -> str:
        """What the modal open for `user` says when their click was refused ("" when none)."""
        view = self.opened(user)
        if view is None or view.get("callback_id") != "decision_refused":
            return ""
        return str(view["blocks"][0]["text"]["text"])

    def approve(self, user: str, value: str, channel: str = "C0FINANCE") -> Any:
        """Click Approve and confirm in the modal it opens, as a person does; a click refused
        at once opens a modal that says why (`refused`), and nothing is confirmed."""
        clicked = self.click(user, "approve", value, channel)
        view = self.opened(user)
        if view is None or view.get("callback_id") != "approve_modal":
            return clicked
        return self.submit(user, "approve_modal", view["private_metadata"], {})

    def escalate(
        self,
        user: str,
        value: str,
        reason: str = "Needs a manager's eye.",
        channel: str = "C0FINANCE",
    ) -> Any:
        """Click Escalate, then give the reason its modal asks for (nothing, when the click
        was refused at once: its modal says why)."""
        clicked = self.click(user, "escalate", value, channel)
        view = self.opened(user)
        if view is None or view.get("callback_id") != "escalate_modal":
            return clicked
        return self.submit(user, "escalate_modal", view["private_metadata"], {"reason": reason})

    def slash(self, user: str, command: str, text: str = "") -> Any:
        form = fixture("slash_command.json")
        form.update(user_id=user, command=command, text=text)
        form.update(self._from_slack(user, form["channel_id"]))
        body = urlencode(form)
        return self.post_slack(body)

    def event(self, payload: dict[str, Any]) -> Any:
        body = json.dumps(payload)
        headers = sign(body)
        headers["Content-Type"] = "application/json"
        return self.post_slack(body, headers)

    # ------------------------------------------------------------ waiting

    def settle(self, timeout: float = 20) -> None:
        """Wait for jobs started after ack(), then run whatever else is due."""
        deadline = time.monotonic() + timeout
        while self.surface._background and time.monotonic() < deadline:
            time.sleep(0.01)
        for _ in range(10):
            if self.runtime.desk.jobs.sweep() == 0:
                break

    # ------------------------------------------------------------ reading Slack

    def card(self, channel: str = "C0FINANCE") -> Any:
        cards = self.slack.in_channel(channel)
        assert cards, f"no card in {channel}: {self.slack.methods()}"
        return cards[-1]

    def buttons(self, channel: str = "C0FINANCE") -> dict[str, str]:
        return self.slack.buttons(self.card(channel))

    def refusals(self, case_id: str) -> list[dict[str, Any]]:
        return [r for r in self.get(case_id)["audit"] if r["action"] == "approval.refused"]
