"""Messages for people, as structure: the core says *what*, each surface decides *how*.

The core (cases, governance, customers, policy) never writes a surface's markup: no Slack
mrkdwn (`<@U1>`, `*bold*`, `:emoji:`), no HTML. It builds a ``Text`` from plain strings and a
few marks with a meaning:

    Person("U1")          someone, by their id (Slack renders a mention, the CLI the id)
    Code("d3")            a command, a rule id, a hash: something to type or copy
    Strong("v4")          what the line is about
    Mark("published")     the kind of news (Slack shows an emoji; plain text drops it)
    Moment(at)            a point in time (Slack shows it in the reader's own time zone; plain
                          text writes ISO 8601 with the zone)

``bot/mrkdwn.py`` renders a ``Text`` for Slack (escaping ``&``, ``<`` and ``>`` in every
string part); ``Text.as_text()`` is the CLI's and the logs'. A ``Text`` travels in job payloads
as JSON (``to_json`` / ``from_json``); ``from_json`` also reads a plain string, which is what
jobs queued before this module held.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

MARKS = (
    "ok",
    "failed",
    "refused",
    "warning",
    "alert",
    "published",
    "rolled_back",
    "paused",
    "resumed",
    "shadow",
)


@dataclass(frozen=True)
class Person:
    id: str


@dataclass(frozen=True)
class Code:
    text: str


@dataclass(frozen=True)
class Strong:
    text: str


@dataclass(frozen=True)
class Mark:
    name: str

    def __post_init__(self) -> None:
        if self.name not in MARKS:
            raise ValueError(f"unknown mark {self.name!r}; one of {', '.join(MARKS)}")


@dataclass(frozen=True)
class Moment:
    """A point in time; an aware datetime (a naive one is taken as UTC)."""

    at: datetime

    def __post_init__(self) -> None:
        if self.at.tzinfo is None:
            object.__setattr__(self, "at", self.at.replace(tzinfo=UTC))

    def iso(self) -> str:
        """ISO 8601 with the zone, to the second: the one way exports and logs write a time."""
        return iso(self.at)


def iso(at: datetime) -> str:
    """``2026-12-05T21:21:58+00:00``: ISO 8601 with the zone (UTC when none is given)."""
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return aware.isoformat(timespec="seconds")


Part = str | Person | Code | Strong | Mark | Moment
_KINDS: dict[str, type[Person | Code | Strong | Mark | Moment]] = {
    "person": Person,
    "code": Code,
    "strong": Strong,
    "mark": Mark,
    "moment": Moment,
}
_WORDS: dict[str, type[Person | Code | Strong | Mark]] = {
    "person": Person,
    "code": Code,
    "strong": Strong,
    "mark": Mark,
}


class Text(tuple[Part, ...]):
    """An immutable sequence of parts; ``+`` appends strings, parts or other texts."""

    __slots__ = ()

    @classmethod
    def of(cls, *parts: Part | Text) -> Text:
        flat: list[Part] = []
        for part in parts:
            if isinstance(part, Text):
                flat.extend(part)
            elif part != "":
                flat.append(part)
        return cls(flat)

    def __add__(self, other: object) -> Text:
        if isinstance(other, str | Person | Code | Strong | Mark | Moment | Text):
            return Text.of(self, other)
        return NotImplemented

    def __radd__(self, other: object) -> Text:
        if isinstance(other, str | Person | Code | Strong | Mark | Moment):
            return Text.of(other, self)
        return NotImplemented

    def __contains__(self, item: object) -> bool:
        """``"tests passed" in said``: whether the text says it (in plain words)."""
        if isinstance(item, str):
            return item in self.as_text()
        return tuple.__contains__(self, item)

    def as_text(self, names: Mapping[str, str] | None = None) -> str:
        """Without markup: people by id (or by ``names[id]``), marks dropped."""
        names = names or {}
        out: list[str] = []
        skip_space = False
        for part in self:
            if isinstance(part, Mark):
                skip_space = True
                continue
            if isinstance(part, Person):
                piece = names.get(part.id, part.id)
            else:
                piece = part if isinstance(part, str) else _value(part)
            if skip_space:
                piece, skip_space = piece.lstrip(" "), False
            out.append(piece)
        return "".join(out)

    def __str__(self) -> str:
        return self.as_text()

    def to_json(self) -> list[Any]:
        return [_part_json(part) for part in self]

    @classmethod
    def from_json(cls, value: Any) -> Text:
        if value is None:
            return cls()
        if isinstance(value, str):
            return cls.of(value)
        parts: list[Part] = []
        for item in value:
            if isinstance(item, str):
                parts.append(item)
            else:
                kind, raw = item
                if kind == "moment":
                    parts.append(Moment(datetime.fromisoformat(raw)))
                else:
                    parts.append(_WORDS[kind](raw))
        return cls(parts)


def _part_json(part: Part) -> Any:
    if isinstance(part, str):
        return part
    if isinstance(part, Moment):  # to the microsecond: a payload keeps the time it was given
        return ["moment", part.at.isoformat()]
    return [next(k for k, t in _KINDS.items() if isinstance(part, t)), _value(part)]


def _value(part: Person | Code | Strong | Mark | Moment) -> str:
    if isinstance(part, Person):
        return part.id
    if isinstance(part, Moment):
        return part.iso()
    if isinstance(part, Mark):
        return part.name
    return part.text


def text(*parts: Part | Text) -> Text:
    """``text(Person(u), " published ", Strong("v4"), ".")``"""
    return Text.of(*parts)


def join(separator: str, texts: Iterable[Part | Text]) -> Text:
    out: list[Part | Text] = []
    for i, item in enumerate(texts):
        if i:
            out.append(separator)
        out.append(item)
    return Text.of(*out)


def lines(*texts: Part | Text | None) -> Text:
    """Texts on lines of their own, skipping the ``None`` ones."""
    return join("\n", [t for t in texts if t is not None])
