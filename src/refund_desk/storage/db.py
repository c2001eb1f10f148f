"""Engine and transactions for SQLite (one replica) and PostgreSQL (several).

Write transactions on SQLite start with `BEGIN IMMEDIATE`, so two writers never both read and
then collide at commit; WAL lets readers go on meanwhile. On PostgreSQL, writes that must be
serialized lock rows explicitly (`lock_payment`, the audit head).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import select as io_select
import tempfile
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows: SQLite's busy handler alone
    fcntl = None  # type: ignore[assignment]

from sqlalchemy import URL, Connection, Engine, bindparam, create_engine, event, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DisconnectionError
from sqlmodel import Session

from refund_desk import logs
from refund_desk.storage.models import Case, Payment
from refund_desk.storage.prepared import Prepared

_Row = TypeVar("_Row")

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
# socket, is used without a ping first (as HikariCP's "alive bypass window" does).
PING_AFTER_IDLE_SECONDS = 1.0
_IDLE_SINCE = "refund_desk.idle_since"  # in the pool's record of each connection


def _ping_when_in_doubt(engine: Engine) -> None:
    """Ping a connection taken from the pool only when it may be dead, instead of before
    every use (`pool_pre_ping`, a round trip per transaction): when it sat idle for
    `PING_AFTER_IDLE_SECONDS` or more, or when its socket has something to read while no
    query runs, which is how a server that restarted, or ended the session, says so (it
    sends its reason and closes the socket). A dead connection is replaced before use, as
    with `pool_pre_ping`. What this misses is a server that vanished without a word within
    the last second; the first statement on that connection fails, as it would had the
    server vanished a moment after a ping."""
    dialect = engine.dialect

    @event.listens_for(engine, "connect")
    @event.listens_for(engine, "checkin")
    def _idle_from_now(_dbapi_connection: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.pop(_IDLE_SINCE, None)
        if (
            idle_since is not None
            and time.monotonic() - idle_since < PING_AFTER_IDLE_SECONDS
            and _socket_quiet(dbapi_connection)
        ):
            return
        try:
            alive = dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise DisconnectionError(f"a pooled connection is dead: {exc}") from exc
        if not alive:
            raise DisconnectionError("a pooled connection is dead")


def _socket_quiet(dbapi_connection: Any) -> bool:
    """Nothing to read on an idle connection's socket (no poll here: not quiet, so ping)."""
    if not hasattr(io_select, "poll"):
        return False
    try:
        fd = dbapi_connection.fileno()
    except Exception:  # closed or broken
        return False
    poller = io_select.poll()
    poller.register(fd, io_select.POLLIN | io_select.POLLPRI)
    return not poller.poll(0)


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
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "IMMEDIATE")
        if conn.dispatch.before_cursor_execute:  # a listener sees it, as every statement
            conn.exec_driver_sql(f"BEGIN {mode}")
        else:  # straight to the driver: SQLAlchemy's path costs more than the BEGIN itself
            begin = f"BEGIN {mode}"
            try:
                conn.connection.dbapi_connection.execute(begin)
            except conn.dialect.loaded_dbapi.Error as exc:  # as SQLAlchemy's own error
                conn._handle_dbapi_exception(exc, begin, (), None, None)


# Set while a transaction must finish within a deadline (a Slack listener's, before ack()):
# on SQLite it goes before the writers that can wait.
_URGENT: ContextVar[bool] = ContextVar("urgent_write", default=False)
# Set while a job runs: its writes let the requests someone is waiting on go first.
_BACKGROUND: ContextVar[bool] = ContextVar("background_write", default=False)
# Set in a request's own context while it is served (`Database.serving`): a job the request
# runs itself (no worker in the process) writes as the request, not behind it.
_SERVING: ContextVar[bool] = ContextVar("serving_request", default=False)
# How long a background writer lets waiting requests go first before it takes its turn
# anyway: jobs slow down under an intake burst but never stop.
BACKGROUND_PATIENCE = 0.1
# While it waits, it looks whether requests are still served this soon, then twice as long
# after each look, up to this: a look costs two system calls, and looking every half a
# millisecond cost a waiting thread about 4 % of a core.
FIRST_LOOK_AFTER = 0.0005
LOOK_EVERY = 0.008
# How long a request waits for a background writer's look to end before it is served
# without saying so (`RequestsFirst.serve_begin`): a look lasts two system calls, so only a
# writer stopped in the middle of one (SIGSTOP, a debugger) is waited for this long.
SERVE_PATIENCE = 0.1


