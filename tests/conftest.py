"""Shared fixtures: real databases (a SQLite file and, where it runs, PostgreSQL), a desk.

Each test gets a fresh, migrated database: SQLite copies a migrated template file; PostgreSQL
creates a database from a migrated template. In CI (`CI=true`) a skipped test is a failure.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Callable, Iterator
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
    url = make_url(PG_URL).set(database=name)
    engine = Database.from_url(url.render_as_string(hide_password=False)).engine
    upgrade(engine)
    engine.dispose()
    yield name
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture()
def pg_url(pg_template: str) -> Iterator[str]:
    name = f"rd_t_{os.getpid()}_{next(_counter)}"
    admin = _pg_admin_engine()
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"'))
    url = make_url(PG_URL).set(database=name)
    yield url.render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


# ---------------------------------------------------------------- either database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_db_url(request: pytest.FixtureRequest, sqlite_template: Path, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return fresh_sqlite(sqlite_template, tmp_path)
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture()
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    return fresh_sqlite(sqlite_template, tmp_path)


def make_settings(url: str, **extra: object) -> Settings:
    return Settings.model_validate(
        {"DATABASE_URL": url, "REFUND_DESK_SECRET": TEST_SECRET, **extra}
    )


def make_runtime(url: str) -> Runtime:
    db = Database.from_url(url)
    sandbox = SandboxProcessor(db, crash=_raise_crash)
    sandbox.honour_idempotency_keys = False  # exactly-once must come from our record alone
    return build(make_settings(url), db=db, processor=sandbox)


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


# ---------------------------------------------------------------- the CLI


@pytest.fixture()
def cli_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.delenv("REFUND_DESK_SECRET", raising=False)
    load_settings.cache_clear()
    yield tmp_path
    load_settings.cache_clear()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_runtimes(
    request: pytest.FixtureRequest, sqlite_template: Path, tmp_path: Path
) -> Iterator[Callable[[], Runtime]]:
    """Fresh runtimes on new databases of one kind (SQLite, PostgreSQL): `make()` gives one
    more, for runs of one flow to be compared."""
    made: list[Runtime] = []
    dbs: list[str] = []
    kind = request.param
    template = request.getfixturevalue("pg_template") if kind == "postgres" else None

    def make() -> Runtime:
        if kind == "sqlite":
            url = fresh_sqlite(sqlite_template, tmp_path)
        else:
            name = f"rd_fresh_{os.getpid()}_{next(_counter)}"
            admin = _pg_admin_engine()
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
            admin.dispose()
            dbs.append(name)
            url = make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
        rt = make_runtime(url)
        made.append(rt)
        return rt

    make.kind = kind  # type: ignore[attr-defined]
    yield make
    for rt in made:
        rt.db.dispose()
    if dbs:
        admin = _pg_admin_engine()
        with admin.connect() as conn:
            for name in dbs:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
