"""In the demo, each person signs in to the desk at `/desk` through the emulator's consent page:
the demo's app (the emulator mounted in it) served on loopback, one real HTTP client per
person, the desk's own calls to Slack's OpenID Connect going over HTTP to the same server."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import uvicorn

from refund_desk.demo.paypal import PayPalEmulatorServer
from refund_desk.demo.runner import NAMES, policy_source, prepare, users_from
from refund_desk.policy import parse_policy
from refund_desk.web.app import create_app


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    folder: Path = tmp_path_factory.mktemp("demo")
    paypal = PayPalEmulatorServer()
    runtime, sandbox = prepare(
        host="127.0.0.1", port=port, folder=folder, stream_seconds=3600, paypal=paypal
    )
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(runtime, scheduler=False, slack_emulator=sandbox),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert time.monotonic() < deadline, "the demo did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        runtime.db.dispose()
        paypal.stop()


def sign_in(base: str, user: str) -> httpx.Client:
    browser = httpx.Client(base_url=base, follow_redirects=False, timeout=20)
    to_sign_in = browser.get("/desk")
    assert to_sign_in.status_code == 303
    page = browser.get(to_sign_in.headers["location"])
    start = page.text.split('class="button" href="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
    authorize = browser.get(start)
    assert authorize.status_code == 303
    assert authorize.headers["location"].startswith(f"{base}/sandbox/slack/openid/connect/")
    consent = browser.get(authorize.headers["location"])
    assert consent.status_code == 200 and NAMES[user] in consent.text
    request_id = consent.text.split('name="request" value="', 1)[1].split('"', 1)[0]
    back = browser.post(
        "/sandbox/slack/openid/connect/authorize",
        data={"request": request_id, "user": user, "decision": "allow"},
    )
    assert back.status_code == 302
    parts = urlsplit(back.headers["location"])
    assert f"{parts.scheme}://{parts.netloc}" == base
    signed = browser.get(f"{parts.path}?{parts.query}")
    assert signed.status_code == 303, signed.text
    assert signed.headers["location"] == "/desk"
    return browser


def test_each_demo_person_signs_in_through_the_emulator(demo: str) -> None:
    people = [u.id for u in users_from(parse_policy(policy_source()))]
    assert "U0AUD1" in people  # the auditor: a viewer
    for user in people:
        browser = sign_in(demo, user)
        queue = browser.get("/desk")
        assert queue.status_code == 200, (user, queue.text)
        assert NAMES[user] in queue.text
        if user == "U0AUD1":
            assert "viewer" in queue.text
