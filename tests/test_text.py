"""The core's words for people: structure that survives a job payload and reads plainly."""

from __future__ import annotations

import json

import pytest

from refund_desk.storage.audit import Actor
from refund_desk.text import Code, Mark, Person, Strong, Text, join, lines, text


def test_a_text_survives_a_job_payload() -> None:
    said = text(
        Mark("published"), " ", Person("U1"), " published ", Strong("v4"), " (", Code("abc"), ")."
    )
    assert Text.from_json(json.loads(json.dumps(said.to_json()))) == said


def test_a_payload_queued_as_a_plain_string_still_reads() -> None:
    assert Text.from_json("Evidence e1 checked.") == text("Evidence e1 checked.")
    assert Text.from_json(None) == text()


def test_plain_text_has_no_markup() -> None:
    said = text(
        Mark("alert"), " ", Person("U1"), ": stopped; ", Code("/refund-policy mode supervised")
    )
    assert said.as_text() == "U1: stopped; /refund-policy mode supervised"
    assert "stopped; /refund" in said


def test_a_person_acts_by_mention_and_a_program_by_name() -> None:
    assert Actor("human", "U1").who == Person("U1")
    assert Actor("cli", "ana").who == "cli:ana"
    assert text(Actor("cli", "ana").who, " published v2.").as_text() == "cli:ana published v2."


def test_joining_and_lines() -> None:
    assert join(", ", [Person("U1"), Person("U2")]).as_text() == "U1, U2"
    assert lines("a", None, text("b")).as_text() == "a\nb"
    assert (text("a") + Code("b") + "c").as_text() == "abc"


def test_an_unknown_mark_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown mark"):
        Mark("party")


def test_a_moment_reads_as_iso_8601_with_its_zone_and_survives_a_payload() -> None:
    from datetime import UTC, datetime

    from refund_desk.text import Moment

    said = text("Published ", Moment(datetime(2026, 12, 5, 21, 21, 58, 512, tzinfo=UTC)), ".")
    assert said.as_text() == "Published 2026-12-05T21:21:58+00:00."
    assert Text.from_json(json.loads(json.dumps(said.to_json()))) == said
    naive = Moment(datetime(2026, 12, 5, 21, 21))  # a naive time is UTC, and says so
    assert naive.iso() == "2026-12-05T21:21:00+00:00"
