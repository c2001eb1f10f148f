"""Shared fixtures: real databases (a SQLite file and, where it runs, PostgreSQL), a desk.

Each test gets a fresh, migrated database: SQLite copies a migrated template file; PostgreSQL
creates a database from a migrated template. In CI (`CI=true`) a skipped test is a failure.
"""

from __future__ import annotations

import itertools
import os
import queue
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from refund_desk import logs
from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.runtime import Runtime, build
from refund_desk.settings import Settings, load_settings
from refund_desk.storage.db import Database
from refund_desk.storage.migrate import upgrade
from tests.helpers import Harness, published

TEST_SECRET = "test-secret-" + "x" * 40
PG_URL = os.environ.get("REFUND_DESK_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
FIXTURES = Path(__file__).parent / "fixtures"
_counter = itertools.count()


class SimulatedCrash(BaseException):
    """Stands in for a power cut inside one test process (the real one exits the process)."""


def _raise_crash() -> None:
    raise SimulatedCrash()


# ---------------------------------------------------------------- CI: skips fail


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if os.environ.get("CI", "").lower() in ("1", "true", "yes") and skipped:
        if reporter:
            reporter.write_line(
                f"CI: {len(skipped)} test(s) skipped; every test is required in CI", red=True
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# ---------------------------------------------------------------- SQLite


@pytest.fixture(autouse=True)
def _no_case_named_in_the_log_context() -> Iterator[None]:
    """Each test starts with no case named in its thread's log context: a test that captures
    a case in its own thread names it there, as a request's thread does, and the requests of
    a later test (whose test client copies the calling thread's context) would inherit it."""
    logs.bind(None, None)
    yield
    logs.bind(None, None)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "template.db"
    engine = Database.from_url(f"sqlite:///{path}").engine
    upgrade(engine)
    engine.dispose()
    return path


def fresh_sqlite(template: Path, directory: Path) -> str:
    target = directory / f"refund-desk-{next(_counter)}.db"
    shutil.copyfile(template, target)
    return f"sqlite:///{target}"


# ---------------------------------------------------------------- PostgreSQL


def _pg_admin_engine():  # type: ignore[no-untyped-def]
    return create_engine(PG_URL, isolation_level="AUTOCOMMIT")


def _pg_test_url(name: str) -> str:
    return make_url(PG_URL).set(database=name).render_as_string(hide_password=False)


class PgDatabases:
    """This process's test databases, copies of its migrated template. `CREATE DATABASE` and
    `DROP DATABASE` each wait on the server's disk for a few tenths of a second, so a thread
    makes the next copy while a test runs and drops the used ones after it, off the tests'
    path. Names carry this process's pid: parallel workers (pytest-xdist) never share one."""

    AHEAD = 1  # copies made before they are asked for

    def __init__(self, template: str) -> None:
        self.template = template
        self._admin = _pg_admin_engine()
        self._ready: queue.Queue[str | BaseException] = queue.Queue()
        self._work: queue.PriorityQueue[tuple[int, int, str | None]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._thread = threading.Thread(target=self._run, name="pg-databases", daemon=True)
        self._thread.start()
        for _ in range(self.AHEAD):
            self._ask()

    def _ask(self) -> None:  # a copy first (a test may wait for it), drops after
        self._work.put((0, next(self._order), None))

    def _run(self) -> None:
        while True:
            _, _, item = self._work.get()
            if item == "":  # stop
                return
            try:
                with self._admin.connect() as conn:
                    if item is None:
                        name = f"rd_t_{os.getpid()}_{next(_counter)}"
                        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"'))
                        self._ready.put(name)
                    else:
                        conn.execute(text(f'DROP DATABASE IF EXISTS "{item}" WITH (FORCE)'))
            except BaseException as exc:  # handed to the test that waits for the copy
                if item is None:
                    self._ready.put(exc)

    def take(self) -> str:
        """A fresh database's name; it is the caller's until `drop`."""
        self._ask()
        got = self._ready.get(timeout=120)
        if isinstance(got, BaseException):
            raise got
        return got

    def drop(self, name: str) -> None:
        """Drop it soon (its connections are ended then)."""
        self._work.put((1, next(self._order), name))

    def close(self) -> None:
        self._work.put((2, next(self._order), ""))
        self._thread.join(timeout=120)
        with self._admin.connect() as conn:
            while not self._ready.empty():
                name = self._ready.get()
                if isinstance(name, str):
                    conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self._admin.dispose()


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    try:
        admin = _pg_admin_engine()
        with admin.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:  # no server here: say so; CI turns the skip into a failure
        pytest.skip(f"PostgreSQL is not reachable at {PG_URL} ({type(exc).__name__})")
    name = f"rd_tpl_{os.getpid()}"
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine = Database.from_url(_pg_test_url(name)).engine
    upgrade(engine)
    engine.dispose()
    yield name
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def pg_databases(pg_template: str) -> Iterator[PgDatabases]:
    databases = PgDatabases(pg_template)
    yield databases
    databases.close()


@pytest.fixture()
def pg_url(pg_databases: PgDatabases) -> Iterator[str]:
    name = pg_databases.take()
    yield _pg_test_url(name)
    pg_databases.drop(name)


# ---------------------------------------------------------------- either database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_db_url(request: pytest.FixtureRequest, sqlite_template: Path, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return fresh_sqlite(sqlite_template, tmp_path)
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture()
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    return fresh_sqlite(sqlite_template, tmp_path)


@pytest.fixture()
def db(any_db_url: str) -> Iterator[Database]:
    """A `Database` on each real database (PostgreSQL alone: `pg_db`)."""
    database = Database.from_url(any_db_url)
    yield database
    database.dispose()


@pytest.fixture()
def pg_db(pg_url: str) -> Iterator[Database]:
    database = Database.from_url(pg_url)
    yield database
    database.dispose()


def make_settings(url: str, **extra: object) -> Settings:
    return Settings.model_validate(
        {"DATABASE_URL": url, "REFUND_DESK_SECRET": TEST_SECRET, **extra}
    )


def make_runtime(url: str, **extra: object) -> Runtime:
    db = Database.from_url(url)
    sandbox = SandboxProcessor(db, crash=_raise_crash)
    sandbox.honour_idempotency_keys = False  # exactly-once must come from our record alone
    return build(make_settings(url, **extra), db=db, processor=sandbox)


@pytest.fixture()
def runtime(sqlite_url: str) -> Iterator[Runtime]:
    rt = make_runtime(sqlite_url)
    yield rt
    rt.db.dispose()


@pytest.fixture()
def any_runtime(any_db_url: str) -> Iterator[Runtime]:
    rt = make_runtime(any_db_url)
    yield rt
    rt.db.dispose()


@pytest.fixture()
def pg_runtime(pg_url: str) -> Iterator[Runtime]:
    rt = make_runtime(pg_url)
    yield rt
    rt.db.dispose()


@pytest.fixture()
def desk(any_runtime: Runtime) -> Harness:
    """A desk on each real database, with the acme policy published."""
    return published(any_runtime)


# ---------------------------------------------------------------- the CLI


@pytest.fixture()
def cli_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.delenv("REFUND_DESK_SECRET", raising=False)
    load_settings.cache_clear()
    yield tmp_path
    load_settings.cache_clear()