class _Turns:
    """The threads of one process, one writer at a time: urgent writers first, then the
    others in order of arrival, background writers (jobs) last, unless the oldest of them has
    waited `BACKGROUND_PATIENCE` already.

    The turn is handed straight to the next waiter, each waiting on a lock of its own: a
    release wakes one thread, not every waiting one to find that one of them may go.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy = False
        self._urgent: deque[threading.Lock] = deque()
        self._waiting: deque[threading.Lock] = deque()
        self._background: deque[tuple[float, threading.Lock]] = deque()

    def acquire(self, urgent: bool, background: bool = False, since: float | None = None) -> None:
        """`since`: when a background writer began to wait (its patience counts from then)."""
        with self._lock:
            if not self._busy:
                self._busy = True
                return
            turn = threading.Lock()
            turn.acquire()
            if urgent:
                self._urgent.append(turn)
            elif background:
                self._background.append((time.monotonic() if since is None else since, turn))
            else:
                self._waiting.append(turn)
        try:
            turn.acquire()  # released by `release`, which hands the turn over to this thread
        except BaseException:  # interrupted: leave the queue, or pass on a turn just handed over
            with self._lock:
                handed = not self._forget(turn)
            if handed:
                self.release()
            raise

    def _forget(self, turn: threading.Lock) -> bool:
        """Take a waiter out of its queue; False if it is in none (it has the turn)."""
        for queue in (self._urgent, self._waiting):
            if turn in queue:
                queue.remove(turn)
                return True
        for entry in self._background:
            if entry[1] is turn:
                self._background.remove(entry)
                return True
        return False

    def release(self) -> None:
        with self._lock:
            if self._urgent:
                self._urgent.popleft().release()  # still busy: the turn is theirs now
            elif self._background and (
                not self._waiting
                or time.monotonic() - self._background[0][0] >= BACKGROUND_PATIENCE
            ):
                self._background.popleft()[1].release()
            elif self._waiting:
                self._waiting.popleft().release()
            else:
                self._busy = False


def _background_now() -> bool:
    """Is the calling context's write a job's, which lets requests go first?"""
    return not _URGENT.get() and _BACKGROUND.get() and not _SERVING.get()


class RequestsFirst:
    """Background writers (jobs) let the requests someone is waiting on go first, across the
    processes on one host that use one database (a server, its job processes, a CLI).

    While a request is queued for capture or being captured (`serve_begin` .. `serve_end`),
    its process holds a shared `flock` of a file named for the database; a background writer
    waits until it could take that file's exclusive lock (on a descriptor of its own, so its
    own process's requests count too), for at most `BACKGROUND_PATIENCE` from its first
    look, then writes anyway: jobs slow down under an intake burst but never stop.

    On SQLite the file lies beside the database and the writer looks again once it has the
    one writer (`SqliteWriters`). On PostgreSQL the file is in the temporary directory, and
    the writer looks before its transaction begins: there is no writer to queue for, but the
    jobs' transactions take the same cores as the captures (the job processes' database
    sessions run at the server's priority, not the job processes' lower one). Without a path
    (SQLite in memory), or where the file cannot be opened, nothing waits."""

    def __init__(self, path: str | None) -> None:
        self._requests_fd: int | None = None  # held shared while this process serves requests
        self._probe_fd: int | None = None  # a background writer's look
        self._serving = 0  # requests queued or being captured in this process
        self._held = False  # the shared lock is held (it may not be: `serve_begin(anyway)`)
        self._serving_lock = threading.Lock()
        self._probing = threading.Lock()  # one background writer looks at a time
        if path and fcntl is not None:
            try:
                self._requests_fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
                self._probe_fd = os.open(path, os.O_RDWR)
            except OSError:  # another user's file, no such directory: nothing waits
                self.close()

    def wait(self, deadline: float) -> None:
        """Wait while any process serves requests, until `deadline` at most: looking again
        after half a millisecond, then less and less often (at most `LOOK_EVERY` apart), so
        that jobs waiting out an intake burst do not take its cores with their looks."""
        pause = FIRST_LOOK_AFTER
        while self.served(deadline):
            time.sleep(pause)
            pause = min(pause * 2, LOOK_EVERY)

    def served(self, deadline: float) -> bool:
        """Does a process serve requests now (and is there time left to let them go first)?
        A look at the file with an exclusive lock taken and dropped at once, on this
        writer's own descriptor, so this process's requests count too."""
        if time.monotonic() >= deadline:
            return False
        with self._probing:
            if self._probe_fd is None:  # closed
                return False
            try:
                fcntl.flock(self._probe_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(self._probe_fd, fcntl.LOCK_UN)  # held for no longer than this
            return False

    def serve_begin(self, *, anyway: bool = False) -> bool:
        """A request someone waits on is queued or being captured here; False if that could
        not be said at once (a background writer is looking: try again in a moment). Never
        blocks: the event loop calls it. `anyway`: the request is counted here even if the
        shared lock cannot be taken (a writer stopped mid-look): other processes' jobs then
        do not see it, and the next request of this process tries for the lock again."""
        with self._serving_lock:
            if not self._held and self._requests_fd is not None:
                try:
                    fcntl.flock(self._requests_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    self._held = True
                except BlockingIOError:
                    if not anyway:
                        return False
            self._serving += 1
            return True

    def serve_end(self) -> None:
        with self._serving_lock:
            self._serving -= 1
            if self._serving == 0 and self._held and self._requests_fd is not None:
                fcntl.flock(self._requests_fd, fcntl.LOCK_UN)
                self._held = False

    def close(self) -> None:
        with self._probing, self._serving_lock:  # a look lasts two system calls
            for fd in (self._requests_fd, self._probe_fd):
                if fd is not None:
                    os.close(fd)
            self._requests_fd = self._probe_fd = None
            self._held = False


POSTGRESQL_PORT = 5432
# The server on this machine, however a URL names it: by name, by a loopback address, or by
# its local socket (no host). A server on this host listening on a port is reached by all.
_THIS_HOST = "localhost"


def _host(url: URL) -> str:
    """The server's host as the file is named for it: every spelling of this machine one."""
    host = (url.host or "").strip("[]").lower()
    if host in ("", "localhost", "::1") or host.startswith("127."):
        return _THIS_HOST
    return host


