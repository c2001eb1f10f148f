"""`refund-desk policy …` beyond validate/test: the admin's and CI's side of the lifecycle.

The same services as `/refund-policy`; the actor is ``cli:<os user>`` and there is no lead
check and no second lead (the CLI is the machine admin's, who also publishes the very first
version; ``governance/consent.py`` gates only people in Slack). When Slack is
configured, each change is also announced in the policy channel (a queued Slack call that the
server's sweeps deliver).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import nullcontext, suppress
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from refund_desk.cli.common import cli_actor as _actor
from refund_desk.cli.common import fail as _fail
from refund_desk.cli.common import open_runtime as _runtime
from refund_desk.cli.common import progress as _progress
from refund_desk.cli.common import read_text

if TYPE_CHECKING:
    from sqlmodel import Session

    from refund_desk.storage.audit import Actor, AuditLog


def _source(runtime: Any, target: str) -> tuple[str, str]:
    """(label, YAML) for a file path or a published version ``vN``."""
    from refund_desk.cases.errors import CaseError
    from refund_desk.governance.drafts import parse_ref, source_of

    if target.lower().startswith("v") and target[1:].isdigit():
        try:
            with runtime.db.read() as session:
                return target, source_of(session, parse_ref(target, allow=("version",)))
        except CaseError as exc:  # no such version
            _fail(exc.message)
    return Path(target).name, read_text(Path(target))


def _change(runtime: Any, act: Callable[[Session, AuditLog, Actor], Any]) -> None:
    """Run one change with its audit record and (with Slack) its announcement."""
    from refund_desk.bot.app import slack_configured
    from refund_desk.bot.policy_jobs import announce
    from refund_desk.cases.errors import CaseError

    try:
        with runtime.db.write() as session:
            change = act(session, runtime.desk.audit, _actor())
            if change.announce and slack_configured(runtime.settings):
                announce(session, runtime.settings.channel, change.announce)
    except CaseError as exc:
        _fail(exc.message)
    typer.echo(change.reply.as_text())


def backtest_and_record(
    runtime: Any, label: str, source: str, days: int, csv: Path | None, *, audited: bool = True
) -> Any:
    """Run a backtest (streaming), record it (the gate's evidence), return the run.

    ``audited=False`` when a publish follows at once: its audit record names the backtest.
    """
    from refund_desk.governance.backtest import record_backtest, run_backtest
    from refund_desk.policy import CompiledPolicy, PolicyInvalid, parse_policy

    try:
        doc = parse_policy(source)
    except PolicyInvalid as exc:
        _fail(f"{label} is not valid:\n{exc}")
    with (
        csv.open("w", newline="") if csv else nullcontext() as out,
        _progress(f"backtest of {label}") as advance,
    ):
        run = run_backtest(
            runtime.db,
            CompiledPolicy.compile(doc),
            label=label,
            days=days,
            csv_out=out,
            progress=lambda done: advance(done, 0),
        )
    with runtime.db.write() as session:
        record_backtest(session, runtime.desk.audit, run, actor=_actor(), audited=audited)
    return run


class Mode(StrEnum):
    shadow = "shadow"
    approve_all = "approve-all"
    supervised = "supervised"


def _versions(session: Session) -> list[dict[str, Any]]:
    from sqlalchemy import select
    from sqlmodel import col

    from refund_desk.governance.versions import control
    from refund_desk.storage.models import PolicyVersion

    active = control(session).active_version
    rows = session.scalars(select(PolicyVersion).order_by(col(PolicyVersion.version).desc())).all()
    return [
        {
            "version": r.version,
            "policy": r.policy_name,
            "content_hash": r.content_hash,
            "published_by": r.published_by,
            "published_at": r.published_at.isoformat(),
            "note": r.note,
            "active": r.version == active,
        }
        for r in rows
    ]


def _draft_json(d: Any) -> dict[str, Any]:
    return {
        "id": d.id,
        "author": d.author,
        "updated_at": d.updated_at.isoformat(),
        "valid": d.content_hash is not None,
        "content_hash": d.content_hash,
        "tests_pass": d.last_test_ok,
        "backtested": d.content_hash is not None and d.last_backtest_hash == d.content_hash,
        "published_version": d.published_version,
    }


def register(policy_app: typer.Typer) -> None:
    """Add the lifecycle commands to `refund-desk policy`."""

    @policy_app.command("backtest")
    def policy_backtest(
        target: Annotated[str, typer.Argument(help="A policy FILE or a published version vN.")],
        days: Annotated[int, typer.Option(min=1, max=365, help="Replay this many days.")] = 30,
        csv: Annotated[
            Path | None, typer.Option("--csv", help="Write every changed case to this CSV file.")
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="The summary as JSON.")] = False,
    ) -> None:
        """Replay the stored cases' frozen facts against a policy; report what would change."""
        runtime = _runtime()
        label, source = _source(runtime, target)
        run = backtest_and_record(runtime, label, source, days, csv)
        if as_json:
            typer.echo(json.dumps({"label": label, **run.summary}, indent=2, default=str))
            return
        typer.echo(run.text.as_text())
        typer.echo(f"({run.summary['seconds']}s; recorded for hash {run.content_hash[:12]})")

    @policy_app.command("diff")
    def policy_diff(
        old: Annotated[str, typer.Argument(help="FILE or vN")],
        new: Annotated[str, typer.Argument(help="FILE or vN")],
        as_json: Annotated[bool, typer.Option("--json", help="One JSON array.")] = False,
    ) -> None:
        """Rule-level changes between two policies."""
        from refund_desk.policy import PolicyInvalid, parse_policy
        from refund_desk.policy.diff import diff_policies, diff_text

        runtime = _runtime()
        (a_label, a), (b_label, b) = _source(runtime, old), _source(runtime, new)
        try:
            docs = parse_policy(a), parse_policy(b)
        except PolicyInvalid as exc:
            _fail(str(exc))
        if as_json:
            from dataclasses import asdict

            changes = diff_policies(*docs)
            typer.echo(json.dumps([asdict(c) for c in changes], indent=2))
            return
        typer.echo(diff_text(*docs, old=a_label, new=b_label).as_text())

    @policy_app.command("prove")
    def policy_prove(
        old: Annotated[str, typer.Argument(help="FILE or vN")],
        new: Annotated[str, typer.Argument(help="FILE or vN")],
        as_json: Annotated[bool, typer.Option("--json", help="The whole report as JSON.")] = False,
    ) -> None:
        """Every kind of request on which NEW decides differently from OLD, proved by a solver.

        Exit 0 when NEW is nowhere more permissive than OLD, 3 when it is somewhere, 2 on an
        error; each region comes with a witness request that `policy test` can check.
        """
        from refund_desk.policy.prove import main_prove

        refs = [t for t in (old, new) if t.lower().startswith("v") and t[1:].isdigit()]
        runtime = _runtime() if refs else None
        try:
            texts = [_source(runtime, t)[1] for t in (old, new)]
        except typer.Exit:
            raise typer.Exit(2) from None
        code, output = main_prove(texts[0], texts[1], as_json=as_json)
        typer.echo(output)
        raise typer.Exit(code)

    @policy_app.command("history")
    def policy_history(
        as_json: Annotated[bool, typer.Option("--json", help="One JSON array.")] = False,
    ) -> None:
        """Published versions, newest first (* active)."""
        from refund_desk.governance.versions import history

        runtime = _runtime()
        with runtime.db.read() as session:
            if as_json:
                typer.echo(json.dumps(_versions(session), indent=2))
                return
            typer.echo(history(session).as_text())

    @policy_app.command("rollback")
    def policy_rollback(
        version: Annotated[str, typer.Argument(help="The version, e.g. v1.")],
    ) -> None:
        """Make an older version active again, as a new published version (the machine
        admin's: no second lead is asked; the proof against the active version is shown and
        kept in the audit record)."""
        from refund_desk.cases.errors import CaseError
        from refund_desk.governance.admin import rollback
        from refund_desk.governance.drafts import parse_ref, source_of
        from refund_desk.governance.proof import proof_against_active

        try:
            ref = parse_ref(version, allow=("version",))
        except CaseError as exc:
            _fail(exc.message)
        runtime = _runtime()
        # proved outside the write (it can take seconds); the rollback says what is wrong
        with runtime.db.read() as session, suppress(CaseError):
            proof_against_active(session, source_of(session, ref))
        _change(runtime, lambda s, audit, a: rollback(s, audit, version=ref.number, actor=a))

    @policy_app.command("mode")
    def policy_mode(
        mode: Annotated[Mode, typer.Argument(help="The autonomy mode.")],
    ) -> None:
        """Set the autonomy mode."""
        from refund_desk.governance.admin import set_mode

        _change(_runtime(), lambda s, audit, a: set_mode(s, audit, mode=mode.value, actor=a))

    @policy_app.command("pause")
    def policy_pause() -> None:
        """The kill switch: no refund executes until `policy resume`."""
        from refund_desk.governance.admin import set_paused

        _change(_runtime(), lambda s, audit, a: set_paused(s, audit, paused=True, actor=a))

    @policy_app.command("resume")
    def policy_resume() -> None:
        """Lift the kill switch; waiting executions run at the server's next sweep."""
        from refund_desk.governance.admin import set_paused

        _change(_runtime(), lambda s, audit, a: set_paused(s, audit, paused=False, actor=a))

    @policy_app.command("draft")
    def policy_draft(
        file: Annotated[Path, typer.Argument(help="The policy YAML.")],
        draft_id: Annotated[
            int | None, typer.Option("--id", help="Replace the text of this draft.")
        ] = None,
    ) -> None:
        """Save a policy file as a draft (or replace a draft's text), as leads do in Slack."""
        from refund_desk.governance.drafts import save_draft

        runtime = _runtime()
        _, source = _source(runtime, str(file))
        _change(
            runtime,
            lambda s, audit, a: save_draft(s, audit, source=source, actor=a, draft_id=draft_id)[1],
        )

    @policy_app.command("drafts")
    def policy_drafts(
        as_json: Annotated[bool, typer.Option("--json", help="One JSON array.")] = False,
    ) -> None:
        """List the latest drafts with their test and backtest state."""
        from refund_desk.governance.drafts import list_drafts

        with _runtime().db.read() as session:
            rows = list_drafts(session)
            if as_json:
                typer.echo(json.dumps([_draft_json(d) for d in rows], indent=2))
                return
            if not rows:
                typer.echo("No drafts yet.")
            for d in rows:
                tested = {True: "tests pass", False: "tests FAIL", None: "untested"}[d.last_test_ok]
                state = "valid" if d.content_hash else "not valid"
                published = f", published v{d.published_version}" if d.published_version else ""
                backtested = ", backtested" if d.last_backtest_hash == d.content_hash else ""
                typer.echo(
                    f"d{d.id}  {d.updated_at:%Y-%m-%d %H:%M}  {d.author}  "
                    f"{state}, {tested}{backtested}{published}"
                )

    @policy_app.command("shadow")
    def policy_shadow(
        action: Annotated[str, typer.Argument(help="start | stop | report")],
        draft: Annotated[str | None, typer.Argument(help="The draft for `start`, e.g. d3.")] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="`report` as one JSON object (null: no run).")
        ] = False,
    ) -> None:
        """Run a draft silently beside the live version, and report how often they agree."""
        from refund_desk.cases.errors import CaseError
        from refund_desk.governance import shadow
        from refund_desk.governance.drafts import parse_ref

        runtime = _runtime()
        if action == "report":
            with runtime.db.read() as session:
                if as_json:
                    run = shadow.tally(session)
                    typer.echo(json.dumps(run.to_json() if run else None, indent=2))
                    return
                typer.echo(shadow.report(session).as_text())
            return
        if action == "stop":
            _change(runtime, lambda s, audit, a: shadow.stop(s, audit, actor=a))
            return
        if action != "start" or draft is None:
            _fail("use `policy shadow start DRAFT`, `policy shadow stop` or `policy shadow report`")
        try:
            number = parse_ref(str(draft), allow=("draft",)).number
        except CaseError as exc:
            _fail(exc.message)
        _change(runtime, lambda s, audit, a: shadow.start(s, audit, draft_id=number, actor=a))

    @policy_app.command("review-rate")
    def policy_review_rate(
        rate: Annotated[str, typer.Argument(help="A share such as 0.05 or 5%, or `policy`.")],
    ) -> None:
        """Share of automatic refunds a person re-checks afterwards (`policy`: its own)."""
        from refund_desk.governance.admin import set_review_rate

        value: float | None = None
        if rate != "policy":
            try:
                value = float(rate[:-1]) / 100 if rate.endswith("%") else float(rate)
            except ValueError:
                _fail(f"{rate!r} is not a share such as 0.05 or 5%")
        _change(_runtime(), lambda s, audit, a: set_review_rate(s, audit, rate=value, actor=a))

    @policy_app.command("second-lead")
    def policy_second_lead(
        setting: Annotated[str, typer.Argument(help="on | off")],
    ) -> None:
        """Whether a publish from Slack needs a second lead to confirm it."""
        from refund_desk.governance.admin import set_second_lead

        if setting not in ("on", "off"):
            _fail("use `policy second-lead on` or `policy second-lead off`")
        _change(
            _runtime(), lambda s, audit, a: set_second_lead(s, audit, on=setting == "on", actor=a)
        )
