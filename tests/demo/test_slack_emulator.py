"""The Slack emulator is as strict as Slack: its method table agrees with Slack's own description
of the Web API (and with `slack_sdk`'s WebClient for methods newer than it), and it answers as
Slack does on channels, read methods, rate limits, response_urls, DMs, files and signatures."""

from __future__ import annotations

import inspect
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.webhook import WebhookClient

from refund_desk.demo.slack import Channel, SlackEmulator
from refund_desk.demo.slack.web_api import METHODS
from tests.slack_helpers import SIGNING_SECRET, TOKEN, emulator, sign, slack_specs

SLACK_CODE = Path(__file__).resolve().parents[2] / "src" / "refund_desk" / "bot"


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    specs = slack_specs()
    if specs is None or not (specs / "web-api.openapi.json").exists():
        pytest.skip("Slack's Web API description (shared/slack/) is not beside the project")
    return dict(json.loads((specs / "web-api.openapi.json").read_text()))


@pytest.fixture()
def slack() -> Iterator[SlackEmulator]:
    served = emulator()
    ws = served.workspace
    ws.channels["C0OUTSIDE"] = Channel("C0OUTSIDE", "outside", member=False)
    ws.channels["C0OLD"] = Channel("C0OLD", "old", archived=True)
    ws.usergroups["S0FINANCE"] = ["U0FIN1", "U0FIN2"]
    with served:
        yield served


@pytest.fixture()
def client(slack: SlackEmulator) -> WebClient:
    return WebClient(token=TOKEN, base_url=slack.api_url)


