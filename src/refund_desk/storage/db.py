"""Engine and transactions for SQLite (one replica) and PostgreSQL (several).

Write transactions on SQLite start with `BEGIN IMMEDIATE` behind one write lock per database
file (`WriteLock`), so two writers never both read and then collide at commit; WAL lets
readers go on meanwhile. On PostgreSQL, writes that must be serialized lock rows explicitly
(`lock_payment`, the case, the control row, the audit head).
"""

from __future__ import annotations

import hashlib
import os
import re
import select as io_select
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows: SQLite's busy handler alone
    fcntl = None  # type: ignore[assignment]

from sqlalchemy import URL, Connection, Engine, bindparam, create_engine, event, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DisconnectionError, OperationalError
from sqlmodel import Session

from refund_desk import logs
from refund_desk.storage.models import Case, Payment

SQLITE_BUSY_TIMEOUT_MS = 30_000


@event.listens_for(Case, "load")
def _case_loaded(case: Case, _context: Any) -> None:
    """The case a job or request is about was read: its correlation id joins the log lines."""
    logs.case_loaded(case.id, case.correlation_id)


def make_engine(url: str, *, pool_size: int = 10) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        )
        _configure_sqlite(engine)
        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    engine = create_engine(url, pool_size=pool_size, max_overflow=pool_size)
    _ping_when_in_doubt(engine)
    return engine


# A pooled PostgreSQL connection back in use within this long, with nothing waiting on its
# socket, is used without a ping first (HikariCP's "alive bypass window").
PING_AFTER_IDLE_SECONDS = 1.0
_IDLE_SINCE = "db.idle_since"  # in the pool's record of each connection


