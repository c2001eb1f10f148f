"""The hot paths' Core statements, run with the database driver's own cursor.

SQLAlchemy's `Connection.execute` spends 40-130 µs of CPU per statement around the driver's own
work (a cache key for the statement, an execution context, a result with its metadata):
measured in one process, a third of an intake request's CPU and most of what its nine
statements cost. `Prepared` keeps SQLAlchemy for what it is for here, the SQL and the types:
it compiles a Core statement with SQLAlchemy's compiler once per database and set of
parameter names, and runs it with the same SQL, the same parameters and the same type
conversions, in the caller's transaction, on that connection's driver cursor. Rows come back
as SQLAlchemy's rows; a database error comes back as SQLAlchemy's exception
(`IntegrityError` and the rest), through SQLAlchemy's own handler, which also discards a
connection the error shows to be dead.

SQLAlchemy's own path runs the statement instead, with the same results, when:

- the compiled statement needs what only SQLAlchemy's execution context does (Python-side
  column defaults, `IN` lists expanded per call);
- the engine has listeners on its statements (tracing with OpenTelemetry, a test or a bench
  counting statements): they see every statement, as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.engine.result import result_tuple
from sqlalchemy.exc import MultipleResultsFound, NoResultFound
from sqlalchemy.sql import Executable

Params = Mapping[str, Any]


class Rows(list[Any]):
    """A statement's rows (SQLAlchemy's `Row`, by position or by name), with the `Result`
    methods the callers use."""

    rowcount: int = -1

    def first(self) -> Any:
        return self[0] if self else None

    def one(self) -> Any:
        if not self:
            raise NoResultFound("No row was found when one was required")
        if len(self) > 1:
            raise MultipleResultsFound("Multiple rows were found when exactly one was required")
        return self[0]

    def scalar_one(self) -> Any:
        return self.one()[0]

    def scalar(self) -> Any:
        return self[0][0] if self else None

    def scalars(self) -> Rows:
        """The first column of each row, with `.first()` and `.all()` as SQLAlchemy's."""
        return Rows(row[0] for row in self)

    def all(self) -> list[Any]:
        return list(self)


def _row_type(names: list[str]) -> Any:
    """SQLAlchemy's own row, read by position or by any name, made from a sequence."""
    return result_tuple(names)


class _Plan:
    """One statement compiled for one dialect and one set of parameter names."""

    __slots__ = ("binders", "binds", "compiled", "names", "order", "results", "row", "sql")

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        self.sql: str = compiled.string
        self.order: tuple[str, ...] | None = (
            tuple(compiled.positiontup) if compiled.positional else None
        )
        self.binders: dict[str, Callable[[Any], Any]] = dict(compiled._bind_processors)
        # Each parameter sent, in order: the key and name it is given by, its bind, its
        # converter. None where SQLAlchemy builds them with more than that (escaped names,
        # parameters it collected while compiling): then `construct_params` does.
        by_name = {name: bind for bind, name in compiled.bind_names.items()}
        self.names: tuple[str, ...] = self.order if self.order is not None else tuple(by_name)
        simple = not compiled.escaped_bind_names and not getattr(
            compiled, "_collected_params", None
        )
        self.binds: list[tuple[str, str, Any, Callable[[Any], Any] | None]] | None = (
            [
                (by_name[name].key, name, by_name[name], self.binders.get(name))
                for name in self.names
            ]
            if simple and set(self.names) == set(by_name)
            else None
        )
        columns = compiled._result_columns
        self.row: Any = _row_type([c[0] for c in columns]) if columns else None
        # Result converters, by column: known once the driver has described a result.
        self.results: list[Callable[[Any], Any] | None] | None = None

    @classmethod
    def make(cls, statement: Executable, dialect: Dialect, names: Sequence[str]) -> _Plan | None:
        """The plan, or None where SQLAlchemy's execution context has work to do."""
        compiled: Any = statement.compile(  # type: ignore[attr-defined]
            dialect=dialect, column_keys=list(names)
        )
        # (Columns SQL sets, `attempt + 1`, are only fetched back for the ORM: no work here.)
        context_work = (
            compiled.insert_prefetch,
            compiled.update_prefetch,
            compiled.post_compile_params,
            compiled.literal_execute_params,
        )
        return None if any(context_work) else cls(compiled)

    def parameters(self, given: Params) -> Any:
        """What the driver is sent for `given`, as SQLAlchemy builds it (`construct_params`,
        then each type's converter), read from a table made once per plan."""
        if self.binds is None:  # what SQLAlchemy keeps aside for itself: its own way
            return self._as_sqlalchemy_builds(given)
        values = []
        for key, name, bind, convert in self.binds:
            if key in given:
                value = given[key]
            elif name in given:
                value = given[name]
            elif bind.required:  # SQLAlchemy's own error for a missing value
                return self.compiled.construct_params(given)
            else:
                value = bind.effective_value if bind.callable else bind.value
            values.append(value if convert is None else convert(value))
        if self.order is not None:
            return tuple(values)
        return dict(zip(self.names, values, strict=True))

    def _as_sqlalchemy_builds(self, given: Params) -> Any:
        values = self.compiled.construct_params(given)
        binders = self.binders
        if self.order is not None:
            return tuple(
                binders[name](values[name]) if name in binders else values[name]
                for name in self.order
            )
        return {
            name: binders[name](value) if name in binders else value
            for name, value in values.items()
        }

    def convert(self, cursor: Any, dialect: Dialect) -> Rows:
        """The rows of the statement just run (none for a write without RETURNING)."""
        described = cursor.description
        if described is None:
            return Rows()
        raw = cursor.fetchall()
        converters, make = self.results, self.row
        if converters is None or make is None:  # the first result: both set, row type first
            types = [c[3] for c in self.compiled._result_columns]  # none for `text()`
            make = make or _row_type([d[0] for d in described])
            converters = [
                t._cached_result_processor(dialect, d[1])
                for t, d in zip(types, described, strict=False)
            ]
            self.row, self.results = make, converters
        if any(converters):
            return Rows(
                make([f(v) if f is not None else v for f, v in zip(converters, r, strict=True)])
                for r in raw
            )
        return Rows(make(r) for r in raw)


