"""What every command group shares: settings, the runtime, the acting admin, failing clearly.

Heavy modules are imported inside the functions so that `refund-desk --help` stays fast.
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

from refund_desk.settings import ConfigError, Settings, load_settings

if TYPE_CHECKING:
    from refund_desk.payments.sandbox import SandboxProcessor
    from refund_desk.runtime import Runtime
    from refund_desk.storage.audit import Actor


def settings() -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def open_runtime(migrate: bool = True) -> Runtime:
    from refund_desk.runtime import build

    return build(settings(), migrate=migrate)


def cli_actor() -> Actor:
    from refund_desk.storage.audit import Actor

    return Actor("cli", getpass.getuser())


def fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def sandbox() -> SandboxProcessor:
    runtime = open_runtime()
    if runtime.sandbox is None:
        fail("the sandbox processor is not in use (REFUND_DESK_PROCESSOR)")
    return runtime.sandbox


def read_text(file: Path) -> str:
    try:
        return file.read_text()
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror}")
