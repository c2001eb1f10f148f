"""Logs: one request's JSON lines end to end carry its case and correlation ids, and no
personal data; the format follows the terminal or REFUND_DESK_LOG_FORMAT; library chatter is
quiet unless -v."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from refund_desk import logs
from refund_desk.cli.main import app
from refund_desk.runtime import Runtime
from refund_desk.settings import load_settings
from tests.helpers import CUSTOMER, Harness


@pytest.fixture()
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    stream = io.StringIO()
    logs.configure(stream=stream, fmt="json")
    yield stream
    root.handlers[:] = before[0]
    root.setLevel(before[1])


def test_one_requests_json_log_names_its_case_on_every_line_and_no_email(
    runtime: Runtime, captured: io.StringIO
) -> None:
    desk = Harness(runtime)
    desk.publish()
    payment = desk.payment("30.00")
    before = len(captured.getvalue().splitlines())
    response = desk.post(desk.request(payment, "20.00", name="Ada Lovelace"))
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["status"] == "refunded"
    case_id = body["id"]
    desk.sweep()  # the outcome is told to the customer by a job
    with runtime.db.read() as session:
        from refund_desk.storage.models import Case

        correlation_id = session.get(Case, case_id).correlation_id  # type: ignore[union-attr]

    text = captured.getvalue()
    lines = [json.loads(line) for line in text.splitlines()[before:]]
    assert lines, "the request was logged"
    about = [line for line in lines if line.get("case_id") or case_id in line["message"]]
    messages = [line["message"] for line in about]
    # The events an on-call person needs: arrival, each transition, the processor call with
    # its latency, what the customer was told, and the request itself.
    assert any("received from api" in m for m in messages), messages
    assert any("-> approved" in m for m in messages), messages
    assert any("-> refunded" in m for m in messages), messages
    assert any(m.startswith("processor sandbox create_refund: ok in") for m in messages)
    assert any(m.startswith("customer told refunded") for m in messages), messages
    assert any(m.startswith("POST /api/v1/refund-requests 201") for m in messages), messages
    for line in about:
        assert line["case_id"] == case_id, line
        assert line["correlation_id"] == correlation_id, line
        assert {"time", "level", "logger", "message"} <= set(line)
    # The same id reaches the processor's metadata and the advisor's call record.
    assert desk.refunds_at_processor(payment)[0]["metadata"]["correlation_id"] == correlation_id
    with runtime.db.read() as session:
        from refund_desk.storage.models import AdvisorCall

        calls = session.scalars(select(AdvisorCall).where(AdvisorCall.case_id == case_id)).all()
    assert [c.correlation_id for c in calls] == [correlation_id]
    # No personal data anywhere in the log: not the email, the name or the message.
    assert CUSTOMER not in text and "@example.com" not in text
    assert "Lovelace" not in text and "vase" not in text


def test_an_email_that_slips_into_a_line_is_masked(captured: io.StringIO) -> None:
    logging.getLogger("refund_desk.test").warning("could not reach %s", "bob@example.org")
    line = json.loads(captured.getvalue().splitlines()[-1])
    assert line["message"] == "could not reach [email]"


def test_lines_outside_a_case_carry_no_case(captured: io.StringIO) -> None:
    with logs.about("case_1", "req_1"):
        logging.getLogger("refund_desk.test").info("inside")
    logging.getLogger("refund_desk.test").info("outside")
    inside, outside = (json.loads(x) for x in captured.getvalue().splitlines()[-2:])
    assert (inside["case_id"], inside["correlation_id"]) == ("case_1", "req_1")
    assert outside["case_id"] is None and outside["correlation_id"] is None


def test_format_follows_the_terminal_unless_chosen() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert logs.choose_format(io.StringIO(), {}) == "json"
    assert logs.choose_format(Tty(), {}) == "text"
    assert logs.choose_format(Tty(), {"REFUND_DESK_LOG_FORMAT": "json"}) == "json"
    assert logs.choose_format(io.StringIO(), {"REFUND_DESK_LOG_FORMAT": "TEXT"}) == "text"
    with pytest.raises(ValueError, match="json or text"):
        logs.choose_format(io.StringIO(), {"REFUND_DESK_LOG_FORMAT": "xml"})


def test_text_lines_name_the_case_too() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    try:
        logs.configure(stream=stream, fmt="text")
        with logs.about("case_9", "req_9"):
            logging.getLogger("refund_desk.test").info("moved")
    finally:
        root.handlers[:] = before[0]
        root.setLevel(before[1])
    line = stream.getvalue().splitlines()[-1]
    assert line.endswith("refund_desk.test: moved [case_id=case_9 correlation_id=req_9]")


def test_a_commands_output_is_its_answer_without_library_chatter(cli_db: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["audit", "verify"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok: 0 records")
    assert "alembic" not in result.stderr and "Running upgrade" not in result.stderr
    load_settings.cache_clear()
    fresh = {"DATABASE_URL": f"sqlite:///{cli_db / 'fresh.db'}"}
    verbose = runner.invoke(app, ["-v", "audit", "verify"], env=fresh)
    assert verbose.exit_code == 0, verbose.output
    assert verbose.stdout.startswith("ok: 0 records")
    assert "Running upgrade" in verbose.stderr  # asked for: the libraries speak too


def test_a_bad_log_format_is_a_clear_error(cli_db: Path) -> None:
    result = CliRunner().invoke(app, ["audit", "verify"], env={"REFUND_DESK_LOG_FORMAT": "xml"})
    assert result.exit_code == 2
    assert "REFUND_DESK_LOG_FORMAT must be json or text" in result.stderr


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_log_line_writes_its_time_in_iso_8601_with_the_zone(fmt: str) -> None:
    import re

    stream = io.StringIO()
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    try:
        logs.configure(stream=stream, fmt=fmt)
        logging.getLogger("refund_desk.test").info("hello")
    finally:
        root.handlers[:] = before[0]
        root.setLevel(before[1])
    line = stream.getvalue().splitlines()[-1]
    stamp = json.loads(line)["time"] if fmt == "json" else line.split(" ")[0]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", stamp), line
