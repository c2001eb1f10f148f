"""One typed place for configuration: the environment of DESIGN.md's external contract.

Everything is optional; the defaults give the embedded set-up (SQLite beside the working
directory, sandbox processor, offline advisor). `load_settings()` also settles the secret:
generated into a 0600 file beside a SQLite database, required with PostgreSQL.
"""

from __future__ import annotations

import logging
import os
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

log = logging.getLogger(__name__)

PLACEHOLDER_SECRETS = {"", "changeme", "change-me", "secret", "placeholder", "xxx", "todo"}
MIN_SECRET_LENGTH = 32
PROCESSORS = ("sandbox", "stripe", "paypal")


class ConfigError(Exception):
    """A start-up problem the admin must fix; the message says how."""


def _env(name: str, default: Any = None, **limits: Any) -> Any:
    """A setting read from the environment variable `name`."""
    return Field(default, validation_alias=name, **limits)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=None, extra="ignore", populate_by_name=True)

    database_url: str = _env("DATABASE_URL", "sqlite:///./refund-desk.db")
    slack_bot_token: SecretStr | None = _env("SLACK_BOT_TOKEN")
    slack_signing_secret: SecretStr | None = _env("SLACK_SIGNING_SECRET")
    slack_app_token: SecretStr | None = _env("SLACK_APP_TOKEN")
    slack_api_url: str = _env("SLACK_API_URL", "https://slack.com/api/")
    # Sign in with Slack for the desk on the web (OpenID Connect): the app's client id and
    # secret (its Basic Information page), where Slack's OpenID Connect lives (its issuer; the
    # demo points it at its emulator), and the workspace whose people may sign in (an ID token
    # of another team is refused; unset: any team the app is installed in).
    slack_client_id: str | None = _env("SLACK_CLIENT_ID")
    slack_client_secret: SecretStr | None = _env("SLACK_CLIENT_SECRET")
    slack_oidc_issuer: str = _env("SLACK_OIDC_ISSUER", "https://slack.com")
    slack_team_id: str | None = _env("SLACK_TEAM_ID")
    channel: str | None = _env("REFUND_DESK_CHANNEL")
    sweep_seconds: float = _env("REFUND_DESK_SWEEP_SECONDS", 30.0, gt=0)
    # Threads per replica running the jobs its requests create (default: 1 on SQLite, 2 else).
    worker_threads: int | None = _env("REFUND_DESK_WORKER_THREADS", ge=1, le=64)
    # Processes apart from the HTTP server that run the jobs (`serve --job-processes N`); 0:
    # the server's own threads run them.
    job_processes: int = _env("REFUND_DESK_JOB_PROCESSES", 0, ge=0, le=64)
    # Intake requests a replica captures at once (`web/admission.py`); the rest wait their
    # turn on the event loop, holding no thread and no connection. Default: 1 with job
    # processes and the sandbox processor; no limit when the replica's threads run the jobs
    # or the processor is reached over the network (Stripe); 0: no limit.
    intake_concurrency: int | None = _env("REFUND_DESK_INTAKE_CONCURRENCY", ge=0, le=64)
    secret: SecretStr | None = _env("REFUND_DESK_SECRET")
    # One processor, or several for a merchant whose customers pay with each: `stripe,paypal`.
    processor: str = _env("REFUND_DESK_PROCESSOR", "sandbox")
    paypal_client_id: str | None = _env("PAYPAL_CLIENT_ID")
    paypal_client_secret: SecretStr | None = _env("PAYPAL_CLIENT_SECRET")
    paypal_api_base: str = _env("PAYPAL_API_BASE", "https://api-m.paypal.com")
    paypal_webhook_id: str | None = _env("PAYPAL_WEBHOOK_ID")
    stripe_api_key: SecretStr | None = _env("STRIPE_API_KEY")
    stripe_api_base: str | None = _env("STRIPE_API_BASE")
    stripe_webhook_secret: SecretStr | None = _env("STRIPE_WEBHOOK_SECRET")
    openai_api_key: SecretStr | None = _env("OPENAI_API_KEY")
    openai_base_url: str | None = _env("OPENAI_BASE_URL")
    model: str | None = _env("REFUND_DESK_MODEL")
    smtp_url: str | None = _env("SMTP_URL")
    mail_from: str | None = _env("REFUND_DESK_FROM")
    webhook_secret: SecretStr | None = _env("REFUND_DESK_WEBHOOK_SECRET")
    email_secret: SecretStr | None = _env("REFUND_DESK_EMAIL_SECRET")
    # Customer channels: where evidence files live (default: `evidence` beside the SQLite
    # file), the public base of links we send (appeals, evidence), the integrator's outcome
    # endpoint, platform webhook secrets, and helpdesk API URLs (credentials in the URL).
    evidence_dir: Path | None = _env("REFUND_DESK_EVIDENCE_DIR")
    public_url: str = _env("REFUND_DESK_PUBLIC_URL", "http://127.0.0.1:8000")
    webhook_url: str | None = _env("REFUND_DESK_WEBHOOK_URL")
    # A request's callback_url must reach a public host unless this is on (local set-ups).
    allow_private_callbacks: bool = _env("REFUND_DESK_ALLOW_PRIVATE_CALLBACKS", False)
    shopify_secret: SecretStr | None = _env("SHOPIFY_WEBHOOK_SECRET")
    zendesk_secret: SecretStr | None = _env("ZENDESK_WEBHOOK_SECRET")
    gorgias_secret: SecretStr | None = _env("GORGIAS_WEBHOOK_SECRET")
    zendesk_api_url: SecretStr | None = _env("ZENDESK_API_URL")
    gorgias_api_url: SecretStr | None = _env("GORGIAS_API_URL")
    # During a rotation each inbound webhook secret has a previous one, accepted beside it
    # until the sender uses the new one everywhere; then the *_PREVIOUS variable is unset.
    stripe_webhook_secret_previous: SecretStr | None = _env("STRIPE_WEBHOOK_SECRET_PREVIOUS")
    shopify_secret_previous: SecretStr | None = _env("SHOPIFY_WEBHOOK_SECRET_PREVIOUS")
    zendesk_secret_previous: SecretStr | None = _env("ZENDESK_WEBHOOK_SECRET_PREVIOUS")
    gorgias_secret_previous: SecretStr | None = _env("GORGIAS_WEBHOOK_SECRET_PREVIOUS")
    email_secret_previous: SecretStr | None = _env("REFUND_DESK_EMAIL_SECRET_PREVIOUS")
    # Operations: logs, personal data kept no longer than this after a case closed, tracing.
    log_format: str | None = _env("REFUND_DESK_LOG_FORMAT")  # json | text; read by logs.configure
    retention_days: int = _env("REFUND_DESK_RETENTION_DAYS", 730, ge=1)
    otlp_endpoint: str | None = _env("OTEL_EXPORTER_OTLP_ENDPOINT")
    # Not in the public contract: a lease must outlive the processor's timeout.
    lease_seconds: float | None = _env("REFUND_DESK_LEASE_SECONDS", gt=0)

    @field_validator("processor")
    @classmethod
    def _processors(cls, value: str) -> str:
        names = [n.strip().lower() for n in value.split(",") if n.strip()]
        unknown = [n for n in names if n not in PROCESSORS]
        if not names or unknown or len(set(names)) != len(names):
            raise ValueError(
                f"REFUND_DESK_PROCESSOR is {value!r}: name one or more of "
                f"{', '.join(PROCESSORS)}, each once, separated by commas"
            )
        if {"sandbox", "stripe"} <= set(names):
            raise ValueError(
                "REFUND_DESK_PROCESSOR: the sandbox stands in for Stripe; list one of them"
            )
        return ",".join(names)

    @property
    def processors(self) -> tuple[str, ...]:
        return tuple(self.processor.split(","))

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    def sqlite_path(self) -> Path | None:
        """The database file, or None for PostgreSQL."""
        if not self.is_sqlite:
            return None
        raw = self.database_url.split("///", 1)[1] if "///" in self.database_url else ""
        return Path(raw).expanduser().resolve() if raw and raw != ":memory:" else None

    def evidence_path(self) -> Path:
        """Evidence files: the configured folder, else `evidence` beside the database file."""
        if self.evidence_dir is not None:
            return self.evidence_dir.expanduser().resolve()
        db = self.sqlite_path()
        return (db.parent if db else Path.cwd()) / "evidence"

    def webhook_secrets(self, name: str) -> list[str]:
        """The current secret and, during a rotation, the previous one: either is accepted.
        `name` is the field of the current one (`shopify_secret`, `stripe_webhook_secret`...)."""
        found = [getattr(self, name), getattr(self, f"{name}_previous")]
        return [s.get_secret_value() for s in found if s is not None and s.get_secret_value()]

    def secret_value(self) -> str:
        """The deployment secret; `load_settings` guarantees it is set."""
        if self.secret is None:
            raise ConfigError("REFUND_DESK_SECRET is not set")
        return self.secret.get_secret_value()