def error(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(SlackApiError) as caught:
        call(*args, **kwargs)
    return str(caught.value.response["error"])


def section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


# ---------------------------------------------------------------- the method table


def _slack_says(openapi: dict[str, Any], name: str) -> tuple[set[str], set[str], bool]:
    """(required arguments, known arguments, takes a JSON body) as Slack describes `name`, or
    as slack_sdk sends it where the description is older than the method."""
    path = openapi["paths"].get("/" + name)
    if path is not None:
        [operation] = path.values()
        params = [p for p in operation.get("parameters", []) if p["name"] != "token"]
        required = {p["name"] for p in params if p.get("required")}
        known = {p["name"] for p in params}
        return required, known, "application/json" in operation.get("consumes", [])
    method = getattr(WebClient, name.replace(".", "_"))
    params = [p for p in inspect.signature(method).parameters.values() if p.kind is p.KEYWORD_ONLY]
    required = {p.name for p in params if p.default is p.empty}
    return required, {p.name for p in params}, "json=kwargs" in inspect.getsource(method)


def test_every_method_is_slacks_and_requires_what_slack_requires(openapi: dict[str, Any]) -> None:
    for name, method in METHODS.items():
        required, known, json_body = _slack_says(openapi, name)
        assert required <= set(method.required), f"{name}: Slack requires {required}"
        assert set(method.required) <= known, f"{name}: Slack has no {method.required}"
        assert method.json_body == json_body, f"{name}: JSON body {json_body} for Slack"


def test_every_method_the_bot_calls_is_emulated() -> None:
    code = "\n".join(p.read_text() for p in SLACK_CODE.rglob("*.py"))
    named = set(
        re.findall(
            r'"((?:auth|chat|conversations|views|users|usergroups|files)\.[A-Za-z.]+)"', code
        )
    )
    # slack_sdk's names: `usergroups_users_list` is usergroups.users.list, `files_upload_v2` is
    # itself; the second word may keep its underscore (`chat_postMessage`).
    sdk = {
        m.replace("_", ".") if m.replace("_", ".") in METHODS else m.replace("_", ".", 1)
        for m in re.findall(r"client\.([a-z]+_\w+)\(", code)
    }
    composed = {"api.call", "files.upload_v2"}  # any method; files.getUploadURLExternal & co.
    assert named - METHODS.keys() == set()
    assert {"views.open", "files.upload_v2"} <= sdk and sdk - composed <= METHODS.keys()


def test_a_missing_required_argument_is_refused(client: WebClient) -> None:
    assert error(client.api_call, "chat.update", json={"channel": "C0REFUNDS"}) == (
        "invalid_arguments"
    )
    assert error(client.api_call, "views.publish", json={"user_id": "U0FIN1"}) == (
        "invalid_arguments"
    )


# ---------------------------------------------------------------- answers


def test_it_wants_the_bot_token(slack: SlackEmulator) -> None:
    assert error(WebClient(base_url=slack.api_url).auth_test) == "not_authed"
    assert error(WebClient(token="xoxb-wrong", base_url=slack.api_url).auth_test) == (
        "invalid_auth"
    )


def test_channels_the_bot_is_not_in_or_archived_are_refused(client: WebClient) -> None:
    post = client.chat_postMessage
    assert error(post, channel="C0NOPE", text="x") == "channel_not_found"
    assert error(post, channel="C0OUTSIDE", text="x") == "not_in_channel"
    assert error(post, channel="C0OLD", text="x") == "is_archived"
    assert error(client.chat_postEphemeral, channel="C0OUTSIDE", user="U0FIN1", text="x") == (
        "not_in_channel"
    )
    info = client.conversations_info(channel="C0OUTSIDE")["channel"]
    assert info["is_member"] is False and info["is_archived"] is False
    assert client.conversations_info(channel="C0OLD")["channel"]["is_archived"] is True
    assert error(client.conversations_info, channel="C0NOPE") == "channel_not_found"


def test_read_methods_take_query_or_form_arguments_never_a_json_body(
    slack: SlackEmulator, client: WebClient
) -> None:
    file_id = slack.add_file("policy.yaml", "name: x\n")
    assert client.files_info(file=file_id)["file"]["name"] == "policy.yaml"  # a GET
    assert client.users_info(user="U0FIN1")["user"]["id"] == "U0FIN1"
    assert client.conversations_info(channel="C0REFUNDS")["channel"]["name"] == "refunds"
    assert client.usergroups_users_list(usergroup="S0FINANCE")["users"] == ["U0FIN1", "U0FIN2"]
    assert client.api_call("users.info", params={"user": "U0FIN1"})["ok"]  # a form POST
    for method, args in (
        ("files.info", {"file": file_id}),
        ("users.info", {"user": "U0FIN1"}),
        ("conversations.info", {"channel": "C0REFUNDS"}),
        ("usergroups.users.list", {"usergroup": "S0FINANCE"}),
    ):
        assert error(client.api_call, method, json=args) == "invalid_arguments", method
    assert error(client.usergroups_users_list, usergroup="S0NOPE") == "no_such_subteam"


def test_block_kit_limits(client: WebClient) -> None:
    post = client.chat_postMessage
    assert error(post, channel="C0REFUNDS", text="x", blocks=[section("x")] * 51) == (
        "invalid_blocks"
    )
    assert post(channel="C0REFUNDS", text="x", blocks=[section("x" * 3000)])["ok"]
    assert error(post, channel="C0REFUNDS", text="x", blocks=[section("x" * 3001)]) == (
        "invalid_blocks"
    )

    def buttons(*elements: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"type": "actions", "elements": list(elements)}]

    def button(action_id: str, value: str = "v") -> dict[str, Any]:
        text = {"type": "plain_text", "text": "Go"}
        return {"type": "button", "text": text, "action_id": action_id, "value": value}

    assert post(channel="C0REFUNDS", text="x", blocks=buttons(button("a", "v" * 2000)))["ok"]
    for blocks in (
        buttons(button("a", "v" * 2001)),
        buttons(button("a" * 256)),
        buttons(button("a"), button("a")),
    ):
        assert error(post, channel="C0REFUNDS", text="x", blocks=blocks) == "invalid_blocks"
    home = {"type": "home", "blocks": [section("x")] * 100}
    assert client.views_publish(user_id="U0FIN1", view=home)["ok"]
    home["blocks"] = [section("x")] * 101
    assert error(client.views_publish, user_id="U0FIN1", view=home) == "invalid_blocks"


def test_a_rate_limit_answers_429_with_retry_after(slack: SlackEmulator, client: WebClient) -> None:
    slack.rate_limits["chat.postMessage"], slack.retry_after = 1, 3
    with pytest.raises(SlackApiError) as caught:
        client.chat_postMessage(channel="C0REFUNDS", text="x")
    assert caught.value.response.status_code == 429
    assert caught.value.response.headers["Retry-After"] == "3"
    assert client.chat_postMessage(channel="C0REFUNDS", text="x")["ok"]
    assert slack.methods() == ["chat.postMessage", "chat.postMessage"]
    assert [m.text for m in slack.in_channel("C0REFUNDS")] == ["x"]


def test_a_dm_is_opened_with_conversations_open(slack: SlackEmulator, client: WebClient) -> None:
    dm = client.conversations_open(users="U0MGR1")["channel"]["id"]
    assert client.chat_postMessage(channel=dm, text="escalated")["ok"]
    assert [m.text for m in slack.messages if m.channel == "D0MGR1"] == ["escalated"]
    assert error(client.conversations_open, users="U0GHOST") == "user_not_found"