def requests_first_path(url: URL) -> str:
    """The file a PostgreSQL database's processes on this host share for `RequestsFirst`:
    named for the database (user, host, port, the default one if none is given, name: not the
    driver, never the password). This machine's server is one host however it is spelled
    (`localhost`, `127.0.0.1`, `::1`, the local socket); another host's names are not
    resolved (that could wait on DNS): the processes of one deployment share its
    `DATABASE_URL`."""
    where = f"{url.username}@{_host(url)}:{url.port or POSTGRESQL_PORT}/{url.database}"
    digest = hashlib.sha256(where.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"refund-desk-{digest}.requests")


class SqliteWriters:
    """One writer at a time on a SQLite file: the threads of this process take turns (urgent
    writers first), and the processes on the file (a server and its job processes, a CLI) on
    an exclusive `flock` of a file beside it, which the kernel hands over as soon as it is
    released, instead of SQLite's busy handler, which sleeps in growing steps and lets a busy
    process starve the others.

    Urgent writers go first across processes too: each holds a shared `flock` of a second
    file (`.urgent`) from before it waits for the writer until it is done, and every other
    writer passes that file's exclusive lock (taken and dropped at once) before it waits: a
    job process's next transaction waits while a Slack listener's is waiting or running,
    instead of taking turns with it.

    Background writers (jobs) let requests go first (`RequestsFirst`, on a third file,
    `.requests`): a background writer waits for the requests before it queues for the
    writer; once it has the writer it looks again, and if requests came meanwhile it hands
    the writer back and waits for them, all of it for at most `BACKGROUND_PATIENCE` from its
    first look. A job a request runs itself (`_SERVING` in its context) is not a background
    writer. Without this a job process and a stream of intakes take turns: every capture
    waits for a whole job transaction."""

    def __init__(self, path: str | None) -> None:
        self._turns = _Turns()
        self._fd: int | None = None
        self._urgent_fd: int | None = None
        on_disk = bool(path and path != ":memory:" and fcntl is not None)
        if on_disk:
            self._fd = os.open(f"{path}.writer", os.O_RDWR | os.O_CREAT, 0o600)
            self._urgent_fd = os.open(f"{path}.urgent", os.O_RDWR | os.O_CREAT, 0o600)
        self.requests = RequestsFirst(f"{path}.requests" if on_disk else None)
        self._held_urgent = False  # only the thread whose turn it is reads or sets it

    def __enter__(self) -> None:
        urgent = _URGENT.get()
        background = _background_now()
        began = time.monotonic()
        deadline = began + BACKGROUND_PATIENCE
        while True:
            if background:
                self._wait_for_requests(deadline)
            self._take(urgent, background, began)
            if not background or not self.requests.served(deadline):
                return
            # Requests came while this job queued for the writer: it is theirs first.
            self.__exit__()

    def _take(self, urgent: bool, background: bool, began: float) -> None:
        """This process's turn, then the file's writer lock (urgent writers first)."""
        self._turns.acquire(urgent, background, since=began)
        if self._fd is None or self._urgent_fd is None:
            return
        try:
            if urgent:
                fcntl.flock(self._urgent_fd, fcntl.LOCK_SH)
                self._held_urgent = True
            else:  # the turnstile: closed while another process's urgent writer waits or runs
                fcntl.flock(self._urgent_fd, fcntl.LOCK_EX)
                fcntl.flock(self._urgent_fd, fcntl.LOCK_UN)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            if not urgent:  # never left closed, however far it got (unlocking twice is harmless)
                fcntl.flock(self._urgent_fd, fcntl.LOCK_UN)
            self._drop_urgent()
            self._turns.release()
            raise

    def _wait_for_requests(self, deadline: float) -> None:
        self.requests.wait(deadline)

    def __exit__(self, *exc: object) -> None:
        try:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            try:
                self._drop_urgent()
            finally:
                self._turns.release()

    def _drop_urgent(self) -> None:
        if self._held_urgent and self._urgent_fd is not None:
            self._held_urgent = False
            fcntl.flock(self._urgent_fd, fcntl.LOCK_UN)

    def close(self) -> None:
        self._turns.acquire(True)
        try:
            self.requests.close()
            for fd in (self._fd, self._urgent_fd):
                if fd is not None:
                    os.close(fd)
            self._fd = self._urgent_fd = None
        finally:
            self._turns.release()


