"""Review: a valid intake request must never be answered with an error once its case exists."""

from __future__ import annotations

import json
import socket

from refund_desk.runtime import Runtime
from tests.helpers import Harness, LiveServer


def test_an_unreadable_prefer_wait_is_ignored_not_a_500_after_the_case_was_made(
    runtime: Runtime,
) -> None:
    """`Prefer: wait=²` (the header byte 0xB2: a digit to `str.isdigit`, not to `float`) is
    ignored as RFC 7240 says, not a 500 after the case was made (a retry would make another)."""
    desk = Harness(runtime)
    desk.publish()
    before = desk.counts()[0]
    body = json.dumps(desk.request(desk.payment())).encode()
    server = LiveServer(runtime)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(
                b"POST /api/v1/refund-requests HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
                b"Prefer: wait=\xb2\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                % (desk.key.encode(), len(body))
                + body
            )
            answer = sock.recv(65536)
    finally:
        server.stop()
    made = desk.counts()[0] - before
    status_line = answer.split(b"\r\n", 1)[0]
    assert status_line == b"HTTP/1.1 201 Created", (status_line, f"cases made: {made}")
