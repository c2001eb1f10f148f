"""What every command group shares: settings, the runtime, the acting admin, failing clearly.

Heavy modules are imported inside the functions so that `refund-desk --help` stays fast.
"""

from __future__ import annotations

import getpass
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
        fail(str(exc), 2)


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
        return file.read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror}")
    except UnicodeDecodeError:
        fail(f"cannot read {file}: it is not UTF-8 text")


@contextmanager
def progress(label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr when it is a terminal; otherwise nothing is drawn.

    Yields `advance(done, total)`; long work calls it as it goes (total 0: not known)."""
    if not sys.stderr.isatty():
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total if total > 0 else None)

        yield advance
