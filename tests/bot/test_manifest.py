"""`manifest.yml` validates against Slack's own manifest schema and asks only for what is used."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from refund_desk.bot.doctor import REQUIRED_SCOPES
from refund_desk.bot.listeners.policy_command import PolicyCommands
from refund_desk.demo.slack.emulator import GRANTED_SCOPES
from tests.slack_helpers import slack_specs

ROOT = Path(__file__).resolve().parents[2]
SPECS = slack_specs()
SCHEMA = (SPECS or ROOT.parent / "shared" / "slack") / "manifest.schema.1.0.0.json"
MANIFEST = ROOT / "manifest.yml"
SOCKET_MANIFEST = ROOT / "manifest.socket-mode.yml"
SLACK_CODE = ROOT / "src" / "refund_desk" / "bot"

# Web API method -> the bot scopes it needs (the methods the app calls).
SCOPES: dict[str, tuple[str, ...]] = {
    "chat.postMessage": ("chat:write",),
    "chat.update": ("chat:write",),
    "chat.postEphemeral": ("chat:write",),
    "conversations.open": ("im:write",),
    "conversations.info": ("channels:read", "groups:read"),  # slack doctor: membership
    "usergroups.users.list": ("usergroups:read",),
    "usergroups.list": ("usergroups:read",),
    "files.getUploadURLExternal": ("files:write",),  # files_upload_v2, step 1
    "files.completeUploadExternal": ("files:write",),  # files_upload_v2, step 3
    "files.info": ("files:read",),  # a policy draft uploaded in the modal
}


@pytest.fixture(scope="module")
def manifest() -> dict[str, object]:
    return dict(yaml.safe_load(MANIFEST.read_text()))


def test_manifest_validates_against_slacks_schema(manifest: dict[str, object]) -> None:
    if not SCHEMA.exists():
        pytest.skip(f"Slack's manifest schema is not beside the project ({SCHEMA.parent})")
    schema = json.loads(SCHEMA.read_text())
    jsonschema.validate(manifest, schema)


def test_manifest_asks_for_exactly_the_scopes_the_code_uses(manifest: dict[str, object]) -> None:
    code = "\n".join(p.read_text() for p in SLACK_CODE.rglob("*.py"))
    methods = r'"((?:chat|conversations|views|users|usergroups|files)\.[A-Za-z.]+)"'
    used = set(re.findall(methods, code))
    needed = {scope for m in used for scope in SCOPES.get(m, ())} | {"commands"}
    scopes = manifest["oauth_config"]["scopes"]["bot"]  # type: ignore[index]
    assert set(scopes) == needed


def test_manifest_points_every_surface_at_the_one_events_route(
    manifest: dict[str, object],
) -> None:
    text = MANIFEST.read_text()
    urls = set(re.findall(r"url: (\S+)", text))
    assert urls == {"https://refund-desk.example.com/slack/events"}
    commands = {c["command"] for c in manifest["features"]["slash_commands"]}  # type: ignore[index]
    assert commands == {"/refund", "/refund-policy"}


def test_the_socket_mode_manifest_is_the_same_app_without_urls(
    manifest: dict[str, object],
) -> None:
    socket = yaml.safe_load(SOCKET_MANIFEST.read_text())
    if SCHEMA.exists():
        jsonschema.validate(socket, json.loads(SCHEMA.read_text()))
    assert "url:" not in SOCKET_MANIFEST.read_text()
    assert socket["settings"]["socket_mode_enabled"] is True
    assert manifest["settings"]["socket_mode_enabled"] is False  # type: ignore[index]
    for name in ("oauth_config", "display_information"):
        assert socket[name] == manifest[name]
    same = {k: v for k, v in socket["features"].items() if k != "slash_commands"}
    assert same == {
        k: v
        for k, v in manifest["features"].items()  # type: ignore[attr-defined]
        if k != "slash_commands"
    }


def test_the_messages_tab_is_on_for_the_dms_the_app_sends(manifest: dict[str, object]) -> None:
    home = manifest["features"]["app_home"]  # type: ignore[index]
    assert home["messages_tab_enabled"] is True


def test_the_usage_hint_lists_every_policy_subcommand(manifest: dict[str, object]) -> None:
    [command] = [
        c
        for c in manifest["features"]["slash_commands"]  # type: ignore[index]
        if c["command"] == "/refund-policy"
    ]
    hint = command["usage_hint"]
    for sub in (*PolicyCommands.READS, *PolicyCommands.CHANGES):
        assert sub in hint, f"`{sub}` is missing from the usage hint"


def test_the_message_shortcut_is_declared(manifest: dict[str, object]) -> None:
    shortcuts = manifest["features"]["shortcuts"]  # type: ignore[index]
    assert {(s["type"], s["callback_id"]) for s in shortcuts} == {("message", "file_refund")}


def test_the_doctor_and_the_emulator_know_the_manifests_scopes(
    manifest: dict[str, object],
) -> None:
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])  # type: ignore[index]
    assert set(REQUIRED_SCOPES) == scopes == set(GRANTED_SCOPES)
