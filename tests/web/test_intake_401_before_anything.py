"""A bad API key gets 401 before anything else (`KeyFirst`), from the real server (uvicorn on
loopback), so the gate and the HTTP/1.1 exchange are the ones a client sees."""

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
    """A client that asks `Expect: 100-continue` hears 401 for an unknown key, not an invitation
    to upload a body the server would buffer."""
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
    """An unknown key gets 401 at once, not after the captures the gate holds: a flood of
    made-up keys would otherwise take the gate's turns from every channel."""
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
