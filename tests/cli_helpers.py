"""Run `refund-desk` commands in process against a real SQLite file in a temporary folder."""

from __future__ import annotations

from typer.testing import CliRunner

from refund_desk.cli.main import app

runner = CliRunner()


def run(*args: str, code: int = 0) -> str:
    """A command's answer (stdout); on an expected failure, its message (stderr) too. Log
    lines go to stderr, so they never mix into an answer a script would read."""
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, result.output
    return result.stdout if code == 0 else result.output
