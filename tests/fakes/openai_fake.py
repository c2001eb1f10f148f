"""A small, real OpenAI-compatible HTTP server on loopback, for driving the real `openai` SDK.

It speaks `POST /v1/chat/completions`, records every request body, and answers according to
`mode`: `ok` (the `answer` dict as JSON content), `refusal` (a `refusal`, no content),
`length` (the answer cut: `finish_reason` `length`), `invalid_json`, `schema` (JSON missing
fields), `extra_approve` (a valid answer plus `"decision": "approve"`), `timeout` (sleeps
past the client's timeout), `error` (HTTP 500).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_ANSWER: dict[str, Any] = {
    "intent": "refund",
    "reason": "damaged",
    "confidence": 0.93,
    "order_ref": None,
    "amount": None,
    "currency": None,
    "cited_rules": [],
    "summary": "Customer reports the item arrived damaged.",
    "injection_suspected": False,
}


class FakeOpenAI:
    def __init__(self) -> None:
        self.mode = "ok"
        self.answer: dict[str, Any] = dict(DEFAULT_ANSWER)
        self.sleep_seconds = 5.0
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def wire(self) -> str:
        """Everything the model has been sent, as one string (for "what crossed" checks)."""
        return json.dumps(self.requests, ensure_ascii=False)

    def _content(self) -> str:
        if self.mode == "invalid_json":
            return "Sure! The customer wants a refund, I would approve it."
        if self.mode == "schema":
            return json.dumps({"reason": "damaged"})
        if self.mode == "extra_approve":
            return json.dumps({**self.answer, "decision": "approve"})
        return json.dumps(self.answer)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.requests.append(body)
                fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": "not found"}})
                if fake.mode == "timeout":
                    time.sleep(fake.sleep_seconds)
                if fake.mode == "error":
                    return self._send(500, {"error": {"message": "boom", "type": "server"}})
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{len(fake.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "fake"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {
                                    "role": "assistant",
                                    "content": None if fake.mode == "refusal" else fake._content(),
                                    "refusal": "I can't help with that."
                                    if fake.mode == "refusal"
                                    else None,
                                },
                                "finish_reason": "length" if fake.mode == "length" else "stop",
                            }
                        ],
                        "usage": {
                            "prompt_tokens": 120,
                            "completion_tokens": 40,
                            "total_tokens": 160,
                        },
                    },
                )

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): nothing to answer

        return Handler


@contextmanager
def fake_openai() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    try:
        yield fake
    finally:
        fake.stop()