def _ping_when_in_doubt(engine: Engine) -> None:
    """Ping a connection taken from the pool only when it may be dead: idle for
    `PING_AFTER_IDLE_SECONDS` or more, or with something to read on its socket while no query
    runs (a server that restarted or ended the session sends its reason and closes it). A dead
    one is replaced before use, as with `pool_pre_ping`, which pings before every transaction:
    measured on two cores, that round trip cost PostgreSQL intake a third of its requests a
    second (docs/performance.md). What this misses is a server gone without a word within the
    last second: the first statement fails, as it would a moment after a ping."""

    @event.listens_for(engine, "connect")
    @event.listens_for(engine, "checkin")
    def _idle_from_now(_dbapi_connection: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.pop(_IDLE_SINCE, None)
        recent = idle_since is not None and time.monotonic() - idle_since < PING_AFTER_IDLE_SECONDS
        if recent and _socket_quiet(dbapi_connection):
            return
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise DisconnectionError(f"a pooled connection is dead: {exc}") from exc
        if not alive:
            raise DisconnectionError("a pooled connection is dead")


def _socket_quiet(dbapi_connection: Any) -> bool:
    """Nothing to read on an idle connection's socket (where that cannot be told: not quiet)."""
    try:
        readable, _, _ = io_select.select([dbapi_connection.fileno()], [], [], 0)
    except (OSError, ValueError, AttributeError):
        return False
    return not readable


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event emit BEGIN itself (pysqlite's own is deferred).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        # Freed space is zeroed: an erased customer's old values do not linger in the file.
        cursor.execute("PRAGMA secure_delete=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "IMMEDIATE")
        conn.exec_driver_sql(f"BEGIN {mode}")


# How long a writer that can wait (a job) lets the requests being served go first, from when it
# began to wait: the jobs slow down under an intake burst but never stop. It looks again this
# soon, then twice as long after each look, up to `LOOK_EVERY` (a look is two system calls).
PATIENCE = 0.1
FIRST_LOOK, LOOK_EVERY = 0.0005, 0.008


class ServedRequests:
    """The requests someone waits on go before the writes that can wait (the jobs'), across
    the processes of one host that use one database (a server, its job processes, a CLI).

    While a process serves one (`serving`, the intake gate's) it holds a file shared; a writer
    that can wait looks at that file (an exclusive lock taken and dropped at once, on a
    descriptor of its own, so its own process's requests count) before its transaction, for at
    most `PATIENCE`. The file lies beside a SQLite database, and in the temporary directory,
    named for the database, for PostgreSQL. It coordinates the processes that share a host's
    cores, which is what an intake burst and the jobs compete for: on another host the jobs
    take other cores. Measured on two cores: without it a job process took half a core during
    an intake burst (3-9 % with it), and intake took about half the requests a second on SQLite,
    a quarter fewer on PostgreSQL. Without a file (SQLite in memory) requests count in their
    process."""

    def __init__(self, path: str | None) -> None:
        self._lock = threading.Lock()
        self._serving = 0  # requests being served in this process
        self._held = False  # the shared lock is held
        self._fds: dict[str, int] = {}  # "serving" (held shared), "look" (a writer's look)
        if path and fcntl is not None:
            try:
                for name in ("serving", "look"):
                    self._fds[name] = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError:  # another user's file: requests count in their process only
                self.close()

    @contextmanager
    def serving(self) -> Iterator[None]:
        """A request someone waits on is queued or being captured in this block. Never blocks
        (the event loop calls it)."""
        with self._lock:
            self._serving += 1
            if not self._held and "serving" in self._fds:
                try:
                    fcntl.flock(self._fds["serving"], fcntl.LOCK_SH | fcntl.LOCK_NB)
                    self._held = True
                except BlockingIOError:  # a writer is looking this instant: the next one holds it
                    pass
        try:
            yield
        finally:
            with self._lock:
                self._serving -= 1
                if self._serving == 0 and self._held:
                    fcntl.flock(self._fds["serving"], fcntl.LOCK_UN)
                    self._held = False

    def let_go_first(self) -> None:
        """Wait while requests are served here or in another process, for `PATIENCE` at most."""
        deadline = time.monotonic() + PATIENCE
        pause = FIRST_LOOK
        while self.served() and time.monotonic() < deadline:
            time.sleep(pause)
            pause = min(pause * 2, LOOK_EVERY)

    def served(self) -> bool:
        with self._lock:
            fd = self._fds.get("look")
            if fd is None:
                return self._serving > 0
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fd, fcntl.LOCK_UN)  # held for no longer than this look
            return False

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            self._held = False


def served_requests_path(url: URL) -> str | None:
    """Where the processes using one database share `ServedRequests`' file: beside a SQLite
    file; for PostgreSQL in the temporary directory, named for the database (user, host, port,
    name: never the password; the processes of one deployment share its URL)."""
    if url.get_backend_name() == "sqlite":
        return f"{url.database}.requests" if url.database not in (None, "", ":memory:") else None
    where = f"{url.username}@{url.host}:{url.port}/{url.database}"
    digest = hashlib.sha256(where.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"refund-desk-{digest}.requests")


class WriteLock:
    """One writer at a time on a SQLite file; whoever someone waits for first.

    The threads of a process take turns on a condition; the processes on one file (a server,
    its job processes, a CLI) on an exclusive `flock` of `<file>.writer`, which the kernel
    hands over as soon as it is released (SQLite's own busy handler sleeps in growing steps
    and lets a busy process starve the others).

    An urgent writer (`Database.write(urgent=True)`: a Slack listener before its `ack()`, an
    intake's capture, a lease renewal) goes before the waiting threads of its process, and
    holds `<file>.urgent` shared from before it waits until it is done; every other writer
    passes that file's exclusive lock (taken and dropped at once) first, so another process's
    next transaction waits for it too. Without a file (SQLite in memory) only the threads take
    turns."""

    def __init__(self, path: str | None) -> None:
        self._turn = threading.Condition()
        self._busy = False
        self._urgent_waiting = 0
        self._fds: dict[str, int] = {}  # writer, urgent
        if path and path != ":memory:" and fcntl is not None:
            for name in ("writer", "urgent"):
                self._fds[name] = os.open(f"{path}.{name}", os.O_RDWR | os.O_CREAT, 0o600)

    @contextmanager
    def held(self, urgent: bool) -> Iterator[None]:
        with self._turn:
            self._urgent_waiting += urgent
            try:
                while self._busy or (not urgent and self._urgent_waiting):
                    self._turn.wait()
            finally:
                self._urgent_waiting -= urgent
            self._busy = True
        try:
            with self._file_lock(urgent):
                yield
        finally:
            with self._turn:
                self._busy = False
                self._turn.notify_all()

    @contextmanager
    def _file_lock(self, urgent: bool) -> Iterator[None]:
        writer, turnstile = self._fds.get("writer"), self._fds.get("urgent")
        if writer is None or turnstile is None:
            yield
            return
        if urgent:
            fcntl.flock(turnstile, fcntl.LOCK_SH)
        else:  # closed while another process's urgent writer waits or writes
            try:
                fcntl.flock(turnstile, fcntl.LOCK_EX)
            finally:  # never left closed, however far it got (unlocking twice is harmless)
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            fcntl.flock(writer, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(writer, fcntl.LOCK_UN)
        finally:
            if urgent:
                fcntl.flock(turnstile, fcntl.LOCK_UN)

    def close(self) -> None:
        with self._turn:  # no writer of this process holds the files
            while self._busy:
                self._turn.wait()
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()


PURGE_LOCK_TIMEOUT = "2s"
_KEPT = re.compile(r"(\d+) dead row versions cannot be removed yet")


class PurgeBusy(Exception):
    """Old row versions could not be removed now (readers, a long transaction): try later."""


@dataclass(frozen=True)
class Deployment:
    """What this deployment has configured, for code that holds only a session (a transition
    asking whether its outcome has anywhere to go). Each default is the cautious answer."""

    api_webhook: bool = True  # API outcomes without a callback go to REFUND_DESK_WEBHOOK_URL


_DEPLOYMENT = "db.deployment"  # session.info keys
_SHARED = "db.shared"
_ON_COMMIT = "db.on_commit"


def deployment(session: Session) -> Deployment:
    """The deployment of the `Database` that opened the session (the defaults otherwise)."""
    found: Deployment | None = session.info.get(_DEPLOYMENT)
    return found if found is not None else Deployment()


class Database:
    """Hands out short transactions. Never keep one open across a network call."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.deployment = Deployment()  # set by whoever builds the app around it
        self._shared: dict[str, dict[Any, Any]] = {}  # see `shared`
        self.is_sqlite = engine.dialect.name == "sqlite"
        self._read_engine = (
            engine.execution_options(sqlite_begin="DEFERRED") if self.is_sqlite else engine
        )
        # PostgreSQL: each statement of a look its own transaction (one round trip, not three:
        # BEGIN, the statement, ROLLBACK); SQLite: a read transaction beside the writer.
        self._look_engine = (
            self._read_engine
            if self.is_sqlite
            else engine.execution_options(isolation_level="AUTOCOMMIT")
        )
        self._write_lock = WriteLock(engine.url.database) if self.is_sqlite else None
        self._requests = ServedRequests(served_requests_path(engine.url))

    @classmethod
    def from_url(cls, url: str) -> Database:
        return cls(make_engine(url))

    @property
    def one_writer(self) -> bool:
        """Does the database take one writer at a time (SQLite), so that more threads writing
        in one process only wait for each other?"""
        return self.is_sqlite

    def serving(self) -> AbstractContextManager[None]:
        """Around a request someone waits on, from when it queues for capture until it is
        captured (the intake gate's): the jobs' writes let it go first (`ServedRequests`).
        Never blocks."""
        return self._requests.serving()

    @contextmanager
    def write(self, *, urgent: bool = False) -> Iterator[Session]:
        """One write transaction: commits on success, rolls back on any exception. `urgent`:
        someone waits for it (a Slack listener before its `ack()`, an intake's client, a lease
        renewal before the lease runs out): on SQLite it goes before the writers that can wait
        (the jobs). Measured: intake with a job process beside the server takes about half the
        requests a second when its captures queue with the jobs' transactions. A write that
        can wait lets the requests being served go first (`ServedRequests`)."""
        if not urgent:
            self._requests.let_go_first()
        lock = self._write_lock.held(urgent) if self._write_lock else nullcontext()
        with (
            lock,
            Session(self.engine, expire_on_commit=False, info=self._info()) as session,
            session.begin(),
        ):
            yield session

    @contextmanager
    def read(self) -> Iterator[Session]:
        with (
            Session(self._read_engine, expire_on_commit=False, info=self._info()) as session,
            session.begin(),
        ):
            yield session

    @contextmanager
    def look(self) -> Iterator[Connection]:
        """A read on a plain connection, for a look that wants rows, not ORM objects, whose
        statements need not see one snapshot (most are one statement)."""
        with self._look_engine.connect() as connection:
            yield connection

    def checkpoint(self) -> bool:
        """SQLite keeps old pages in its write-ahead log until a checkpoint: fold it in now
        (freed space is zeroed: `secure_delete`), so erased values are gone from the files
        too. False if readers kept some of it; nothing to do on PostgreSQL."""
        if not self.is_sqlite:
            return True
        raw = self.engine.raw_connection()
        try:
            busy = raw.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            raw.close()
        return busy is not None and not busy[0]

    def purge_old_versions(self, table: str) -> None:
        """Make the old versions of `table`'s rows unrecoverable from the files, outside any
        transaction (an erased customer's destroyed key). PostgreSQL keeps them as dead tuples,
        and plain `VACUUM` frees a tuple without overwriting its bytes (measured: they stay in
        the page's free space), so the table is rewritten (`VACUUM FULL`: one short exclusive
        lock, which `lock_timeout` keeps from queueing in front of writers behind a long
        transaction). SQLite overwrites freed space (`secure_delete`) but keeps old pages in its
        write-ahead log until a checkpoint, folded in here. Raises PurgeBusy when it could not
        finish now."""
        if self.is_sqlite:
            if not self.checkpoint():
                raise PurgeBusy("readers kept the write-ahead log from being folded in")
            return
        kept: list[int] = []

        def tally(notice: Any) -> None:  # VERBOSE says how many dead versions it had to keep
            found = _KEPT.search(str(notice.message_detail or ""))
            if found:
                kept.append(int(found.group(1)))

        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            driver = conn.connection.driver_connection
            driver.add_notice_handler(tally)  # type: ignore[union-attr]
            try:
                conn.execute(text(f"SET lock_timeout = '{PURGE_LOCK_TIMEOUT}'"))
                conn.execute(text(f"VACUUM (FULL, VERBOSE) {table}"))
            except OperationalError as exc:
                raise PurgeBusy(f"could not rewrite {table}: {exc.orig}") from exc
            finally:
                driver.remove_notice_handler(tally)  # type: ignore[union-attr]
                conn.execute(text("RESET lock_timeout"))
        if any(kept):  # a transaction older than the erasure still sees them
            raise PurgeBusy(f"{sum(kept)} old row versions of {table} are still in use")

    def _info(self) -> dict[str, Any]:
        return {_DEPLOYMENT: self.deployment, _SHARED: self._shared}

    def dispose(self) -> None:
        self.engine.dispose()
        self._requests.close()
        if self._write_lock is not None:
            self._write_lock.close()


def shared(session: Session, name: str) -> dict[Any, Any]:
    """A dict every transaction of the session's `Database` sees, for what never changes once
    committed (a published policy version). Put in it only what a committed transaction read
    (`on_commit`): a row this transaction wrote may still be rolled back. A session of its own
    (not from a `Database`) gets a dict of its own."""
    stores: dict[str, dict[Any, Any]] = session.info.setdefault(_SHARED, {})
    return stores.setdefault(name, {})


def on_commit(session: Session, fn: Callable[[], None]) -> None:
    """Run `fn` once the session's current transaction commits (never if it rolls back; a
    savepoint released inside it is not its commit)."""
    session.info.setdefault(_ON_COMMIT, []).append(fn)


_LOADED = "db.loaded"


@event.listens_for(Session, "loaded_as_persistent")
def _hold_what_was_read(session: Session, row: Any) -> None:
    """A session holds what it read until it closes (as SQLAlchemy's strong identity map did):
    `Database` opens one session per transaction, so `session.get` reads a row once per
    transaction, however many steps look at it; a lock still reads it afresh
    (`populate_existing`). Without this, a row nobody kept a reference to (the control row,
    a customer's key) was read again by every step: 7 reads of the control row per refund."""
    session.info.setdefault(_LOADED, []).append(row)


@event.listens_for(Session, "after_commit")
def _run_on_commit(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint released: the transaction has not committed yet
    for fn in session.info.pop(_ON_COMMIT, ()):
        fn()


@event.listens_for(Session, "after_rollback")
def _forget_on_commit(session: Session) -> None:
    if not session.in_nested_transaction():
        session.info.pop(_ON_COMMIT, None)


class InsertIfNew:
    """`INSERT ... ON CONFLICT (key) DO NOTHING RETURNING key` on `table`, for each database:
    `into(session, values)` is True if this transaction inserted the row, False if one with
    that key was there (a concurrent insert of the key is waited for first). Any other
    unique violation is an error, not swallowed."""

    def __init__(self, table: Any, key: Any) -> None:
        self._statements = {
            dialect: make(table).on_conflict_do_nothing(index_elements=[key]).returning(key)
            for dialect, make in _INSERTS.items()
        }

    def into(self, session: Session, values: dict[str, Any]) -> bool:
        connection = session.connection()
        statement = self._statements[connection.dialect.name]
        return connection.execute(statement, values).first() is not None


_INSERTS: dict[str, Any] = {"postgresql": pg_insert, "sqlite": sqlite_insert}


def upsert(db: Database) -> Any:
    """The database's own `insert`, which has `on_conflict_do_update`."""
    return _INSERTS[db.engine.dialect.name]


_PAYMENTS = Payment.__table__  # type: ignore[attr-defined]
_LOCK_PAYMENT = (
    select(_PAYMENTS.c.id).where(_PAYMENTS.c.id == bindparam("payment_id")).with_for_update()
)


def lock_payment(session: Session, payment_id: str) -> bool:
    """Lock a payment's row for the rest of the transaction (SQLite: BEGIN IMMEDIATE did);
    False if we have no row for it yet."""
    found = session.connection().execute(_LOCK_PAYMENT, {"payment_id": payment_id})
    return found.first() is not None