@dataclass(frozen=True)
class Deployment:
    """What this deployment has configured, for code that holds only a session (a transition
    asking whether its outcome has anywhere to go). Each default is the cautious answer."""

    api_webhook: bool = True  # API outcomes without a callback go to REFUND_DESK_WEBHOOK_URL


_DEPLOYMENT = "db.deployment"  # session.info keys
_SHARED = "db.shared"
_ON_COMMIT = "db.on_commit"  # a memo (see `memo`)


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
        # PostgreSQL: each statement its own transaction (no BEGIN and COMMIT round trips).
        self._look_engine = (
            self._read_engine
            if self.is_sqlite
            else engine.execution_options(isolation_level="AUTOCOMMIT")
        )
        # SQLite has one writer at a time anyway; queueing writers here instead of in SQLite's
        # busy handler (which sleeps in growing steps) keeps latency and throughput steady.
        self._write_lock: AbstractContextManager[object] = (
            SqliteWriters(engine.url.database) if self.is_sqlite else nullcontext()
        )
        self._requests_first = (
            self._write_lock.requests
            if isinstance(self._write_lock, SqliteWriters)
            else RequestsFirst(requests_first_path(engine.url))
        )

    @classmethod
    def from_url(cls, url: str) -> Database:
        return cls(make_engine(url))

    @contextmanager
    def write(self) -> Iterator[Session]:
        """One write transaction: commits on success, rolls back on any exception."""
        if not self.is_sqlite and _background_now():  # (SQLite: its writers' queue does it)
            self._requests_first.wait(time.monotonic() + BACKGROUND_PATIENCE)
        with (
            self._write_lock,
            Session(self.engine, expire_on_commit=False, info=self._info()) as session,
            session.begin(),
        ):
            yield session

    @staticmethod
    @contextmanager
    def background() -> Iterator[None]:
        """Write transactions in this block are a job's: they let the requests someone is
        waiting on (`serving`) go first, for at most `BACKGROUND_PATIENCE` each."""
        token = _BACKGROUND.set(True)
        try:
            yield
        finally:
            _BACKGROUND.reset(token)

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """A request someone waits on is queued for capture or being captured in this block
        (the intake gate's): background writers of every process on this host let it go
        first (`RequestsFirst`). Called on the event loop; it never blocks it, and waits for
        a background writer's look for at most `SERVE_PATIENCE`."""
        requests = self._requests_first
        give_up = time.monotonic() + SERVE_PATIENCE
        while not requests.serve_begin(anyway=time.monotonic() >= give_up):
            await asyncio.sleep(0.0005)  # a background writer's look lasts two system calls
        token = _SERVING.set(True)  # seen by the request's threads (their context is a copy)
        try:
            yield
        finally:
            _SERVING.reset(token)
            requests.serve_end()

    @staticmethod
    @contextmanager
    def urgent() -> Iterator[None]:
        """Write transactions in this block must finish within a deadline (a Slack listener's
        before `ack()`): on SQLite they go before the writers that can wait (intake, jobs)."""
        token = _URGENT.set(True)
        try:
            yield
        finally:
            _URGENT.reset(token)

    @contextmanager
    def read(self) -> Iterator[Session]:
        with (
            Session(self._read_engine, expire_on_commit=False, info=self._info()) as session,
            session.begin(),
        ):
            yield session

    @contextmanager
    def look(self) -> Iterator[Connection]:
        """A read on a plain connection, for a look that wants rows, not ORM objects (about
        half the cost of `read`, whose session is built for each transaction), and whose
        statements need not see one snapshot (most are one statement): on PostgreSQL each
        runs as a transaction of its own, one round trip instead of three (BEGIN, the
        statement, COMMIT); on SQLite in one read transaction."""
        with self._look_engine.connect() as connection:
            yield connection

    def _info(self) -> dict[str, Any]:
        return {_DEPLOYMENT: self.deployment, _SHARED: self._shared}

    def dispose(self) -> None:
        self.engine.dispose()
        if isinstance(self._write_lock, SqliteWriters):
            self._write_lock.close()  # its `RequestsFirst` too
        else:
            self._requests_first.close()


