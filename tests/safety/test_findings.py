"""Issue 13: each demonstrated finding, reproduced as it was found; each must now hold."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.runtime import Runtime, build
from refund_desk.storage.db import Database
from refund_desk.web.app import create_app
from tests.conftest import _raise_crash, make_settings

# ---------------------------------------------------------------- finding 1: Socket Mode


@pytest.fixture()
def socket_mode_runtime(sqlite_url: str) -> Iterator[Runtime]:
    """Bot and app-level tokens, no signing secret, and a Slack that cannot be reached."""
    settings = make_settings(
        sqlite_url,
        SLACK_BOT_TOKEN="xoxb-test",
        SLACK_APP_TOKEN="xapp-test",
        SLACK_API_URL="http://127.0.0.1:9/api/",  # nothing listens on the discard port
    )
    db = Database.from_url(sqlite_url)
    rt = build(settings, db=db, processor=SandboxProcessor(db, crash=_raise_crash))
    yield rt
    db.dispose()


def test_finding_01_socket_mode_mounts_no_unsigned_http_route(
    socket_mode_runtime: Runtime,
) -> None:
    app = create_app(socket_mode_runtime, scheduler=False)
    with TestClient(app) as client:  # the lifespan runs: Socket Mode start-up must not block
        body = "command=%2Frefund-policy&text=pause&user_id=U0LEAD1"
        response = client.post(
            "/slack/events",
            content=body,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert response.status_code == 404, "no HTTP Slack route without a signing secret"
        health = client.get("/healthz")
        assert health.status_code == 200
        assert health.json()["slack"] in ("connecting", "retrying")


def test_finding_01_http_route_needs_a_signing_secret(sqlite_url: str) -> None:
    from refund_desk.bot.app import build_surface

    settings = make_settings(sqlite_url, SLACK_BOT_TOKEN="xoxb-test", SLACK_SIGNING_SECRET="s" * 20)
    db = Database.from_url(sqlite_url)
    rt = build(settings, db=db, processor=SandboxProcessor(db, crash=_raise_crash))
    try:
        client = TestClient(create_app(rt, scheduler=False))
        unsigned = client.post(
            "/slack/events",
            content="command=%2Frefund-policy&text=pause&user_id=U0LEAD1",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert unsigned.status_code == 401, "mounted, and every request must be signed"
        assert client.get("/healthz").json() == {"status": "ok", "slack": "http"}
        surface = build_surface(rt.desk, settings)
        assert surface is not None and surface.http
    finally:
        db.dispose()
