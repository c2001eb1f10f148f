"""`refund-desk`: the admin's command line (DESIGN.md's external contract)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from refund_desk import logs, money
from refund_desk.cli import policy as _policy_cli
from refund_desk.cli.common import cli_actor as _cli_actor
from refund_desk.cli.common import fail as _fail
from refund_desk.cli.common import open_runtime as _runtime
from refund_desk.cli.common import progress as _progress
from refund_desk.cli.common import read_text as _read
from refund_desk.cli.common import sandbox as _sandbox
from refund_desk.cli.common import settings as _settings


class _Commands(TyperGroup):
    """A refusal the core explains (no such case, version or key, an amount out of range) is
    one line on stderr and exit 2, never a traceback."""

    def invoke(self, ctx: Any) -> Any:
        from refund_desk.cases.errors import CaseError

        try:
            return super().invoke(ctx)
        except (CaseError, money.InvalidAmount, money.UnknownCurrency) as exc:
            _fail(str(exc), 2)


app = typer.Typer(
    cls=_Commands,
    help="Refund Desk: refunds decided by policy, approved in Slack, paid once.",
    no_args_is_help=True,
)


def _group(name: str, doc: str, parent: typer.Typer = app) -> typer.Typer:
    group = typer.Typer(help=doc, no_args_is_help=True)
    parent.add_typer(group, name=name)
    return group


db_app = _group("db", "Database schema.")
key_app = _group("api-key", "API keys for integrators.")
policy_app = _group(
    "policy", "Policy documents: validate, test, backtest, diff, publish, roll back, pause."
)
audit_app = _group("audit", "The tamper-evident audit trail.")
sandbox_app = _group("sandbox", "The embedded sandbox processor.")
payment_app = _group("payment", "Sandbox payments.", sandbox_app)
advisor_app = _group("advisor", "The AI advisor: accuracy and format adherence.")
cases_app = _group("cases", "Cases: exports for finance.")
customer_app = _group("customer", "Customers' personal data.")
slack_app = _group("slack", "The Slack workspace the app is installed in.")
processor_app = _group("processor", "The payment processors refunds go to.")


class _Counted(list[Any]):
    """A list that reports how far an iteration over it went (a progress bar's feed)."""

    def __init__(self, items: Sequence[Any], advance: Callable[[int, int], None]) -> None:
        super().__init__(items)
        self._advance = advance

    def __iter__(self) -> Iterator[Any]:
        total = len(self)
        for done, item in enumerate(super().__iter__(), start=1):
            yield item
            self._advance(done, total)


class ExportFormat(StrEnum):
    csv = "csv"
    jsonl = "jsonl"


@slack_app.command("doctor")
def slack_doctor() -> None:
    """Check the workspace against the policy, one line per check with its fix; exit 1 when one
    fails: the token, the scopes, the bot in every channel the policy names, every user group it
    names, and the signing secret (HTTP) or app-level token (Socket Mode)."""
    from refund_desk.bot.doctor import run_checks
    from refund_desk.governance.versions import control, load_version

    runtime = _runtime()
    with runtime.db.read() as session:
        version = control(session).active_version
        doc = load_version(session, version).doc if version else None
    if doc is None:
        typer.echo("note: no policy is published yet; only the workspace itself is checked")
    checks = run_checks(runtime.settings, doc)
    for check in checks:
        typer.echo(check.line())
    failed = [c for c in checks if not c.ok]
    if failed:
        typer.echo(f"{len(failed)} of {len(checks)} checks failed", err=True)
        raise typer.Exit(1)
    typer.echo(f"all {len(checks)} checks passed")


@processor_app.command("doctor")
def processor_doctor() -> None:
    """Ask each configured processor whether it answers with these credentials, one line each;
    exit 1 when one does not."""
    from refund_desk.cases.ports import ProcessorError
    from refund_desk.runtime import members

    runtime = _runtime(migrate=False)
    failed = 0
    for processor in members(runtime.processor):
        try:
            typer.echo(f"ok    {processor.name}: {processor.check()}")
        except ProcessorError as exc:
            failed += 1
            typer.echo(f"FAIL  {processor.name}: {exc.message} ({exc.code})")
    if failed:
        raise typer.Exit(1)


class FaultMode(StrEnum):
    down = "down"
    timeout_after_success = "timeout-after-success"
    decline = "decline"
    crash_after_success = "crash-after-success"
    ignore_idempotency_keys = "ignore-idempotency-keys"
    none = "none"


@app.callback()
def _main(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Debug lines, and the libraries' own.")
    ] = False,
) -> None:
    # Log lines go to stderr (JSON, or text on a terminal; REFUND_DESK_LOG_FORMAT chooses);
    # library chatter (alembic, the scheduler, HTTP clients) only with -v: a command's
    # output is its answer.
    try:
        logs.configure(verbose=verbose)
    except ValueError as exc:
        _fail(str(exc), 2)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(help="Worker processes (PostgreSQL only).")] = 1,
    job_processes: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=64,
            help="Run the jobs in this many processes of their own, at a lower OS priority "
            "(0: in the server's threads). Default: REFUND_DESK_JOB_PROCESSES, else one "
            "beside the server on a machine with two cores or more, none on one core.",
        ),
    ] = None,
) -> None:
    """Run the server: HTTP API, Slack endpoint, and the job sweeps."""
    import os

    import uvicorn

    if job_processes is None:  # one where there is a core for it: it doubles intake
        default = 1 if (os.cpu_count() or 1) >= 2 else 0
        job_processes = int(os.environ.get("REFUND_DESK_JOB_PROCESSES") or default)
    # the server's processes (and the job processes) read it from settings
    os.environ["REFUND_DESK_JOB_PROCESSES"] = str(job_processes)
    settings = _settings()
    if workers > 1 and settings.is_sqlite:
        _fail("SQLite supports one worker; use PostgreSQL (DATABASE_URL) for more", 2)
    from refund_desk.web.job_process import JobProcesses

    runtime = _runtime()  # migrated before any job process starts
    jobs = JobProcesses(settings.job_processes, os.environ)
    if settings.job_processes:
        jobs.start()
    try:
        server: Any = "refund_desk.web.main:app"  # each worker process builds its own
        if workers <= 1:
            from refund_desk.web.app import create_app

            server = create_app(runtime)
            url = runtime.db.engine.url.render_as_string()
            typer.echo(f"Refund Desk on http://{host}:{port} (database {url})")
        uvicorn.run(
            server, host=host, port=port, workers=workers, log_config=logs.uvicorn_log_config()
        )
    finally:
        jobs.stop(timeout=runtime.desk.jobs.lease.total_seconds())