def _is_placeholder(value: str) -> bool:
    return value.strip().lower() in PLACEHOLDER_SECRETS or len(value.strip()) < MIN_SECRET_LENGTH


def settle_secret(settings: Settings) -> Settings:
    """Make sure the settings carry a usable secret, or fail with a sentence an admin can act on."""
    if settings.secret is not None and not _is_placeholder(settings.secret.get_secret_value()):
        return settings
    if not settings.is_sqlite:
        raise ConfigError(
            "REFUND_DESK_SECRET must be set to a random value of at least "
            f"{MIN_SECRET_LENGTH} characters when DATABASE_URL points at PostgreSQL; "
            'generate one with: python -c "import secrets; print(secrets.token_urlsafe(48))"'
        )
    if settings.secret is not None:
        raise ConfigError(
            f"REFUND_DESK_SECRET looks like a placeholder (under {MIN_SECRET_LENGTH} characters "
            "or a stock value); unset it to use a generated one, or set a random value"
        )
    db = settings.sqlite_path()
    if db is None:
        raise ConfigError("an in-memory SQLite database needs REFUND_DESK_SECRET")
    path = db.with_name(db.name + ".secret")
    if path.exists():
        value = path.read_text().strip()
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        value = secrets.token_urlsafe(48)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(value + "\n")
        log.warning("generated a new REFUND_DESK_SECRET and stored it in %s (mode 0600)", path)
    return settings.model_copy(update={"secret": SecretStr(value)})


@lru_cache(maxsize=1)
def load_settings() -> Settings:
    return settle_secret(Settings())
