"""A key checked before the body was read is checked again by the capture: a key revoked while
the request waited, or while its body came, makes no case."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from refund_desk.api_keys import create_api_key, hash_key, revoke_api_key
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import ApiKey
from tests.helpers import Harness, LiveServer


def _checked(runtime: Runtime, key: str) -> bool:
    """Has the server checked this key (a check of a valid key records its use)?"""
    with runtime.db.read() as session:
        row = session.scalars(select(ApiKey).where(ApiKey.key_hash == hash_key(key))).one()
        return row.last_used_at is not None


def test_a_key_revoked_while_its_request_waits_at_the_intake_gate_makes_no_case(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the check before the body and the capture, a request may queue at the intake
    gate for as long as the captures ahead take: revoking a leaked key meanwhile stops it at
    once, not after the queue drains."""
    monkeypatch.setattr(runtime.settings, "intake_concurrency", 1)
    desk = Harness(runtime)
    desk.publish()
    payment = desk.payment("90.00")
    leaked = create_api_key(runtime.db, "leaked")  # never used yet: checked before the body
    entered, release = threading.Event(), threading.Event()
    real = runtime.desk.processor.payment

    def slow_processor(payment_id: str, *args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(30)  # the capture in the gate waits on the processor
        return real(payment_id, *args, **kwargs)

    monkeypatch.setattr(runtime.desk.processor, "payment", slow_processor)
    server = LiveServer(runtime)
    answers: dict[str, httpx.Response] = {}

    def post(name: str, key: str, amount: str) -> None:
        answers[name] = httpx.post(
            f"{server.url}/api/v1/refund-requests",
            json=desk.request(payment, amount),
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )

    first = threading.Thread(target=post, args=("holder", desk.key, "5.00"))
    first.start()
    second: threading.Thread | None = None
    try:
        assert entered.wait(10), "the first capture holds the gate"
        before = desk.counts()
        second = threading.Thread(target=post, args=("leaked", leaked, "20.00"))
        second.start()
        deadline = time.monotonic() + 10
        while not _checked(runtime, leaked):  # checked (valid), now body + gate
            assert time.monotonic() < deadline, "the leaked key was never checked"
            time.sleep(0.01)
        time.sleep(0.3)  # queued at the gate
        revoke_api_key(runtime.db, "leaked", audit=runtime.desk.audit, actor=Actor("cli", "ops"))
    finally:
        release.set()
        first.join(60)
        if second is not None:
            second.join(60)
        server.stop()
    assert answers["holder"].status_code == 201
    cases_after_holder = before[0] + 1
    assert answers["leaked"].status_code == 401, (
        f"a key revoked before its capture ran made case {answers['leaked'].json().get('id')}"
    )
    assert desk.counts()[0] == cases_after_holder


def test_a_key_revoked_while_its_client_is_still_sending_the_body_makes_no_case(
    runtime: Runtime,
) -> None:
    """The body may follow the headers as late as the server's timeouts allow: requests opened
    ahead with a leaked key make no case once it is revoked. No intake gate here (no limit)."""
    import json
    import socket

    desk = Harness(runtime)
    desk.publish()
    payment = desk.payment("90.00")
    leaked = create_api_key(runtime.db, "leaked")
    server = LiveServer(runtime)
    before = desk.counts()
    body = json.dumps(desk.request(payment, "20.00")).encode()
    head = (
        b"POST /api/v1/refund-requests HTTP/1.1\r\n"
        b"Host: 127.0.0.1\r\n"
        b"Authorization: Bearer " + leaked.encode() + b"\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(head + body[:10])
            deadline = time.monotonic() + 10
            while not _checked(runtime, leaked):  # checked on the headers alone
                assert time.monotonic() < deadline, "the key was never checked"
                time.sleep(0.01)
            revoke_api_key(
                runtime.db, "leaked", audit=runtime.desk.audit, actor=Actor("cli", "ops")
            )
            sock.sendall(body[10:])  # the rest of the body, after the revocation
            answer = sock.recv(65536)
    finally:
        server.stop()
    status_line = answer.split(b"\r\n", 1)[0]
    assert status_line == b"HTTP/1.1 401 Unauthorized", answer[:300]
    assert desk.counts()[0] == before[0]