@app.command()
def worker() -> None:
    """Run the jobs only, no HTTP: one of `serve --job-processes N`'s processes, or a job
    replica of its own beside the servers. Stops on SIGTERM or Ctrl-C after the jobs it is
    running."""
    import signal

    from refund_desk.web.job_process import SignalledStop, run

    stop = SignalledStop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop.handler)
    run(_runtime(), stop)


@app.command()
def mcp(
    user: Annotated[
        str,
        typer.Option("--as", help="Your Slack user id: the policy's roles for that person apply."),
    ],
) -> None:
    """Serve Refund Desk to an assistant over MCP on stdin and stdout (a desktop assistant on
    an admin's machine): read cases, explain decisions, simulate the policy, propose refunds;
    never approve, deny or pay. Every call is on the audit record under USER."""
    import anyio

    from refund_desk.mcp_server import serve_stdio

    anyio.run(serve_stdio, _runtime(), user.strip())


@app.command()
def demo(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    dir: Annotated[
        Path | None,
        typer.Option("--dir", help="Keep the demo's data here (default: a temporary folder)."),
    ] = None,
    stream_seconds: Annotated[
        float, typer.Option(help="Spread the sample refund requests over this many seconds.")
    ] = 60.0,
) -> None:
    """Run the whole product locally with a Slack sandbox and a sample store; no configuration.

    Prints the address to open in a browser. Refuses to run when SLACK_BOT_TOKEN is set."""
    from refund_desk.demo.runner import DemoRefused, run

    if host not in ("127.0.0.1", "localhost", "::1"):
        typer.echo(
            f"WARNING: the demo listens on {host}: anyone who can reach it can act as any "
            "Slack user on its sandbox page, approve refunds and change the policy. Use it "
            "only on a network you trust; the default is 127.0.0.1.",
            err=True,
        )
    try:
        run(host=host, port=port, directory=dir, stream_seconds=stream_seconds)
    except DemoRefused as exc:
        _fail(str(exc), 2)


