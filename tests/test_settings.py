"""Configuration: the environment contract of DESIGN.md and how the secret is settled."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from refund_desk.settings import ConfigError, Settings, load_settings, settle_secret

CONTRACT_VARS = (
    "DATABASE_URL",
    "REFUND_DESK_SECRET",
    "REFUND_DESK_SWEEP_SECONDS",
    "REFUND_DESK_PROCESSOR",
    "SLACK_API_URL",
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_APP_TOKEN",
    "REFUND_DESK_CHANNEL",
)
PG = "postgresql+psycopg://refund:pw@db.internal:5432/refunds"
RANDOM_SECRET = "Zq3v8Kx1Lw0pR7tY2uI9oP4aS6dF5gH8jK1lZ3xC7vB0nM"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in CONTRACT_VARS:
        monkeypatch.delenv(name, raising=False)
    load_settings.cache_clear()
    yield
    load_settings.cache_clear()


def settings(url: str, secret: str | None = None) -> Settings:
    values: dict[str, str] = {"DATABASE_URL": url}
    if secret is not None:
        values["REFUND_DESK_SECRET"] = secret
    return Settings.model_validate(values)


# ---------------------------------------------------------------- SQLite: a generated secret


def test_sqlite_without_secret_generates_a_private_secret_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "desk.db"
    with caplog.at_level(logging.WARNING, logger="refund_desk.settings"):
        settled = settle_secret(settings(f"sqlite:///{db}"))

    path = tmp_path / "desk.db.secret"
    assert path.exists()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_text().strip() == settled.secret_value()
    assert len(settled.secret_value()) >= 32
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(path) in r.getMessage() for r in warnings), [r.getMessage() for r in warnings]


def test_second_settle_reads_the_same_secret(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'desk.db'}"
    first = settle_secret(settings(url))
    second = settle_secret(settings(url))
    assert first.secret_value() == second.secret_value()


def test_second_settle_does_not_warn_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'desk.db'}"
    settle_secret(settings(url))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="refund_desk.settings"):
        settle_secret(settings(url))
    assert not caplog.records


def test_secret_file_is_created_beside_a_nested_database(tmp_path: Path) -> None:
    db = tmp_path / "data" / "sub" / "desk.db"
    settle_secret(settings(f"sqlite:///{db}"))
    assert (db.parent / "desk.db.secret").exists()


def test_separate_databases_get_separate_secrets(tmp_path: Path) -> None:
    one = settle_secret(settings(f"sqlite:///{tmp_path / 'one.db'}"))
    two = settle_secret(settings(f"sqlite:///{tmp_path / 'two.db'}"))
    assert one.secret_value() != two.secret_value()


def test_sqlite_with_a_given_secret_keeps_it_and_writes_no_file(tmp_path: Path) -> None:
    settled = settle_secret(settings(f"sqlite:///{tmp_path / 'desk.db'}", RANDOM_SECRET))
    assert settled.secret_value() == RANDOM_SECRET
    assert not (tmp_path / "desk.db.secret").exists()


def test_sqlite_with_a_placeholder_secret_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="placeholder"):
        settle_secret(settings(f"sqlite:///{tmp_path / 'desk.db'}", "changeme"))
    assert not (tmp_path / "desk.db.secret").exists()


def test_in_memory_sqlite_without_secret_is_refused() -> None:
    with pytest.raises(ConfigError, match="in-memory"):
        settle_secret(settings("sqlite:///:memory:"))


# ---------------------------------------------------------------- PostgreSQL: a required secret


def test_postgres_without_secret_is_refused() -> None:
    with pytest.raises(ConfigError, match="REFUND_DESK_SECRET must be set") as info:
        settle_secret(settings(PG))
    assert "PostgreSQL" in str(info.value)
    assert "32" in str(info.value)


@pytest.mark.parametrize("placeholder", ["changeme", "CHANGEME", "secret", "", "short-but-real"])
def test_postgres_with_a_placeholder_secret_is_refused(placeholder: str) -> None:
    with pytest.raises(ConfigError, match="at least 32 characters"):
        settle_secret(settings(PG, placeholder))


def test_postgres_with_31_characters_is_refused() -> None:
    with pytest.raises(ConfigError):
        settle_secret(settings(PG, RANDOM_SECRET[:31]))


def test_postgres_with_a_long_random_secret_is_accepted() -> None:
    settled = settle_secret(settings(PG, RANDOM_SECRET))
    assert settled.secret_value() == RANDOM_SECRET
    assert settled.sqlite_path() is None


def test_secret_value_without_a_secret_raises() -> None:
    with pytest.raises(ConfigError, match="REFUND_DESK_SECRET"):
        settings(PG).secret_value()


def test_secret_is_hidden_in_repr() -> None:
    assert RANDOM_SECRET not in repr(settings(PG, RANDOM_SECRET))


# ---------------------------------------------------------------- the environment contract


def test_defaults_match_the_contract() -> None:
    s = Settings()
    assert s.database_url == "sqlite:///./refund-desk.db"
    assert s.sweep_seconds == 30
    assert s.processor == "sandbox"
    assert s.slack_api_url == "https://slack.com/api/"
    assert s.secret is None
    assert s.is_sqlite


def test_environment_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", PG)
    monkeypatch.setenv("REFUND_DESK_SWEEP_SECONDS", "2.5")
    monkeypatch.setenv("REFUND_DESK_PROCESSOR", "stripe")
    monkeypatch.setenv("SLACK_API_URL", "http://127.0.0.1:9999/api/")
    monkeypatch.setenv("REFUND_DESK_SECRET", RANDOM_SECRET)

    s = Settings()

    assert s.database_url == PG
    assert not s.is_sqlite
    assert s.sweep_seconds == 2.5
    assert s.processor == "stripe"
    assert s.slack_api_url == "http://127.0.0.1:9999/api/"
    assert s.secret_value() == RANDOM_SECRET


@pytest.mark.parametrize(
    "value", ["square", "stripe,stripe", "", "sandbox,stripe", "paypal;stripe"]
)
def test_invalid_processor_is_rejected(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("REFUND_DESK_PROCESSOR", value)
    with pytest.raises(ValidationError, match="REFUND_DESK_PROCESSOR"):
        Settings()


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("paypal", ("paypal",)),
        (" Stripe , paypal ", ("stripe", "paypal")),
        ("sandbox,paypal", ("sandbox", "paypal")),
    ],
)
def test_one_processor_or_a_list(
    monkeypatch: pytest.MonkeyPatch, value: str, names: tuple[str, ...]
) -> None:
    monkeypatch.setenv("REFUND_DESK_PROCESSOR", value)
    assert Settings().processors == names


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
def test_invalid_sweep_seconds_is_rejected(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("REFUND_DESK_SWEEP_SECONDS", value)
    with pytest.raises(ValidationError, match="REFUND_DESK_SWEEP_SECONDS"):
        Settings()


def test_load_settings_settles_the_secret_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'desk.db'}")

    loaded = load_settings()

    assert loaded.secret_value() == (tmp_path / "desk.db.secret").read_text().strip()


def test_load_settings_refuses_postgres_without_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", PG)
    with pytest.raises(ConfigError):
        load_settings()
