"""OpenTelemetry traces, only when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.

With it, spans go over OTLP/HTTP to `<endpoint>/v1/traces`: FastAPI requests, SQLAlchemy
statements and httpx calls (instrumented), plus spans of our own that carry the case: each
job (`job advance`, `job execute`, ...: advice, decision, approval and execution all run as
jobs or inside one), each processor call, each intake. A job a request runs inline is a child
of the request's span, so one trace follows a case from intake to its refund.

Without it nothing is imported, nothing exported, and `span()` is a shared no-op: the cost is
one global read per span site (`bench/ops_bench.py` measures it).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI
    from sqlalchemy import Engine

_tracer: Any = None  # an OpenTelemetry tracer while tracing is on
_provider: Any = None
_instrumented: list[Any] = []
_NOTHING = nullcontext()


def enabled() -> bool:
    return _tracer is not None


def setup(endpoint: str | None, *, app: FastAPI | None = None, engine: Engine | None = None,
          service: str = "refund-desk") -> bool:  # fmt: skip
    """Start exporting to `endpoint` (OTLP/HTTP) and instrument the app, the engine and httpx;
    False (and nothing done) without an endpoint."""
    global _tracer, _provider
    if not endpoint:
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if _provider is None:
        _provider = TracerProvider(resource=Resource.create({"service.name": service}))
        exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")
        _provider.add_span_processor(BatchSpanProcessor(exporter))
        _tracer = _provider.get_tracer("refund_desk")
        httpx = HTTPXClientInstrumentor()
        httpx.instrument(tracer_provider=_provider)
        _instrumented.append(httpx)
    if engine is not None:
        sql = SQLAlchemyInstrumentor()
        # Its declared range stops before SQLAlchemy 2.1, whose engine events it uses unchanged.
        sql.instrument(engine=engine, tracer_provider=_provider, skip_dep_check=True)
    if app is not None:
        FastAPIInstrumentor.instrument_app(app, tracer_provider=_provider)
    return True


def span(name: str, **attributes: Any) -> Any:
    """A span of our own (a context manager); a shared no-op while tracing is off."""
    if _tracer is None:
        return _NOTHING
    clean = {f"refund_desk.{k}": v for k, v in attributes.items() if v is not None}
    return _tracer.start_as_current_span(name, attributes=clean)


def annotate(**attributes: Any) -> None:
    """Name the case on the span in progress (the request's, or a job's)."""
    if _tracer is None:
        return
    from opentelemetry import trace

    current = trace.get_current_span()
    for key, value in attributes.items():
        if value is not None:
            current.set_attribute(f"refund_desk.{key}", value)


def flush() -> None:
    if _provider is not None:
        _provider.force_flush()


def shutdown() -> None:
    """Flush and stop (the server's end; tests)."""
    global _tracer, _provider
    if _provider is None:
        return
    for instrumentor in _instrumented:
        instrumentor.uninstrument()
    _instrumented.clear()
    _provider.shutdown()
    _tracer = _provider = None