def test_response_urls_answer_as_slack_does(slack: SlackEmulator, client: WebClient) -> None:
    card = client.chat_postMessage(channel="C0FINANCE", text="card", blocks=[section("card")])
    assert slack.base_url is not None
    url = slack.response_url(slack.base_url, "U0FIN1", "C0FINANCE", card["ts"])
    hook = WebhookClient(url)
    assert hook.send(text="only you").status_code == 200
    assert [(m.to, m.text) for m in slack.ephemeral] == [("U0FIN1", "only you")]
    assert hook.send(text="everyone", response_type="in_channel").status_code == 200
    assert hook.send(text="decided", replace_original=True).status_code == 200
    [message, said] = slack.in_channel("C0FINANCE")
    assert (message.text, message.updates, said.text) == ("decided", 1, "everyone")
    assert hook.send(text="blocks", blocks=[section("x")] * 51).status_code == 400
    assert hook.send(text="fifth").status_code == 200
    assert hook.send(text="sixth").status_code == 404  # five posts to one response_url
    assert httpx.post(slack.base_url + "sandbox/slack/respond/nope", json={}).status_code == 404


def test_files_upload_v2_and_download_with_the_token(
    slack: SlackEmulator, client: WebClient
) -> None:
    client.files_upload_v2(
        channel="C0POLICY", content="a,b\n1,2\n", filename="backtest.csv", title="Backtest"
    )
    [upload] = slack.uploads("C0POLICY")
    assert upload["content"] == "a,b\n1,2\n" and upload["title"] == "Backtest"
    assert slack.methods()[:1] == ["files.getUploadURLExternal"]
    assert "files.completeUploadExternal" in slack.methods()
    with pytest.raises(SlackApiError, match="not_in_channel"):
        client.files_upload_v2(channel="C0OUTSIDE", content="x", filename="x.txt")
    file_id = slack.add_file("policy.yaml", "name: x\n")
    url = client.files_info(file=file_id)["file"]["url_private"]
    assert httpx.get(url).status_code == 403
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(url, headers=auth).text == "name: x\n"


# ---------------------------------------------------------------- signatures


def test_the_one_signer_is_what_slack_sdk_verifies() -> None:
    body = "payload=%7B%7D"
    verifier = SignatureVerifier(SIGNING_SECRET)
    headers = sign(body)
    assert verifier.is_valid_request(body, headers)
    assert not SignatureVerifier("another-secret").is_valid_request(body, headers)
    stale = sign(body, timestamp=int(time.time()) - 600)
    assert not verifier.is_valid_request(body, stale)


def test_the_errors_the_bot_acts_on_are_slacks_own(openapi: dict[str, Any]) -> None:
    from refund_desk.bot.outbox import NOT_HERE, UNDELIVERABLE

    def errors(method: str) -> set[str]:
        [operation] = openapi["paths"]["/" + method].values()
        return set(operation["responses"]["default"]["schema"]["properties"]["error"]["enum"])

    assert errors("chat.postMessage") >= UNDELIVERABLE  # permanent: never retried
    assert "user_not_in_channel" in errors("chat.postEphemeral") & NOT_HERE  # then a DM
    assert "message_not_found" in errors("chat.getPermalink")
    assert "channel_not_found" in errors("conversations.info")


# ---------------------------------------------------------------- the page shows what Slack shows

PAGE_JS = Path(__file__).resolve().parents[2] / "src/refund_desk/demo/slack/static/page.js"
SHORT_CODE = re.compile(r"(?<![\w:/]):([a-z][a-z0-9_+-]*[a-z0-9]|x):(?![\w/])")
NOT_EMOJI = {"memory", "emoji", "mailto"}  # ":memory:", `"emoji": true`, a regex for "<mailto:…>"


def _short_codes_the_app_writes() -> set[str]:
    import ast

    from refund_desk.bot.mrkdwn import EMOJI

    found = {code.strip(":") for code in EMOJI.values()}
    for path in (SLACK_CODE.parent).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found |= set(SHORT_CODE.findall(node.value))
    return found - NOT_EMOJI


def test_the_page_shows_every_short_code_the_app_writes_as_an_emoji() -> None:
    table = PAGE_JS.read_text().split("const EMOJI = {", 1)[1].split("};", 1)[0]
    known = set(re.findall(r'"?([a-z0-9_+-]+)"?:\s*"\\u', table))
    codes = _short_codes_the_app_writes()
    assert {"no_entry_sign", "rocket", "white_check_mark"} <= codes
    assert codes - known == set(), "shown as text in the demo instead of an emoji"