@app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Health: dependencies, replicas, job backlog and the oldest waiting case.

    Each dependency (database, schema, scheduler, Slack, processor, model) as ok, degraded or
    down with its last error; every replica's last sweep; the job backlog by kind; the oldest
    waiting case. Exit 1 when something is down."""
    from refund_desk.web.health import status as read_status

    report = read_status(_runtime(migrate=False))
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        typer.echo(f"refund-desk: {report['status']} at {report['at']}")
        for name, check in report["checks"].items():
            error = f"  {check['error']}" if check["error"] else ""
            typer.echo(f"  {name:<11} {check['status']:<9}{error}")
        for r in report["checks"].get("scheduler", {}).get("detail", {}).get("replicas", []):
            typer.echo(
                f"  replica {r['replica']}: last sweep {r['last_sweep_seconds_ago']:.0f} s ago"
                + (f" ({r['last_error']})" if r["last_error"] else "")
            )
        if "jobs" in report:
            typer.echo("jobs (pending / due now / retrying / dead, oldest due):")
            for j in report["jobs"]:
                typer.echo(
                    f"  {j['kind']:<22} {j['pending']:>6} {j['due']:>6} {j['retrying']:>6} "
                    f"{j['dead']:>6}  {j['oldest_due_at'] or '-'}"
                )
            if not report["jobs"]:
                typer.echo("  none")
            oldest = report["oldest_waiting_case"]
            typer.echo(
                f"waiting cases: {report['waiting_cases']}"
                + (
                    f"; oldest {oldest['id']} ({oldest['status']}, {oldest['waiting_hours']} h)"
                    if oldest
                    else ""
                )
            )
    if report["status"] == "down":
        raise typer.Exit(1)


@app.command()
def backup(
    file: Annotated[Path, typer.Argument(help="The backup file to write (never overwritten).")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Back up the database while it runs (SQLite online backup, or pg_dump).

    Prints the audit head it holds: after a restore, `audit verify --anchor HASH` proves the
    record is the same. The secret (REFUND_DESK_SECRET or the .secret file) is not in it:
    keep it apart."""
    from refund_desk.storage.backup import BackupError
    from refund_desk.storage.backup import backup as run_backup

    runtime = _runtime()
    try:
        with _progress("backing up") as advance:
            done = run_backup(runtime.db, runtime.settings.database_url, file, progress=advance)
    except BackupError as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "file": str(done.path),
                    "bytes": done.size,
                    "audit_records": done.records,
                    "head_hash": done.head_hash,
                }
            )
        )
        return
    typer.echo(
        f"backed up to {done.path} ({done.size} bytes): {done.records} audit records, "
        f"head {done.head_hash}"
    )


@cases_app.command("export")
def cases_export(
    since: Annotated[str, typer.Option(help="Cases created on or after: an ISO date, or 30d.")],
    until: Annotated[
        str | None, typer.Option(help="...and before: an ISO date (default: now).")
    ] = None,
    fmt: Annotated[ExportFormat, typer.Option("--format", help="csv or jsonl.")] = (
        ExportFormat.csv
    ),
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="File (default stdout).")
    ] = None,
) -> None:
    """One line per case for finance, as CSV or JSON Lines.

    Ids, amounts in major units with the currency, status, rule, tier, policy version,
    approvers, execution and processor refund ids, times and the time to decision. No
    personal data."""
    from refund_desk.cases.listing import ExportWriter, Filters, count, iter_export

    runtime = _runtime()
    now = runtime.desk.now()
    try:
        filters = Filters(
            since=_since(since, now), until=_since(until, now) if until is not None else None
        )
    except ValueError as exc:
        _fail(str(exc).replace("--since", "--since/--until"), 2)
    with runtime.db.read() as session:
        total = count(session, filters)
        out = output.open("w", newline="") if output is not None else sys.stdout
        try:
            writer = ExportWriter(out, fmt.value)
            with _progress("exporting cases") as advance:
                for done, row in enumerate(iter_export(session, filters), start=1):
                    writer.write(row)
                    if done % 100 == 0 or done == total:
                        advance(done, total)
        finally:
            if output is not None:
                out.close()
    if output is not None:
        typer.echo(f"wrote {total} cases to {output}", err=True)


