"""Traces: with OTEL_EXPORTER_OTLP_ENDPOINT, one case's spans (request, jobs, processor calls,
SQL) reach a local OTLP/HTTP receiver carrying its case id; without it, nothing is set up."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from refund_desk import tracing
from refund_desk.runtime import build
from refund_desk.storage.db import Database
from tests.conftest import make_settings
from tests.helpers import Harness


class Collector:
    """A local OTLP/HTTP trace receiver: what an exporter sends is decoded and kept."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        collector.spans.extend(scope.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()


@pytest.fixture()
def collector() -> Iterator[Collector]:
    found = Collector()
    yield found
    tracing.shutdown()
    found.stop()


def _attrs(span: Any) -> dict[str, Any]:
    return {a.key: a.value.string_value or a.value.int_value for a in span.attributes}


def test_one_case_is_traced_from_intake_to_its_refund(
    sqlite_url: str, collector: Collector
) -> None:
    db = Database.from_url(sqlite_url)
    runtime = build(make_settings(sqlite_url, OTEL_EXPORTER_OTLP_ENDPOINT=collector.url), db=db)
    desk = Harness(runtime)
    assert tracing.enabled()
    desk.publish()
    body = desk.post(desk.request(desk.payment("30.00"), "20.00")).json()
    assert body["status"] == "refunded"
    tracing.flush()
    spans = collector.spans
    names = {s.name for s in spans}
    assert "POST /api/v1/refund-requests" in names
    assert {"job advance", "job execute", "processor create_refund"} <= names
    assert any(name.startswith(("SELECT", "INSERT", "UPDATE")) for name in names)  # SQL
    [request] = [s for s in spans if s.name == "POST /api/v1/refund-requests"]
    assert _attrs(request)["refund_desk.case_id"] == body["id"]
    assert str(_attrs(request)["refund_desk.correlation_id"]).startswith("req_")
    jobs = [s for s in spans if s.name in ("job advance", "job execute")]
    assert all(_attrs(s)["refund_desk.case_id"] == body["id"] for s in jobs)
    assert {s.trace_id for s in jobs} == {request.trace_id}  # one trace, intake to refund
    db.dispose()


def test_without_an_endpoint_nothing_is_set_up(runtime: Any) -> None:
    assert tracing.setup(None) is False
    assert not tracing.enabled()
    assert tracing.span("anything") is tracing.span("else")  # the one shared no-op
