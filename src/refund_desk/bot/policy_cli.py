"""`refund-desk policy …` beyond validate/test: the admin's and CI's side of the lifecycle.

The same services as `/refund-policy`; the actor is ``cli:<os user>`` and there is no lead
check (the CLI is the admin's, who also publishes the very first version). When Slack is
configured, each change is also announced in the policy channel (a queued Slack call that the
server's sweeps deliver).
"""

from __future__ import annotations

import getpass
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from sqlmodel import Session

    from refund_desk.storage.audit import Actor


def _actor() -> Actor:
    from refund_desk.storage.audit import Actor

    return Actor("cli", getpass.getuser())


def _runtime() -> Any:
    from refund_desk.bot.cli import _runtime as runtime

    return runtime()


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def _source(runtime: Any, target: str) -> tuple[str, str]:
    """(label, YAML) for a file path or a published version ``vN``."""
    from refund_desk.cases.drafts import parse_ref, source_of

    if target.lower().startswith("v") and target[1:].isdigit():
        with runtime.db.read() as session:
            return target, source_of(session, parse_ref(target, allow=("version",)))
    try:
        return Path(target).name, Path(target).read_text()
    except OSError as exc:
        _fail(f"cannot read {target}: {exc.strerror}")
        raise


def _change(runtime: Any, act: Callable[[Session, Actor], Any]) -> None:
    """Run one change with its audit record and (with Slack) its announcement."""
    from refund_desk.bot.slack.policy_jobs import announce
    from refund_desk.bot.slack.surface import slack_configured
    from refund_desk.cases.errors import CaseError

    try:
        with runtime.db.write() as session:
            change = act(session, _actor())
            if change.announce and slack_configured(runtime.settings):
                announce(session, runtime.settings.channel, change.announce)
    except CaseError as exc:
        _fail(exc.message)
    typer.echo(_plain(change.reply))


def _plain(text: str) -> str:
    actor = _actor()
    return text.replace(f"<@{actor.id}>", str(actor)).replace("*", "")


def backtest_and_record(
    runtime: Any, label: str, source: str, days: int, csv: Path | None, *, audited: bool = True
) -> Any:
    """Run a backtest (streaming), record it (the gate's evidence), return the run.

    ``audited=False`` when a publish follows at once: its audit record names the backtest.
    """
    from refund_desk.cases.backtest import record_backtest, run_backtest
    from refund_desk.policy import CompiledPolicy, PolicyInvalid, parse_policy

    try:
        doc = parse_policy(source)
    except PolicyInvalid as exc:
        _fail(f"{label} is not valid:\n{exc}")
        raise
    with csv.open("w", newline="") if csv else nullcontext() as out:
        run = run_backtest(
            runtime.db,
            CompiledPolicy.compile(doc),
            label=label,
            days=days,
            csv_out=out,
        )
    with runtime.db.write() as session:
        record_backtest(session, runtime.desk.audit, run, actor=_actor(), audited=audited)
    return run


def register(policy_app: typer.Typer) -> None:
    """Add the lifecycle commands to `refund-desk policy`."""

    @policy_app.command("backtest")
    def policy_backtest(
        target: Annotated[str, typer.Argument(help="A policy FILE or a published version vN.")],
        days: Annotated[int, typer.Option(min=1, max=365, help="Replay this many days.")] = 30,
        csv: Annotated[
            Path | None, typer.Option("--csv", help="Write every changed case to this CSV file.")
        ] = None,
    ) -> None:
        """Replay the stored cases' frozen facts against a policy; report what would change."""
        runtime = _runtime()
        label, source = _source(runtime, target)
        run = backtest_and_record(runtime, label, source, days, csv)
        typer.echo(_plain(run.text.replace("`", "")))
        typer.echo(f"({run.summary['seconds']}s; recorded for hash {run.content_hash[:12]})")

    @policy_app.command("diff")
    def policy_diff(
        old: Annotated[str, typer.Argument(help="FILE or vN")],
        new: Annotated[str, typer.Argument(help="FILE or vN")],
    ) -> None:
        """Rule-level changes between two policies."""
        from refund_desk.policy import PolicyInvalid, parse_policy
        from refund_desk.policy.diff import diff_policies, diff_text

        runtime = _runtime()
        (a_label, a), (b_label, b) = _source(runtime, old), _source(runtime, new)
        try:
            changes = diff_policies(parse_policy(a), parse_policy(b))
        except PolicyInvalid as exc:
            _fail(str(exc))
            raise
        typer.echo(diff_text(changes, old=a_label, new=b_label).replace("`", ""))

    @policy_app.command("history")
    def policy_history() -> None:
        """Published versions, newest first (* active)."""
        from refund_desk.bot.slack.policy_commands import PolicyCommands

        runtime = _runtime()
        with runtime.db.read() as session:
            text = PolicyCommands(runtime.desk, None).history(session, [])
        typer.echo(text.replace("`", ""))

    @policy_app.command("rollback")
    def policy_rollback(
        version: Annotated[str, typer.Argument(help="The version, e.g. v1.")],
    ) -> None:
        """Make an older version active again, as a new published version."""
        from refund_desk.cases.drafts import parse_ref
        from refund_desk.cases.errors import CaseError
        from refund_desk.cases.policy_admin import rollback

        try:
            number = parse_ref(version, allow=("version",)).number
        except CaseError as exc:
            _fail(exc.message)
            raise
        runtime = _runtime()
        _change(runtime, lambda s, a: rollback(s, runtime.desk.audit, version=number, actor=a))

    @policy_app.command("mode")
    def policy_mode(
        mode: Annotated[str, typer.Argument(help="shadow|approve-all|supervised")],
    ) -> None:
        """Set the autonomy mode."""
        from refund_desk.cases.policy_admin import set_mode

        runtime = _runtime()
        _change(runtime, lambda s, a: set_mode(s, runtime.desk.audit, mode=mode, actor=a))

    @policy_app.command("pause")
    def policy_pause() -> None:
        """The kill switch: no refund executes until `policy resume`."""
        from refund_desk.cases.policy_admin import set_paused

        runtime = _runtime()
        _change(runtime, lambda s, a: set_paused(s, runtime.desk.audit, paused=True, actor=a))

    @policy_app.command("resume")
    def policy_resume() -> None:
        """Lift the kill switch; waiting executions run at the server's next sweep."""
        from refund_desk.cases.policy_admin import set_paused

        runtime = _runtime()
        _change(runtime, lambda s, a: set_paused(s, runtime.desk.audit, paused=False, actor=a))
