"""`Prepared`: the driver gets exactly the SQL and parameters `Connection.execute` would send
(UTC datetimes, JSON with unicode and NULLs, booleans, numbers), and rows come back with the
same values and Python types, on SQLite and PostgreSQL.

What `Prepared` sends is caught where it builds it (`_Plan.parameters`, `_Plan.sql`); what
SQLAlchemy sends, by a listener on a second engine on the same database (a listener on the
engine `Prepared` runs on would send it down SQLAlchemy's path)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from refund_desk.storage import prepared
from refund_desk.storage.db import Database, make_engine
from refund_desk.storage.prepared import Prepared
from refund_desk.storage.types import UTCDateTime

_MD = sa.MetaData()
_T = sa.Table(
    "prepared_types",
    _MD,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("at", UTCDateTime(), nullable=True),
    sa.Column("naive", sa.DateTime(), nullable=True),
    sa.Column("day", sa.Date(), nullable=True),
    sa.Column("doc", sa.JSON, nullable=True),
    sa.Column("flag", sa.Boolean, nullable=True),
    sa.Column("amount", sa.BigInteger, nullable=True),
    sa.Column("price", sa.Numeric(12, 2), nullable=True),
    sa.Column("name", sa.String(80), nullable=True),
    sa.Column("body", sa.Text, nullable=True),
)

ROWS: list[dict[str, Any]] = [
    {
        "id": 1,
        "at": datetime(2026, 3, 1, 12, 30, 5, 123456, tzinfo=timezone(timedelta(hours=5))),
        "naive": datetime(2026, 3, 1, 1, 2, 3),
        "day": date(2026, 2, 28),
        "doc": {"ünï": "cödé ✓ 日本語 \u2028", "n": [1, 2.5, None, True], "e": {}},
        "flag": True,
        "amount": 2**40,
        "price": Decimal("12.30"),
        "name": "Zoë",
        "body": "line\nbreak 'quote' %s %(x)s ?",
    },
    {
        "id": 2,
        "at": datetime(2026, 3, 1, 0, 0, tzinfo=UTC),
        "naive": None,
        "day": None,
        "doc": None,
        "flag": False,
        "amount": None,
        "price": None,
        "name": None,
        "body": None,
    },
    {"id": 3, "doc": ["a", "ä"], "flag": None, "at": None},
]


@pytest.fixture()
def engines(db: Database) -> Iterator[tuple[sa.Engine, sa.Engine, list[Any]]]:
    with db.engine.begin() as c:
        _MD.create_all(c)
    oracle = make_engine(db.engine.url.render_as_string(hide_password=False))
    seen: list[Any] = []

    def catch(_c: Any, _cur: Any, sql: str, params: Any, _ctx: Any, many: bool) -> None:
        if not sql.startswith("BEGIN"):
            seen.append((sql, params))

    event.listen(oracle, "before_cursor_execute", catch)
    yield db.engine, oracle, seen
    oracle.dispose()


@pytest.fixture()
def sent(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    caught: list[Any] = []
    build = prepared._Plan.parameters

    def parameters(plan: Any, given: Any) -> Any:
        out = build(plan, given)
        caught.append((plan.sql, out))
        return out

    monkeypatch.setattr(prepared._Plan, "parameters", parameters)
    return caught


def _normal(params: Any) -> Any:
    def value(v: Any) -> Any:
        return ("json", v.obj) if type(v).__name__ in ("Json", "Jsonb") else v

    if isinstance(params, dict):
        return {k: value(v) for k, v in params.items()}
    return tuple(value(v) for v in params)


def _typed(rows: Any) -> list[list[tuple[type, Any]]]:
    return [[(type(v), v) for v in r] for r in rows]


def test_inserts_send_what_sqlalchemy_sends(engines: Any, sent: list[Any]) -> None:
    ours_engine, oracle, seen = engines
    statement = sa.insert(_T)
    for row in ROWS:
        with ours_engine.connect() as c:
            before = len(sent)
            Prepared(statement).run(c, row)
            assert len(sent) == before + 1, "not run with the driver's cursor"
            c.rollback()
        with oracle.connect() as c:
            c.execute(statement, row)
            c.rollback()
        assert sent[-1][0] == seen[-1][0]
        assert _normal(sent[-1][1]) == _normal(seen[-1][1]), row["id"]


def test_executemany_sends_what_sqlalchemy_sends(engines: Any, sent: list[Any]) -> None:
    ours_engine, oracle, seen = engines
    rows = [{"id": 10 + i, "doc": {"k": f"ü{i}"}, "at": ROWS[0]["at"]} for i in range(3)]
    with ours_engine.connect() as c:
        Prepared(sa.insert(_T)).run(c, rows)
        c.rollback()
    with oracle.connect() as c:
        c.execute(sa.insert(_T), rows)
        c.rollback()
    ours = [p for s, p in sent]
    assert sent[-1][0] == seen[-1][0]
    assert [_normal(p) for p in ours] == [_normal(p) for p in seen[-1][1]]


def test_reads_return_the_same_values_and_types(engines: Any, sent: list[Any]) -> None:
    ours_engine, oracle, seen = engines
    with ours_engine.begin() as c:
        columns = _T.c.keys()  # the names (iterating `_T.c` gives the columns)
        c.execute(sa.insert(_T), [{**dict.fromkeys(columns), **r} for r in ROWS])
    statements = [
        sa.select(_T).order_by(_T.c.id),
        sa.select(_T.c.doc, _T.c.at, _T.c.flag).where(_T.c.flag.is_(True)),
        sa.select(_T.c.id).where(_T.c.at >= sa.bindparam("since")).order_by(_T.c.id),
        sa.select(
            sa.func.count(),
            sa.func.coalesce(sa.func.sum(_T.c.amount), 0),
            sa.func.max(_T.c.at),
            sa.func.count().filter(_T.c.flag.is_(False)),
        ),
        sa.select(
            sa.select(_T.c.doc).where(_T.c.id == 1).scalar_subquery().label("doc1"),
            sa.select(_T.c.at).where(_T.c.id == 99).scalar_subquery().label("missing_at"),
        ),
        sa.select(_T.c.name, _T.c.body).where(_T.c.name == sa.bindparam("who")),
        sa.update(_T).where(_T.c.id == 1).values(flag=False).returning(_T.c.id, _T.c.at),
    ]
    params = {
        "since": datetime(2026, 2, 28, 23, 0, tzinfo=timezone(timedelta(hours=-3))),
        "who": "Zoë",
    }
    for statement in statements:
        keys = {k: v for k, v in params.items() if k in str(statement)}
        with ours_engine.connect() as c:
            before = len(sent)
            ours = Prepared(statement).run(c, keys)
            assert len(sent) == before + 1, "not run with the driver's cursor"
            c.rollback()
        with oracle.connect() as c:
            result = c.execute(statement, keys)
            theirs = result.all()
            c.rollback()
        assert _typed(ours) == _typed(theirs), str(statement)
        assert sent[-1][0] == seen[-1][0]
        assert _normal(sent[-1][1]) == _normal(seen[-1][1])
        if theirs:
            names = result.keys()  # a result's column names
            for name in names:
                assert getattr(ours[0], name) == getattr(theirs[0], name), name


def test_json_null_and_sql_null_as_sqlalchemy_stores_them(engines: Any) -> None:
    """JSON None is stored as SQLAlchemy stores it (JSON 'null'), a missing value as SQL NULL."""
    ours_engine, oracle, _ = engines
    is_sql_null = sa.select(_T.c.id).where(_T.c.doc.is_(None)).order_by(_T.c.id)
    found = []
    for engine, run in (
        (ours_engine, lambda c, p: Prepared(sa.insert(_T)).run(c, p)),
        (oracle, lambda c, p: c.execute(sa.insert(_T), p)),
    ):
        with engine.begin() as c:
            c.execute(sa.delete(_T))
            run(c, {"id": 1, "doc": None})
            run(c, {"id": 2})
        with engine.connect() as c:
            found.append(c.execute(is_sql_null).scalars().all())
    assert found[0] == found[1]


_U = sa.Table(
    "prepared_other",
    _MD,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.String(80), nullable=True),
    sa.Column("MixedCase", sa.Integer, nullable=True),
)


def test_rows_are_named_as_sqlalchemy_names_them(engines: Any) -> None:
    """Row names (`_fields`) equal the result's keys, and each name reads the same value."""
    ours_engine, _, _ = engines
    with ours_engine.begin() as c:
        c.execute(sa.insert(_T), [{"id": 1, "name": "a"}])
        c.execute(sa.insert(_U), [{"id": 1, "name": "b", "MixedCase": 7}])
    statements = [
        sa.select(_T.c.id, _U.c.id).where(_T.c.id == _U.c.id),
        sa.select(_T.c.name, _U.c.name, _U.c.MixedCase).where(_T.c.id == _U.c.id),
        sa.select(sa.func.count(), sa.func.max(_T.c.id), sa.func.coalesce(sa.func.sum(_T.c.id), 0)),
        sa.select(_T.c.id.label("Id"), (_T.c.id + 1).label("next")),
        sa.select(_T.c.id, _T.c.id),
        sa.text('SELECT id, name AS "Who" FROM prepared_types'),
    ]
    for statement in statements:
        with ours_engine.connect() as c:
            ours = Prepared(statement).run(c).one()
            result = c.execute(statement)
            keys = list(result.keys())
            theirs = result.one()
        assert tuple(ours) == tuple(theirs), str(statement)
        assert list(ours._fields) == keys, (str(statement), ours._fields, keys)
