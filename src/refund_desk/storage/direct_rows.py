"""Rows a hot transaction reads, changes and writes without the ORM's unit of work.

A refund's job runs two write transactions around the processor's call (advise, decide and
reserve; then record the answer). In each, the ORM loaded the case, the control row and the
execution into the session and flushed their changes through its unit of work: measured in one
process on SQLite, a lock, a change and a flush of a case cost about 270 µs of CPU against
about 40 µs for the same SELECT and UPDATE on the driver's cursor (`storage/prepared.py`), and
these transactions hold SQLite's one writer while they run. A person's click records its
approval in one short transaction before Slack's `ack()`, on the same rows.

A transaction that asks for it (`use_direct_rows(session)`, at its start) gets these rows as
*direct rows*: the model's own class (every attribute as the ORM gives it, the same types),
read with one `SELECT` by primary key and never put in the session. The transaction remembers
each such row once (`load` again gives the same object, as the session's identity map would)
with the values it read, and writes what changed, one `UPDATE` of the changed columns:

- before the transaction commits (and before a savepoint is released);
- before an ORM statement runs in the session while it autoflushes (not inside
  `no_autoflush`), as the ORM flushes its own pending changes first, so a query sees them;
- in `flush_if_pending` (here), for the rows its test picks out, before a count on a plain
  connection.

A new row (`add`) is inserted at once, with every column. A row whose `UPDATE` matches no row
raises SQLAlchemy's `StaleDataError`, as the ORM's flush does. Changes made to a JSON value in
place are not seen, as with the ORM's plain JSON columns: assign a new value.

A direct row must not be handed to the session (`session.add` would insert it again and fail
on its primary key): code that may hold either kind says `stage(session, row)`, which adds an
ORM row to the session and leaves a direct row to its transaction. A savepoint rolled back in
a transaction that holds direct rows makes them unusable (the ORM would expire its rows; these
cannot be): any further `load` or write raises rather than write values the database took back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import bindparam, event, insert, inspect, orm, select, update
from sqlalchemy.orm.exc import StaleDataError
from sqlmodel import Session

from refund_desk.storage.db import memo, plain, remembered
from refund_desk.storage.prepared import Prepared

_Row = TypeVar("_Row")

_ROWS = "direct rows"  # memo: (model, key) -> _Held
_ON = "direct rows on"  # memo: present while the transaction uses direct rows
_LOST = "direct rows lost"  # memo: a savepoint rolled back over them


class _Layout:
    """A model's columns and its statements by primary key, built once per model."""

    def __init__(self, model: type[Any]) -> None:
        mapper = inspect(model)
        table = mapper.local_table
        (pk,) = mapper.primary_key
        self.keys: tuple[str, ...] = tuple(p.key for p in mapper.column_attrs)
        self.column_keys: dict[str, str] = {p.key: p.columns[0].key for p in mapper.column_attrs}
        self.pk: str = mapper.get_property_by_column(pk).key
        self.new: Any = mapper.class_manager.new_instance
        by_key = pk == bindparam("key_")
        columns = [mapper.get_property(k).columns[0] for k in self.keys]
        self.read = Prepared(select(*columns).where(by_key))
        self.lock = Prepared(select(*columns).where(by_key).with_for_update())
        self.change = Prepared(update(table).where(by_key))  # SET: the columns given
        self.add = Prepared(insert(table))

    def make(self, values: dict[str, Any]) -> Any:
        """An instance of the model holding `values`, as the ORM builds one it loads, outside
        any session."""
        row = self.new()
        row.__dict__.update(values)  # the instance's state, as a load fills it
        return row

    def values(self, row: Any) -> dict[str, Any]:
        return {k: getattr(row, k) for k in self.keys}


_LAYOUTS: dict[type[Any], _Layout] = {}


def _layout(model: type[Any]) -> _Layout:
    layout = _LAYOUTS.get(model)
    if layout is None:
        layout = _LAYOUTS[model] = _Layout(model)
    return layout


@dataclass
class _Held:
    row: Any
    layout: _Layout
    stored: dict[str, Any]  # each column as the database has it in this transaction


def use_direct_rows(session: Session) -> None:
    """This transaction reads its case, execution and control rows as direct rows."""
    memo(session, _ON)["on"] = True


def uses_direct_rows(session: Session) -> bool:
    return bool(remembered(session, _ON))


