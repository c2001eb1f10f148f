"""Logs people and machines can read: JSON lines or text, the case on every line about it.

`configure()` is called once by the command line. JSON lines when stderr is not a terminal,
readable text on one; `REFUND_DESK_LOG_FORMAT=json|text` chooses. Library chatter (alembic,
httpx, uvicorn's access lines, apscheduler) stays at WARNING unless `verbose`.

Every line logged while a case is in hand carries `case_id` and `correlation_id`: the intake
binds them when it creates a case, a job binds the case it is about, and loading that case's
row fills in its correlation id (`case_loaded`). No personal data: a filter masks anything
that looks like an email address in every line, as a last guard behind the rule that log
calls never pass one.
"""

from __future__ import annotations

import contextvars
import logging
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import IO, Any

from pythonjsonlogger.json import JsonFormatter

from refund_desk import tracing

_case_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("case_id", default=None)
_correlation_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "correlation_id", default=None
)

# Libraries whose INFO lines say nothing an operator needs; shown with -v.
QUIET = ("alembic", "apscheduler", "httpx", "httpcore", "uvicorn.access", "slack_bolt", "stripe")
EMAIL = re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+")
MASK = "[email]"


# A request's own line is written after its handler ran (in a worker thread, in a copy of
# this context): the handler's binding reaches it through this shared dict.
_scope: contextvars.ContextVar[dict[str, str | None] | None] = contextvars.ContextVar(
    "log_scope", default=None
)


def bind(case_id: str | None, correlation_id: str | None = None) -> None:
    """Say which case the lines that follow are about (within this context: a job, a request)."""
    _case_id.set(case_id)
    _correlation_id.set(correlation_id)
    tracing.annotate(case_id=case_id, correlation_id=correlation_id)
    scope = _scope.get()
    if scope is not None:
        scope.update(case_id=case_id, correlation_id=correlation_id)


def case_loaded(case_id: str, correlation_id: str) -> None:
    """A case row was read: if it is the one bound, its correlation id joins the context."""
    if _case_id.get() == case_id and _correlation_id.get() is None:
        bind(case_id, correlation_id)


@contextmanager
def request_scope() -> Iterator[dict[str, str | None]]:
    """Collect the case a request turns out to be about, for the request's own log line."""
    scope: dict[str, str | None] = {}
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        _scope.reset(token)


@contextmanager
def about(case_id: str | None, correlation_id: str | None = None) -> Iterator[None]:
    """Bind a case for the duration of a block, and put back what was bound before."""
    t1 = _case_id.set(case_id)
    t2 = _correlation_id.set(correlation_id)
    try:
        yield
    finally:
        _correlation_id.reset(t2)
        _case_id.reset(t1)


def current() -> tuple[str | None, str | None]:
    return _case_id.get(), _correlation_id.get()


def mask(text: str) -> str:
    return EMAIL.sub(MASK, text)


class CaseContext(logging.Filter):
    """Adds `case_id` and `correlation_id` (unless the call passed its own) and masks emails."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.__dict__.pop("color_message", None)  # uvicorn's ANSI copy of the message
        if getattr(record, "case_id", None) is None:
            record.case_id = _case_id.get()
        if getattr(record, "correlation_id", None) is None:
            record.correlation_id = _correlation_id.get()
        message = record.getMessage()
        masked = mask(message)
        if masked != message or record.args:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = mask(logging.Formatter().formatException(record.exc_info))
        return True


def iso_time(record: logging.LogRecord) -> str:
    """When a line was logged: ISO 8601 with the zone (UTC), to the millisecond, the one way
    logs and exports write a time."""
    return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")


class TextFormatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return iso_time(record)

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = [
            f"{key}={value}"
            for key in ("case_id", "correlation_id")
            if (value := getattr(record, key, None))
        ]
        if not ids:
            return line
        first, newline, rest = line.partition("\n")
        return f"{first} [{' '.join(ids)}]{newline}{rest}"


class _JsonFormatter(JsonFormatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return iso_time(record)


def json_formatter() -> logging.Formatter:
    return _JsonFormatter(
        "{asctime}{levelname}{name}{message}",
        style="{",
        rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        timestamp=False,
        json_ensure_ascii=False,
    )


def choose_format(stream: IO[str], environ: dict[str, str] | None = None) -> str:
    """`REFUND_DESK_LOG_FORMAT` if set (json|text), else text on a terminal and JSON otherwise."""
    value = (environ if environ is not None else os.environ).get("REFUND_DESK_LOG_FORMAT", "")
    value = value.strip().lower()
    if value in ("json", "text"):
        return value
    if value:
        raise ValueError(f"REFUND_DESK_LOG_FORMAT must be json or text, not {value!r}")
    isatty = getattr(stream, "isatty", None)
    return "text" if isatty is not None and isatty() else "json"


class _Stderr(logging.StreamHandler[IO[str]]):
    """Writes to whatever `sys.stderr` is when a line is written (test runners swap it)."""

    @property
    def stream(self) -> IO[str]:
        return sys.stderr

    @stream.setter
    def stream(self, value: IO[str]) -> None:
        pass


def configure(
    *, verbose: bool = False, stream: IO[str] | None = None, fmt: str | None = None
) -> logging.Handler:
    """Send every log line to `stream` (stderr) in one format; returns the handler installed."""
    fmt = fmt or choose_format(stream if stream is not None else sys.stderr)
    handler: logging.Handler = _Stderr() if stream is None else logging.StreamHandler(stream)
    handler.setFormatter(json_formatter() if fmt == "json" else TextFormatter())
    handler.addFilter(CaseContext())
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_refund_desk", False)]:
        root.removeHandler(old)
    handler._refund_desk = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.WARNING)
    return handler


def uvicorn_log_config() -> dict[str, Any]:
    """Uvicorn keeps its loggers but sends them through the root handler configured here."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "loggers": {
            "uvicorn": {"handlers": [], "propagate": True},
            "uvicorn.error": {"handlers": [], "propagate": True},
            "uvicorn.access": {"handlers": [], "propagate": True},
        },
    }