_MEMO = "db.memo"  # session.info key: what one transaction remembers, gone at its end


def memo(session: Session, name: str) -> dict[Any, Any]:
    """A dict that lives as long as the session's current transaction (`Database.write` and
    `read` open one session per transaction; a session used for several forgets at each end)."""
    memos: dict[str, dict[Any, Any]] = session.info.setdefault(_MEMO, {})
    return memos.setdefault(name, {})


def remembered(session: Session, name: str) -> dict[Any, Any] | None:
    """The transaction's memo `name` if anything made it (`memo` makes it)."""
    memos: dict[str, dict[Any, Any]] | None = session.info.get(_MEMO)
    return memos.get(name) if memos else None


def plain(session: Session) -> Connection:
    """The session's connection in its transaction, for a Core statement on rows the session
    holds no changed objects of (jobs, the audit chain, a payment's lock, counts of other
    rows): the statement runs without the ORM's execution layer and without flushing the
    session's pending changes first, so a case changed several times in one transaction goes
    out as one UPDATE at the next ORM query or the commit, not one per statement in between.

    Asked of the session once per (sub)transaction and remembered (the session's own look-up
    costs more than a hot statement): a savepoint begun since is asked for afresh, so the
    session sends its `SAVEPOINT` first, and a transaction that can no longer be used (a
    failed flush) is always asked, so the session says so."""
    transaction = session.get_nested_transaction() or session.get_transaction()
    if transaction is None or not transaction.is_active:
        return session.connection()
    held = memo(session, _PLAIN)
    connection: Connection | None = held.get(transaction)
    if connection is None:
        connection = held[transaction] = session.connection()
    return connection