class Prepared:
    """A Core statement built once (at import), run in the caller's transaction:
    `STATEMENT.run(connection, params)` (or a list of parameter dicts, for many rows)."""

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        self._plans: dict[tuple[str, tuple[str, ...]], _Plan | None] = {}
        # One thread compiles a plan; the others that ran the statement first at the same
        # moment wait for it. SQLAlchemy memoizes on the statement while compiling it, and
        # a CI run crashed (a segmentation fault) with eight threads compiling one statement.
        self._compiling = threading.Lock()

    def run(self, connection: Connection, params: Params | Sequence[Params] | None = None) -> Rows:
        many: list[Params] | None = list(params) if isinstance(params, list | tuple) else None
        first: Params = (many[0] if many else params) or {}  # type: ignore[assignment]
        if many is not None and len(many) < 2:  # one row: one execute, as SQLAlchemy does
            many = None
        dispatch = connection.dispatch  # the engine's listeners and the connection's own
        if dispatch.before_cursor_execute or dispatch.after_cursor_execute:
            return self._as_sqlalchemy(connection, params)
        dialect = connection.dialect
        key = (dialect.name, tuple(sorted(first)))
        try:
            plan = self._plans[key]
        except KeyError:
            plan = self._plan(key, dialect)
        if plan is None or (many is not None and plan.row is not None):
            # (many rows RETURNING: SQLAlchemy batches them into one INSERT to return them)
            return self._as_sqlalchemy(connection, params)
        if not connection.in_transaction():
            connection.begin()  # as SQLAlchemy would begin it (SQLite: our BEGIN)
        try:  # a parameter SQLAlchemy would refuse: its StatementError, as it raises it
            values = (
                [plan.parameters(p) for p in many] if many is not None else plan.parameters(first)
            )
        except Exception as exc:
            connection._handle_dbapi_exception(exc, plan.sql, params, None, None)
            raise  # not reached: the handler raises
        dbapi_connection: Any = connection.connection.dbapi_connection
        cursor = dbapi_connection.cursor()
        try:
            if many is not None:
                cursor.executemany(plan.sql, values)
            else:
                cursor.execute(plan.sql, values)
            rows = plan.convert(cursor, dialect)
            rows.rowcount = cursor.rowcount
            return rows
        except BaseException as exc:
            # As SQLAlchemy's own execute: the driver's errors as SQLAlchemy's exceptions, a
            # connection an error (or an interrupt mid-statement) leaves unusable discarded.
            connection._handle_dbapi_exception(exc, plan.sql, values, cursor, None)
            raise  # not reached for what the handler raises itself
        finally:
            cursor.close()

    def _plan(self, key: tuple[str, tuple[str, ...]], dialect: Dialect) -> _Plan | None:
        """The plan for `key`, compiled once: on the first run, by one thread at a time."""
        with self._compiling:
            if key not in self._plans:
                self._plans[key] = _Plan.make(self.statement, dialect, key[1])
            return self._plans[key]

    def _as_sqlalchemy(
        self, connection: Connection, params: Params | Sequence[Params] | None
    ) -> Rows:
        result = connection.execute(self.statement, params)
        rows = Rows(result.all() if result.returns_rows else ())
        rows.rowcount = result.rowcount
        return rows
