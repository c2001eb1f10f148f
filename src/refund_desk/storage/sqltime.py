"""Time in SQL, the same answer on SQLite and PostgreSQL: the UTC day of a timestamp and the
seconds between two. Figures over many cases (the desk's insights) group and order by these
in the database instead of reading every row.

SQLite keeps a `UTCDateTime` as naive UTC text ("2026-05-01 09:30:00.000000"), PostgreSQL as
`timestamptz`: each construct compiles to what its dialect reads.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, String
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ColumnElement
from sqlalchemy.sql.functions import FunctionElement


class utc_day(FunctionElement[str]):
    """The UTC date of a timestamp column as text, ``YYYY-MM-DD``."""

    type = String()
    inherit_cache = True
    name = "utc_day"


@compiles(utc_day)
def _utc_day_sqlite(element: utc_day, compiler: Any, **kw: Any) -> str:
    (column,) = list(element.clauses)
    return f"substr({compiler.process(column, **kw)}, 1, 10)"


@compiles(utc_day, "postgresql")
def _utc_day_pg(element: utc_day, compiler: Any, **kw: Any) -> str:
    (column,) = list(element.clauses)
    return f"to_char(({compiler.process(column, **kw)}) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"


class seconds_between(FunctionElement[float]):
    """``later - earlier`` in seconds (a float), for two timestamp columns."""

    type = Float()
    inherit_cache = True
    name = "seconds_between"


@compiles(seconds_between)
def _seconds_sqlite(element: seconds_between, compiler: Any, **kw: Any) -> str:
    earlier, later = (compiler.process(c, **kw) for c in element.clauses)
    return f"((julianday({later}) - julianday({earlier})) * 86400.0)"


@compiles(seconds_between, "postgresql")
def _seconds_pg(element: seconds_between, compiler: Any, **kw: Any) -> str:
    earlier, later = (compiler.process(c, **kw) for c in element.clauses)
    return f"EXTRACT(EPOCH FROM ({later} - {earlier}))"


def day_of(column: Any) -> ColumnElement[str]:
    return utc_day(column)


def seconds(earlier: Any, later: Any) -> ColumnElement[float]:
    return seconds_between(earlier, later)
