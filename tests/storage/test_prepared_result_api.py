"""`Prepared.run` returns rows read as SQLAlchemy's result reads them:
`.first() .one() .scalar_one() .scalar() .scalars() .all()` and `.rowcount`, rows by position
and by name; executemany of one row and of many. The oracle is `Connection.execute` on the
same connection, same statement, same parameters."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import MultipleResultsFound, NoResultFound

from refund_desk.storage.db import Database
from refund_desk.storage.prepared import Prepared

_MD = sa.MetaData()
_T = sa.Table(
    "prepared_rows",
    _MD,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("v", sa.String(40), nullable=True),
)


@pytest.fixture()
def conn(db: Database) -> Iterator[sa.Connection]:
    with db.engine.begin() as c:
        _MD.create_all(c)
    with db.engine.connect() as c:
        yield c
        c.rollback()


def _both(conn: sa.Connection, statement: Any, params: Any = None) -> tuple[Any, Any]:
    ours = Prepared(statement).run(conn, params)
    theirs = conn.execute(statement, params)
    return ours, theirs


def _raised(fn: Any) -> type[BaseException] | None:
    try:
        fn()
    except BaseException as exc:
        return type(exc)
    return None


def test_one_on_no_rows_raises_sqlalchemys_noresultfound(conn: sa.Connection) -> None:
    statement = sa.select(_T.c.id).where(_T.c.id == -1)
    assert _raised(lambda: conn.execute(statement).one()) is NoResultFound
    assert _raised(lambda: Prepared(statement).run(conn).one()) is NoResultFound


def test_one_on_two_rows_raises_sqlalchemys_multipleresultsfound(conn: sa.Connection) -> None:
    conn.execute(sa.insert(_T), [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}])
    statement = sa.select(_T.c.id)
    assert _raised(lambda: conn.execute(statement).one()) is MultipleResultsFound
    assert _raised(lambda: Prepared(statement).run(conn).one()) is MultipleResultsFound


def test_scalar_one_on_no_rows_raises_noresultfound(conn: sa.Connection) -> None:
    statement = sa.select(_T.c.id).where(_T.c.id == -1)
    assert _raised(lambda: Prepared(statement).run(conn).scalar_one()) is NoResultFound


def test_scalars_chain_as_sqlalchemys(conn: sa.Connection) -> None:
    """`result.scalars().all()` / `.first()` / `.one()`: SQLAlchemy's ScalarResult."""
    conn.execute(sa.insert(_T), [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}])
    statement = sa.select(_T.c.v).order_by(_T.c.id)
    assert conn.execute(statement).scalars().all() == ["a", "b"]
    ours = Prepared(statement).run(conn)
    assert ours.scalars().all() == ["a", "b"]  # type: ignore[attr-defined]
    assert Prepared(statement).run(conn).scalars().first() == "a"  # type: ignore[attr-defined]


def test_first_scalar_all_and_positional_and_named(conn: sa.Connection) -> None:
    conn.execute(sa.insert(_T), [{"id": 1, "v": "a"}, {"id": 2, "v": None}])
    statement = sa.select(_T.c.id, _T.c.v).order_by(_T.c.id)
    ours, theirs = _both(conn, statement)
    theirs = theirs.all()
    assert [tuple(r) for r in ours.all()] == [tuple(r) for r in theirs]
    assert ours.first().v == theirs[0].v and ours.first()[1] == theirs[0][1]
    assert Prepared(statement).run(conn).scalar() == conn.execute(statement).scalar()
    empty = sa.select(_T.c.id).where(_T.c.id == -1)
    assert Prepared(empty).run(conn).first() is None
    assert Prepared(empty).run(conn).scalar() is None


def test_rows_readable_by_every_name_sqlalchemy_gives(conn: sa.Connection) -> None:
    """A label SQLAlchemy's row answers by name (`row._x`, `getattr(row, "from")`)."""
    statement = sa.select(sa.literal_column("1").label("_x"), sa.literal_column("2").label("from"))
    theirs = conn.execute(statement).one()
    assert (theirs._x, getattr(theirs, "from")) == (1, 2)
    ours = Prepared(statement).run(conn).one()
    assert (ours._x, getattr(ours, "from")) == (1, 2)


def test_many_rows_with_returning_return_every_row(conn: sa.Connection) -> None:
    statement = sa.insert(_T).returning(_T.c.id, _T.c.v)
    rows = [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]
    theirs = conn.execute(statement, rows).all()
    conn.rollback()
    ours = Prepared(statement).run(conn, rows)
    assert [tuple(r) for r in ours] == [tuple(r) for r in theirs] == [(1, "a"), (2, "b")]


@pytest.mark.parametrize("n", [1, 2, 5])
def test_executemany_one_and_many_rows_rowcount(conn: sa.Connection, n: int) -> None:
    """INSERT's rowcount is not compared: SQLAlchemy gives -1 for it on psycopg (it keeps
    rowcount for UPDATE and DELETE only, without `preserve_rowcount`)."""
    rows = [{"id": i, "v": f"r{i}"} for i in range(n)]
    Prepared(sa.insert(_T)).run(conn, rows)
    assert conn.execute(sa.select(sa.func.count()).select_from(_T)).scalar() == n
    conn.rollback()
    conn.execute(sa.insert(_T), rows)
    update = sa.update(_T).where(_T.c.id == sa.bindparam("k")).values(v=sa.bindparam("nv"))
    params = [{"k": i, "nv": "x"} for i in range(n)]
    assert Prepared(update).run(conn, params).rowcount == conn.execute(update, params).rowcount


def test_parameter_names_differ_between_calls(conn: sa.Connection) -> None:
    """`update(t)` with SET from the parameters (as the sandbox's `_SET_FAULT`): one
    statement, different parameter names at each call."""
    conn.execute(sa.insert(_T), [{"id": 1, "v": "a"}])
    statement = Prepared(sa.update(_T).where(_T.c.id == 1))
    assert statement.run(conn, {"v": "b"}).rowcount == 1
    assert conn.execute(sa.select(_T.c.v)).scalar() == "b"
    assert statement.run(conn, {"v": None, "id": 1}).rowcount == 1
    assert conn.execute(sa.select(_T.c.v)).scalar() is None
    assert statement.run(conn, {"v": "c"}).rowcount == 1
    assert conn.execute(sa.select(_T.c.v)).scalar() == "c"
    # an INSERT given fewer columns the second time
    ins = Prepared(sa.insert(_T))
    ins.run(conn, {"id": 2, "v": "x"})
    ins.run(conn, {"id": 3})
    assert conn.execute(sa.select(_T.c.v).where(_T.c.id == 3)).scalar() is None


def test_an_empty_executemany_list_is_as_sqlalchemys(conn: sa.Connection) -> None:
    """A list of one row runs once (no executemany), as SQLAlchemy does."""
    ins = Prepared(sa.insert(_T))
    assert ins.run(conn, [{"id": 9, "v": "one"}]).rowcount == 1
    assert conn.execute(sa.select(_T.c.v).where(_T.c.id == 9)).scalar() == "one"