_PLAIN = "plain connection"


@event.listens_for(Session, "after_transaction_end")
def _forget_memo(session: Session, transaction: Any) -> None:
    if transaction.parent is None:
        session.info.pop(_MEMO, None)


def shared(session: Session, name: str) -> dict[Any, Any]:
    """A dict every transaction of the session's `Database` sees, for what never changes once
    committed (a published policy version). Put in it only what a committed transaction read
    (`on_commit`): a row this transaction wrote may still be rolled back. A session of its own
    (not from a `Database`) gets a dict for its current transaction."""
    stores: dict[str, dict[Any, Any]] | None = session.info.get(_SHARED)
    if stores is None:
        return memo(session, name)
    return stores.setdefault(name, {})


def on_commit(session: Session, fn: Callable[[], None]) -> None:
    """Run `fn` once the session's current transaction commits (never if it rolls back; a
    savepoint released inside it is not its commit)."""
    pending: list[Callable[[], None]] = memo(session, _ON_COMMIT).setdefault("fns", [])
    pending.append(fn)


@event.listens_for(Session, "after_commit")
def _run_on_commit(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint released: the transaction has not committed yet
    memos = session.info.get(_MEMO)
    pending = memos.get(_ON_COMMIT) if memos else None
    if pending:
        for fn in pending.pop("fns", ()):
            fn()


def held_get(session: Session, model: type[_Row], key: Any) -> _Row | None:
    """`session.get`, keeping the row for the rest of the transaction.

    The identity map holds rows weakly: a row read and dropped (`control(session).paused`) is
    read again by the next `get`. Rows that many steps of one transaction look at (the control
    row, a policy version, a customer's key) are kept, so each is read once per transaction.
    The caller sees what `get` gives one who kept the row: the same object, with this
    transaction's changes to it.
    """
    row = session.get(model, key)
    if row is not None:
        memo(session, "held")[id(row)] = row
    return row


class InsertIfNew:
    """`INSERT ... ON CONFLICT (key) DO NOTHING RETURNING key` on `table`, built once for each
    database: `into(session, values)` is True if this transaction inserted the row, False if
    one with that key was there (a concurrent insert of the key is waited for first). Any
    other unique violation is an error, not swallowed."""

    def __init__(self, table: Any, key: Any) -> None:
        self._statements = {
            dialect: Prepared(
                make(table).on_conflict_do_nothing(index_elements=[key]).returning(key)
            )
            for dialect, make in (("postgresql", pg_insert), ("sqlite", sqlite_insert))
        }

    def into(self, session: Session, values: dict[str, Any]) -> bool:
        statement = self._statements[session.get_bind().dialect.name]
        return statement.run(plain(session), values).first() is not None


# Built once, on the table (no `Payment` object: the row is the lock, its callers read the
# processor's facts); FOR UPDATE renders nothing on SQLite, whose writer BEGIN IMMEDIATE took.
_PAYMENTS = Payment.__table__  # type: ignore[attr-defined]
_LOCK_PAYMENT = Prepared(
    select(_PAYMENTS.c.id).where(_PAYMENTS.c.id == bindparam("payment_id")).with_for_update()
)


def lock_payment(session: Session, payment_id: str) -> bool:
    """Lock a payment's row for the rest of the transaction (SQLite: BEGIN IMMEDIATE did);
    False if we have no row for it yet."""
    return _LOCK_PAYMENT.run(plain(session), {"payment_id": payment_id}).first() is not None
