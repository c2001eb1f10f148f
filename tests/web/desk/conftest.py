"""The desk in tests: an app on a real database with the acme policy, and browsers signed in as
its people (the cookie a Sign in with Slack would have set; `test_sign_in.py` drives the real
flow through the emulator)."""

from __future__ import annotations

from fastapi.responses import Response
from fastapi.testclient import TestClient
from starlette.requests import Request

from refund_desk.runtime import Runtime
from refund_desk.web.desk import session
from tests.helpers import Harness

LEAD, SUPPORT, FINANCE, MANAGER, NOBODY = "U0LEAD1", "U0LEAD2", "U0FIN1", "U0MGR1", "U0NOBODY"


def sign_in(runtime: Runtime, client: TestClient, user: str, name: str | None = None) -> TestClient:
    """`client` carries a session for `user`, as the desk's sign-in would set it."""
    response = Response()
    scope = {"type": "http", "scheme": "http", "path": "/", "headers": [], "app": client.app}
    session.start(
        response, Request(scope), runtime.settings.secret_value(), user, name or f"Person {user}"
    )
    cookie = response.headers["set-cookie"].split(";", 1)[0]
    key, _, value = cookie.partition("=")
    client.cookies.set(key, value)
    return client


def browser(desk: Harness, user: str) -> TestClient:
    """A new browser on the desk's app, signed in as `user`."""
    client = TestClient(desk.client.app, follow_redirects=False)
    return sign_in(desk.runtime, client, user)
