"""`manifest.yml` validates against Slack's own manifest schema and asks only for what is used."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.slack_helpers import slack_specs

ROOT = Path(__file__).resolve().parents[2]
SPECS = slack_specs()
SCHEMA = (SPECS or ROOT.parent / "shared" / "slack") / "manifest.schema.1.0.0.json"
MANIFEST = ROOT / "manifest.yml"
SLACK_CODE = ROOT / "src" / "refund_desk" / "bot"

# Web API method -> the bot scope it needs (the methods the app calls).
SCOPES = {
    "chat.postMessage": "chat:write",
    "chat.update": "chat:write",
    "chat.postEphemeral": "chat:write",
    "conversations.open": "im:write",
    "files.getUploadURLExternal": "files:write",  # files_upload_v2, step 1
    "files.completeUploadExternal": "files:write",  # files_upload_v2, step 3
    "files.info": "files:read",  # a policy draft uploaded in the modal
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
    used = set(re.findall(r'"((?:chat|conversations|views|users|files)\.[A-Za-z]+)"', code))
    needed = {SCOPES[m] for m in used if m in SCOPES} | {"commands"}
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