@customer_app.command("erase")
def customer_erase(
    email: Annotated[str, typer.Argument(help="The customer's email address.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Erase one customer's personal data; the record stays verifiable.

    Their data key, email, name, messages and evidence files go. Amounts, decisions,
    approvals and the audit chain stay (audit verify still passes); the erasure is an audit
    record without the personal data."""
    from refund_desk.cases.evidence import EvidenceStore
    from refund_desk.customers.erasure import erase_customer

    if not yes and sys.stdin.isatty():
        typer.confirm(f"Erase every personal field of {email}? This cannot be undone", abort=True)
    runtime = _runtime()
    done = erase_customer(
        runtime.desk,
        email,
        actor=_cli_actor(),
        evidence=EvidenceStore(runtime.settings.evidence_path()),
        forget=runtime.sandbox.forget_customer if runtime.sandbox is not None else None,
    )
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "cases": done.cases,
                    "evidence_files": done.evidence_files,
                    "already_erased": done.already,
                }
            )
        )
        return
    if done.already:
        typer.echo(f"already erased ({len(done.cases)} cases)")
        return
    typer.echo(
        f"erased the personal data of {len(done.cases)} case(s) and "
        f"{done.evidence_files} evidence file(s)"
    )


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Bring the database schema up to date."""
    _runtime(migrate=True)
    typer.echo("database is up to date")


class KeyScope(StrEnum):
    read = "read"
    propose = "propose"


@key_app.command("create")
def api_key_create(
    name: Annotated[str, typer.Option(help="Who the key is for.")],
    scope: Annotated[
        KeyScope,
        typer.Option(help="read: cases and the policy; propose: also file refund requests."),
    ] = KeyScope.propose,
) -> None:
    """Create an API key for the intake API and the MCP server; it is printed once and stored
    only as a hash. No key approves, denies or pays: the policy or a person does."""
    from refund_desk.api_keys import create_api_key

    runtime = _runtime()
    typer.echo(
        create_api_key(
            runtime.db, name, audit=runtime.desk.audit, actor=_cli_actor(), scope=scope.value
        )
    )


@key_app.command("list")
def api_key_list(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array.")] = False,
) -> None:
    """Every API key: name, start of the key, made, last used, state.

    States: active, rotating (until a time), expired, revoked."""
    from refund_desk import clock
    from refund_desk.api_keys import list_api_keys

    with _runtime().db.read() as session:
        keys = list_api_keys(session)
    now = clock.now()
    if as_json:
        rows = [
            {
                "name": k.name,
                "prefix": k.prefix,
                "created_at": k.created_at.isoformat(),
                "revoked_at": k.revoked_at.isoformat() if k.revoked_at else None,
                "last_used_at": k.last_used_at.isoformat() if k.last_used_at else None,
                "expires_at": k.expires_at.isoformat() if k.expires_at else None,
                "state": k.state(now),
                "scope": k.scope,
            }
            for k in keys
        ]
        typer.echo(json.dumps(rows, indent=2))
        return
    for k in keys:
        state = k.state(now)
        if state == "revoked" and k.revoked_at:
            state = f"revoked {k.revoked_at:%Y-%m-%d %H:%M}"
        elif k.expires_at:
            word = "since" if state == "expired" else "until"
            state = f"{state} {word} {k.expires_at:%Y-%m-%d %H:%M}"
        used = f"{k.last_used_at:%Y-%m-%d %H:%M}" if k.last_used_at else "never"
        typer.echo(
            f"{k.name:<24} {k.prefix}…  created {k.created_at:%Y-%m-%d %H:%M}  "
            f"last used {used:<16}  {k.scope:<8} {state}"
        )


@key_app.command("rotate")
def api_key_rotate(
    name: Annotated[str, typer.Argument(help="The key's name.")],
    grace: Annotated[
        str,
        typer.Option(help="How long the old key keeps working: 24h, 30m, 7d, or 0 (stop now)."),
    ] = "24h",
) -> None:
    """Make a new key with this name and print it once.

    The old one keeps working for the grace period, then stops. On the audit record."""
    from datetime import timedelta

    from refund_desk.api_keys import rotate_api_key
    from refund_desk.policy.durations import parse_duration

    try:
        period = timedelta(0) if grace.strip() in ("0", "0s", "0m", "0h") else parse_duration(grace)
    except ValueError as exc:
        _fail(f"--grace: {exc}", 2)
    runtime = _runtime()
    typer.echo(
        rotate_api_key(runtime.db, name, grace=period, audit=runtime.desk.audit, actor=_cli_actor())
    )
    typer.echo(f"the previous key of {name} works for {grace} more, then stops", err=True)


@key_app.command("revoke")
def api_key_revoke(name: Annotated[str, typer.Argument(help="The key's name.")]) -> None:
    """Revoke every live key with this name; requests with it are refused from now on."""
    from refund_desk.api_keys import revoke_api_key

    runtime = _runtime()
    count = revoke_api_key(runtime.db, name, audit=runtime.desk.audit, actor=_cli_actor())
    typer.echo(f"revoked {count} key{'s' if count != 1 else ''} named {name}")


def _parsed(file: Path) -> Any:
    """The policy document in FILE; its problems on stderr and exit 1 if it is not valid."""
    from refund_desk.policy import PolicyInvalid, parse_policy

    try:
        return parse_policy(_read(file))
    except PolicyInvalid as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from None


@policy_app.command("validate")
def policy_validate(file: Path) -> None:
    """Check a policy document; report every problem with its rule id."""
    doc = _parsed(file)
    typer.echo(f"{file}: valid policy {doc.policy!r} with {len(doc.rules)} rules")


@policy_app.command("test")
def policy_test(file: Path) -> None:
    """Run the policy's embedded tests."""
    from refund_desk.policy import run_policy_tests

    results = run_policy_tests(_parsed(file))
    for r in results:
        typer.echo(
            f"{'PASS' if r.passed else 'FAIL'}  {r.name}" + ("" if r.passed else f": {r.message}")
        )
    failed = sum(not r.passed for r in results)
    typer.echo(f"{len(results) - failed} passed, {failed} failed")
    if failed:
        raise typer.Exit(1)


@policy_app.command("publish")
def policy_publish(file: Path) -> None:
    """Publish a policy as the next version: the same gate as in Slack (valid, tests pass,
    backtested over the last 30 days; this command runs that backtest and shows it)."""
    from refund_desk.cases.errors import CaseError
    from refund_desk.cli.policy import backtest_and_record
    from refund_desk.governance.backtest import BACKTEST_DAYS
    from refund_desk.governance.proof import proof_against_active, proof_record, proof_summary
    from refund_desk.governance.versions import check_publishable, publish

    runtime = _runtime()
    source = _read(file)
    try:
        check_publishable(source)  # valid and tested before the (longer) backtest
        run = backtest_and_record(runtime, file.name, source, BACKTEST_DAYS, None, audited=False)
        with runtime.db.read() as session:  # proved outside the write: it can take seconds
            proved = proof_against_active(session, source)
        with runtime.db.write() as session:
            row = publish(
                session,
                runtime.desk.audit,
                source=source,
                actor=_cli_actor(),
                backtest="require",
                proof=proof_record(proved),
            )
    except CaseError as exc:
        _fail(exc.message)
    typer.echo(run.text.as_text())
    if proved is not None:
        from refund_desk.governance.versions import load_version
        from refund_desk.policy import parse_policy

        with runtime.db.read() as session:
            docs = (load_version(session, proved[0]).doc, parse_policy(source))
        typer.echo(proof_summary(*proved, docs).as_text())
    typer.echo(f"published {row.policy_name} v{row.version} ({row.content_hash[:12]})")


@audit_app.command("verify")
def audit_verify(
    anchor: Annotated[
        str | None,
        typer.Option(
            "--anchor",
            help="A head hash kept outside the database (export, scheduled anchor): the chain "
            "must contain it, proving nothing up to it was cut or changed.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Recompute the audit chain; name the first record that does not fit."""
    from dataclasses import asdict

    from refund_desk.storage.audit import verify_chain

    runtime = _runtime()
    with runtime.db.read() as session:
        result = verify_chain(runtime.settings.secret_value(), session, anchor=anchor)
    if as_json:
        typer.echo(json.dumps(asdict(result)))
        raise typer.Exit(0 if result.ok else 1)
    if result.ok:
        typer.echo(f"ok: {result.count} records, head {result.head_hash}")
        return
    _fail(f"audit chain broken at record {result.first_bad_seq}: {result.problem}")


@audit_app.command("export")
def audit_export(
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="File (default stdout).")
    ] = None,
) -> None:
    """Write the audit trail as JSON Lines, ending with the head hash."""
    from refund_desk.storage.audit import export_jsonl, iter_records

    runtime = _runtime()
    with runtime.db.read() as session:
        if output is None:
            export_jsonl(iter_records(session), sys.stdout)
        else:
            with output.open("w") as f:
                head = export_jsonl(iter_records(session), f)
            typer.echo(f"wrote {output}; head {head}", err=True)


@app.command()
def reconcile(
    since: Annotated[
        str, typer.Option(help="Start of the window: a duration back (7d, 24h) or an ISO date.")
    ] = "7d",
    csv_file: Annotated[
        Path | None, typer.Option("--csv", help="Also write the findings to this CSV file.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Compare every refund the processor holds since --since with our executions."""
    from refund_desk.cases.ports import ProcessorError
    from refund_desk.payments.reconcile import reconcile as run

    runtime = _runtime()
    try:
        start = _since(since, runtime.desk.now())
    except ValueError as exc:
        _fail(str(exc), 2)
    try:
        with _progress("reconciling") as advance:
            report = run(runtime.desk, since=start, actor=_cli_actor(), progress=advance)
    except ProcessorError as exc:
        _fail(f"the processor could not be listed: {exc.message} ({exc.code})")
    if as_json:
        from dataclasses import asdict

        findings = [{**asdict(f), "new": f.key in report.new_keys} for f in report.findings]
        typer.echo(
            json.dumps(
                {
                    "since": start.isoformat(),
                    "refunds_seen": report.refunds_seen,
                    "executions_seen": report.executions_seen,
                    "findings": findings,
                },
                indent=2,
            )
        )
    else:
        for f in report.findings:
            mark = "new " if f.key in report.new_keys else "seen"
            typer.echo(
                f"{mark}  {f.kind:<20}  {f.refund_id or f.execution_id or '-':<28}  {f.detail}"
            )
        typer.echo(
            f"{report.refunds_seen} refunds at the processor, {report.executions_seen} executions; "
            f"{len(report.findings)} findings ({len(report.new_keys)} new) "
            f"since {start.isoformat()}"
        )
    if csv_file is not None:
        with csv_file.open("w", newline="") as out:
            report.write_csv(out)
        typer.echo(f"wrote {csv_file}", err=True)


def _since(text: str, now):
    from datetime import UTC, datetime

    from refund_desk.policy.durations import parse_duration

    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"--since {text!r} is neither a duration like 7d nor an ISO date"
        ) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


@payment_app.command("create")
def sandbox_payment_create(
    amount: Annotated[str, typer.Option(help="Major units, e.g. 25.00")],
    currency: Annotated[str, typer.Option(help="ISO 4217 code, e.g. usd")],
    email: Annotated[str, typer.Option(help="The customer's email")],
    name: Annotated[str | None, typer.Option(help="The customer's name")] = None,
    age_days: Annotated[int, typer.Option(help="How long ago it was paid")] = 0,
    chargebacks: Annotated[int, typer.Option(help="Chargebacks on record")] = 0,
    count: Annotated[
        int, typer.Option(min=1, help="How many payments alike (one id a line), for load tests")
    ] = 1,
) -> None:
    """Create a sandbox payment and print its id (with --count N: N payments, one id a line)."""
    from datetime import timedelta

    from refund_desk import clock

    sandbox = _sandbox()
    try:
        ids = sandbox.create_payments(
            count,
            amount=money.to_minor(amount, currency),
            currency=currency,
            email=email,
            name=name,
            chargebacks=chargebacks,
            created_at=clock.now() - timedelta(days=age_days),
        )
    except ValueError as exc:
        _fail(str(exc), 2)
    typer.echo("\n".join(ids))


@payment_app.command("show")
def sandbox_payment_show(payment_id: str) -> None:
    """Print a sandbox payment and every refund the processor holds for it, as JSON."""
    from refund_desk.cases.ports import PaymentNotFound

    try:
        typer.echo(json.dumps(_sandbox().show_payment(payment_id), indent=2))
    except PaymentNotFound as exc:
        _fail(exc.message)


@sandbox_app.command("fault")
def sandbox_fault(
    mode: Annotated[FaultMode, typer.Argument(help="The fault the sandbox plays next.")],
    times: Annotated[int | None, typer.Option(help="Only for the next N calls")] = None,
) -> None:
    """Make the sandbox processor misbehave (reaches a running server through the database).

    `ignore-idempotency-keys` plays beside the other faults until `none`: a repeated key then
    makes a new refund, as a processor that does not honour keys would."""
    if mode is FaultMode.ignore_idempotency_keys and times is not None:
        _fail("ignore-idempotency-keys lasts until `sandbox fault none`; --times does not apply", 2)
    try:
        _sandbox().set_fault(mode.value, times)
    except ValueError as exc:
        _fail(str(exc), 2)
    typer.echo(f"sandbox fault: {mode.value}" + (f" for {times} call(s)" if times else ""))


@advisor_app.command("eval")
def advisor_eval(
    files: Annotated[
        list[Path] | None,
        typer.Argument(help="JSON Lines labelled sets (default: the shipped one)"),
    ] = None,
    offline: Annotated[bool, typer.Option(help="Use the offline advisor even with a key.")] = False,
    misses: Annotated[bool, typer.Option(help="List every line it got wrong.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the whole report as one JSON object.")
    ] = False,
) -> None:
    """Score the advisor on labelled requests: one line per field and per language, the
    calibration (ECE and a reliability table), then a confusion table."""
    from refund_desk.advisor.eval import BUNDLED, EvalError, evaluate, load, render, render_json
    from refund_desk.advisor.offline import OfflineAdvisor
    from refund_desk.runtime import make_advisor
    from refund_desk.settings import Settings

    try:
        items = load(files or BUNDLED)
    except EvalError as exc:
        _fail(str(exc), 2)
    advisor = OfflineAdvisor() if offline else make_advisor(Settings())
    with _progress("advisor eval") as advance:
        report = evaluate(advisor, _Counted(items, advance))
    if as_json:
        typer.echo(render_json(report, model=advisor.name != "offline"))
        return
    typer.echo(render(report, model=advisor.name != "offline"))
    if misses:
        typer.echo("\n".join(["", "misses:", *report.failures]))


@advisor_app.command("compare")
def advisor_compare(
    file: Annotated[Path, typer.Argument(help="a JSON Lines labelled set")],
    prompt_price: Annotated[
        float | None, typer.Option(help="USD per million prompt tokens, for the cost line")
    ] = None,
    completion_price: Annotated[
        float | None, typer.Option(help="USD per million completion tokens")
    ] = None,
) -> None:
    """The offline advisor and the configured model side by side on FILE, per field, with the
    model's tokens (and cost) per 1,000 requests."""
    from refund_desk.advisor.eval import EvalError, evaluate, load, render_compare
    from refund_desk.advisor.offline import OfflineAdvisor
    from refund_desk.runtime import make_advisor
    from refund_desk.settings import Settings

    try:
        items = load([file])
    except EvalError as exc:
        _fail(str(exc), 2)
    model = make_advisor(Settings())
    if model.name == "offline":
        _fail("no model is configured: set OPENAI_API_KEY (and OPENAI_BASE_URL, REFUND_DESK_MODEL)")
    offline_report = evaluate(OfflineAdvisor(), items)
    model_report = evaluate(model, items)
    name = getattr(model, "model", None) or model.name
    typer.echo(
        render_compare(
            offline_report,
            model_report,
            model_name=str(name),
            prompt_price=prompt_price,
            completion_price=completion_price,
        )
    )


@advisor_app.command("stats")
def advisor_stats(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array.")] = False,
) -> None:
    """Advisor calls per day: format adherence (answers that parsed) and tokens spent."""
    from dataclasses import asdict

    from refund_desk.cases.advisory import format_by_day

    runtime = _runtime()
    with runtime.db.read() as session:
        days = format_by_day(session)
    if as_json:
        rows = [{**asdict(d), "format_adherence": d.format_adherence} for d in days]
        typer.echo(json.dumps(rows, indent=2))
        return
    if not days:
        typer.echo("no advisor calls yet")
    for d in days:
        share = "n/a" if d.format_adherence is None else f"{100 * d.format_adherence:.1f}%"
        typer.echo(
            f"{d.day}  {d.provider:<8} calls {d.calls:>5}  format {share:>6} "
            f"({d.parsed}/{d.answers} parsed)  tokens {d.tokens}"
        )


_policy_cli.register(policy_app)  # backtest, diff, history, rollback, mode, pause, resume


def main() -> None:
    """The console script."""
    app()