def load(
    session: Session, model: type[_Row], key: Any, *, lock: bool = False, fresh: bool = False
) -> _Row | None:
    """The row of `model` with primary key `key`, as a direct row of this transaction (None if
    there is none). Read once per transaction; `fresh` reads it again (with this transaction's
    changes written first), into the same object. `lock`: `FOR UPDATE` on PostgreSQL (SQLite
    renders none: its writer, taken at `BEGIN IMMEDIATE`, excludes the others)."""
    rows = _rows(session)
    held: _Held | None = rows.get((model, key))
    if held is not None and not fresh:
        row: _Row = held.row
        return row
    if held is not None:
        _write(session, held)
    layout = held.layout if held is not None else _layout(model)
    statement = layout.lock if lock else layout.read
    found = statement.run(plain(session), {"key_": key}).first()
    if found is None:
        return None
    values = dict(zip(layout.keys, found, strict=True))
    if held is not None:
        held.row.__dict__.update(values)
        held.stored = dict(values)
        return held.row
    row = layout.make(values)
    rows[(model, key)] = _Held(row, layout, dict(values))
    return row


def get(session: Session, model: type[_Row], key: Any) -> _Row | None:
    """`session.get`, or a direct row in a transaction that uses them."""
    if uses_direct_rows(session):
        return load(session, model, key)
    return session.get(model, key)


def forget(session: Session, model: type[Any], key: Any) -> None:
    """The transaction changed the row another way (the ORM, a statement): its direct row,
    if it holds one, is written if it changed, then dropped; the next `load` reads it anew."""
    rows: dict[tuple[type[Any], Any], _Held] | None = remembered(session, _ROWS)
    held = rows.get((model, key)) if rows else None
    if rows and held is not None:
        _write(session, held)
        del rows[(model, key)]


def add(session: Session, row: Any) -> None:
    """A new row: inserted at once as a direct row in a transaction that uses them (every
    column, as the model holds it), else added to the session."""
    if not uses_direct_rows(session):
        session.add(row)
        return
    layout = _layout(type(row))
    values = layout.values(row)
    layout.add.run(plain(session), {layout.column_keys[k]: v for k, v in values.items()})
    _rows(session)[(type(row), values[layout.pk])] = _Held(row, layout, values)


def is_direct(session: Session, row: Any) -> bool:
    rows: dict[tuple[type[Any], Any], _Held] | None = remembered(session, _ROWS)
    if not rows:
        return False
    held = rows.get((type(row), getattr(row, _layout(type(row)).pk, None)))
    return held is not None and held.row is row


def stage(session: Session, row: Any) -> None:
    """`row` changed in this transaction: an ORM row is added to the session; a direct row
    is written with the transaction's next write."""
    if not is_direct(session, row):
        session.add(row)


def write(session: Session, pick: Callable[[object], bool] | None = None) -> None:
    """Write what changed in this transaction's direct rows (those `pick` picks out, if given)."""
    rows: dict[tuple[type[Any], Any], _Held] | None = remembered(session, _ROWS)
    if not rows:
        return
    for held in rows.values():
        if pick is None or pick(held.row):
            _write(session, held)


def flush_if_pending(session: Session, pending: Callable[[object], bool]) -> None:
    """Write first what this transaction holds new or changed of the rows `pending` picks
    out (flushing the session, and writing its direct rows): a count read with `plain` then
    sees them. Otherwise nothing is written, and the other changes wait for the commit."""
    if any(pending(row) for row in (*session.new, *session.dirty)):
        session.flush()
    write(session, pending)


def _write(session: Session, held: _Held) -> None:
    _usable(session)
    layout, stored, row = held.layout, held.stored, held.row
    changed = {}
    for key in layout.keys:
        value = getattr(row, key)
        before = stored[key]
        if value is not before and value != before:
            changed[key] = value
    if not changed:
        return
    params = {layout.column_keys[k]: v for k, v in changed.items()}
    params["key_"] = stored[layout.pk]
    done = layout.change.run(plain(session), params)
    if done.rowcount == 0:  # as the ORM's flush says it
        raise StaleDataError(
            f"UPDATE statement on table '{type(row).__tablename__}' expected to update "
            "1 row(s); 0 were matched."
        )
    stored.update(changed)


def _rows(session: Session) -> dict[tuple[type[Any], Any], _Held]:
    _usable(session)
    return memo(session, _ROWS)


def _usable(session: Session) -> None:
    if remembered(session, _LOST):
        raise RuntimeError(
            "a savepoint was rolled back over this transaction's direct rows: their values "
            "may no longer be the database's; roll the transaction back"
        )


# Listened to on every session (a look-up where no direct rows are held).


@event.listens_for(orm.Session, "before_commit")
def _write_before_commit(session: Session) -> None:
    write(session)


@event.listens_for(orm.Session, "do_orm_execute")
def _write_before_orm_statement(state: orm.ORMExecuteState) -> None:
    session = state.session
    if session.autoflush:  # as the ORM flushes its own changes (not in `no_autoflush`)
        write(session)  # type: ignore[arg-type]


@event.listens_for(orm.Session, "after_soft_rollback")
def _lost_in_savepoint(session: Session, previous: orm.SessionTransaction) -> None:
    if previous.nested and remembered(session, _ROWS):
        memo(session, _LOST)["lost"] = True
