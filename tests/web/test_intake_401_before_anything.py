"""Review of the intake changes after 70eb271: a bad API key must get 401 before anything else.

`POST /api/v1/refund-requests` now reads the body (and waits for the intake gate) before it
looks the key up. These tests drive the real server (uvicorn on loopback) or the app in one
event loop, so the gate and the HTTP/1.1 exchange are the ones a client sees.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import httpx
import pytest

from refund_desk.runtime import Runtime
from tests.helpers import Harness, LiveServer


def _first_bytes_of_answer(port: int, head: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head)
        return sock.recv(4096)


def test_a_bad_key_with_expect_100_continue_gets_401_not_an_invitation_to_upload(
    runtime: Runtime,
) -> None:
    """A client that asks `Expect: 100-continue` before sending its body must hear 401 for an
    unknown key, not `100 Continue`: the handler now awaits the body before it checks the key
    (only the header's shape is checked first), so uvicorn answers 100 Continue and the
    unauthenticated client is invited to upload its whole body, which the server then buffers
    (the API has no body size limit). Before the change the key was a dependency checked
    before the body was ever read, and the first answer was 401."""
    desk = Harness(runtime)
    desk.publish()
    server = LiveServer(runtime)
    try:
        body = b'{"payment": "py_x", "email": "ada@example.com", "currency": "USD"}' * 1000
        head = (
            b"POST /api/v1/refund-requests HTTP/1.1\r\n"
            b"Host: 127.0.0.1\r\n"
            b"Authorization: Bearer rdk_not_a_key\r\n"
            b"Content-Type: application/json\r\n"
            b"Expect: 100-continue\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)
        )
        first = _first_bytes_of_answer(server.port, head)
    finally:
        server.stop()
    status_line = first.split(b"\r\n", 1)[0]
    assert status_line == b"HTTP/1.1 401 Unauthorized", first[:200]


def test_a_bad_key_is_not_held_in_the_intake_gate_behind_a_capture(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key is now checked only once the intake gate admits the request, so a request with
    an unknown key queues behind every capture in the replica (default limit 1 with job
    processes) and gets its 401 only when they are done: here, as long as the processor takes
    to answer about the payment of a valid request. The other way round, a flood of
    requests with made-up keys takes the gate's slots in turn and delays every channel's
    captures (API, web form, email, platform webhooks share the gate). Before the change the
    key was checked before the gate: 401 at once, and no slot taken."""
    monkeypatch.setattr(runtime.settings, "intake_concurrency", 1)
    desk = Harness(runtime)
    desk.publish()
    payment = desk.payment()
    entered, release = threading.Event(), threading.Event()
    real = runtime.desk.processor.payment

    def slow_processor(payment_id: str, *args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(30)  # the processor is slow to answer (a network call, say)
        return real(payment_id, *args, **kwargs)

    monkeypatch.setattr(runtime.desk.processor, "payment", slow_processor)
    server = LiveServer(runtime)
    answers: dict[str, Any] = {}

    def valid_request() -> None:
        answers["valid"] = httpx.post(
            f"{server.url}/api/v1/refund-requests",
            json=desk.request(payment),
            headers={"Authorization": f"Bearer {desk.key}"},
            timeout=60,
        )

    worker = threading.Thread(target=valid_request)
    worker.start()
    try:
        assert entered.wait(10), "the valid capture reached the processor"
        began = time.monotonic()
        try:
            bad = httpx.post(
                f"{server.url}/api/v1/refund-requests",
                json=desk.request(payment),
                headers={"Authorization": "Bearer rdk_not_a_key"},
                timeout=3,
            )
            status: int | None = bad.status_code
        except httpx.TimeoutException:
            status = None
        waited = time.monotonic() - began
    finally:
        release.set()
        worker.join(60)
        server.stop()
    assert answers["valid"].status_code == 201
    assert status == 401, f"no answer to a bad key after {waited:.1f}s: held in the intake gate"
