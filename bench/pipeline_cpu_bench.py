"""CPU time per refund request, in one process, beside the bare endpoint's work.

The throughput bench (`throughput_bench.py`) measures the whole server under a client on a
shared machine, where a change of 10-20 % drowns in the noise. This one measures what a change
to the pipeline's code costs: the process's CPU time per request, with no HTTP and no client.

- **bare**: what `parts/bare_app.py` does per request: pydantic validates the body, one
  SQLAlchemy `INSERT` in its own transaction (same database settings).
- **intake**: the intake API's work (`_create`: parse, look the payment up on the sandbox
  processor, encrypt, capture the case, its audit record and its `advance` job), with the
  jobs left for a job process.
- **pipeline**: the same request carried to `refunded` in the calling thread: intake,
  advise, decide, reserve, pay on the sandbox processor, record; then a sweep runs the work
  the refund left due (its notifications, telling the customer), as a server's sweeper would.
- **click**: a person's Approve on a case waiting for finance, as the Slack listener runs
  it before `ack()` (`approvals.act`: the token checked, the case locked, the authority
  checked, the decision recorded, the case moved, its refund queued), one transaction.
- **bare app** and **intake app**: the whole request through each FastAPI app in this
  process, as uvicorn calls it once it has parsed the request (middleware, routing, body,
  thread hops, the key check, the intake gate, the answer), with no socket and no HTTP
  parsing (the same for both); the intake app's jobs are left for a job process. Measured
  against each other: what the server's own process spends per request, apart from uvicorn.

Each request is a small damaged-item refund of a customer of its own, which the reference
policy (breaker off) refunds by itself. Prints CPU milliseconds per request (median of
`--rounds`), each as a multiple of its reference (bare, or bare app), and the SQL statements
per request (counted in a round of their own: a statement listener changes the CPU).

    python bench/pipeline_cpu_bench.py [--requests 300] [--rounds 3] [--database-url EMPTY_DB_URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import Engine, event, update
from sqlmodel import col

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench" / "parts"))

from refund_desk import clock, money  # noqa: E402
from refund_desk.api_keys import create_api_key  # noqa: E402
from refund_desk.cases import approvals, tokens  # noqa: E402
from refund_desk.cases.intake import RefundRequest  # noqa: E402
from refund_desk.governance.versions import publish  # noqa: E402
from refund_desk.payments.sandbox import SandboxProcessor  # noqa: E402
from refund_desk.runtime import Runtime, build  # noqa: E402
from refund_desk.settings import Settings  # noqa: E402
from refund_desk.storage.audit import Actor  # noqa: E402
from refund_desk.storage.db import Database  # noqa: E402
from refund_desk.storage.migrate import upgrade  # noqa: E402
from refund_desk.storage.models import Case, SandboxPayment  # noqa: E402
from refund_desk.web.routes.intake_api import RecentKeys, _create  # noqa: E402

KEYS = RecentKeys()

POLICY = ROOT / "tests" / "fixtures" / "acme.yaml"
SECRET = "bench-secret-" + "b" * 40


def bench_policy() -> str:
    """The reference policy without its circuit breaker (hundreds of refunds an hour here)."""
    raw = yaml.safe_load(POLICY.read_text())
    raw.pop("breaker", None)
    return yaml.safe_dump(raw, sort_keys=False)


def setup(url: str) -> tuple[Runtime, str]:
    """A runtime on a new database with the bench's policy, and an API key's header."""
    db = Database.from_url(url)
    upgrade(db.engine)
    settings = Settings.model_validate({"DATABASE_URL": url, "REFUND_DESK_SECRET": SECRET})
    runtime = build(settings, db=db, processor=SandboxProcessor(db))
    with db.write() as session:
        publish(session, runtime.desk.audit, source=bench_policy(), actor=Actor("cli", "bench"))
    return runtime, f"Bearer {create_api_key(db, 'bench')}"


def create(runtime: Runtime, body: dict[str, Any], authorization: str) -> Any:
    """The intake API's capture of `body` (FastAPI's parse of it included): its view."""
    return _create(runtime, RefundRequest.model_validate(body), authorization, None, KEYS)


def requests_for(runtime: Runtime, count: int, tag: str) -> list[dict[str, Any]]:
    sandbox = runtime.sandbox
    assert isinstance(sandbox, SandboxProcessor)
    bodies = []
    for i in range(count):
        email = f"{tag}-{i}@example.com"
        payment = sandbox.create_payment(
            amount=money.to_minor("30.00", "USD"),
            currency="USD",
            email=email,
            name="Bench Customer",
            created_at=clock.now() - timedelta(days=3),
        )
        bodies.append(
            {
                "payment": payment,
                "email": email,
                "currency": "USD",
                "amount": "20.00",
                "message": "The vase arrived broken, shattered in the box.",
            }
        )
    return bodies


APPROVER = "U0FIN1"  # a finance approver in the reference policy (limit 5,000)


def clicks_for(runtime: Runtime, key: str, count: int, tag: str) -> list[dict[str, Any]]:
    """`count` cases waiting for finance, each with its Approve button's token (as the bodies
    the click runner takes)."""
    bodies = requests_for(runtime, count, tag)
    for body in bodies:
        body["amount"] = "600.00"  # above what the policy pays by itself: finance decides
    sandbox = runtime.sandbox
    assert isinstance(sandbox, SandboxProcessor)
    with sandbox.db.write() as session:  # the payments large enough for it
        session.execute(
            update(SandboxPayment)
            .where(col(SandboxPayment.id).in_([b["payment"] for b in bodies]))
            .values(amount=money.to_minor("900.00", "USD"))
        )
    runtime.desk.jobs_elsewhere = True
    ids = [create(runtime, body, key)[0]["id"] for body in bodies]
    runtime.desk.jobs_elsewhere = False
    while runtime.desk.jobs.sweep():  # advanced to a person's turn, its card's jobs done
        pass
    clicks = []
    with runtime.db.read() as session:
        for case_id in ids:
            case = session.get(Case, case_id)
            assert case is not None and case.status == "awaiting_approval", case
            token = tokens.issue(runtime.desk.secret, case_id=case.id, action="approve",
                                 amount=case.amount, currency=case.currency,
                                 revision=case.revision, policy_version=case.policy_version,
                                 now=runtime.desk.now())  # fmt: skip
            clicks.append({"token": token})
    return clicks


# The whole request path through each FastAPI app, measured against each other.
APPS = ("bare app", "intake app")


def cpu_per_request(run: Callable[[dict[str, Any]], None], bodies: list[dict[str, Any]]) -> float:
    started = time.process_time()
    if isinstance(run, AsgiDriver):  # the round's requests on one running loop, as a server's
        run.run_all(bodies)
    else:
        for body in bodies:
            run(body)
    return 1000 * (time.process_time() - started) / len(bodies)


def bare_runner(url: str) -> Callable[[dict[str, Any]], None]:
    """The reference endpoint's own function, on its own engine, on the same database."""
    os.environ["DATABASE_URL"] = url
    import bare_app

    def run(body: dict[str, Any]) -> None:
        bare_app.create(bare_app.Body.model_validate(body))

    return run


class AsgiDriver:
    """An app's whole request path in this process, as uvicorn would call it once it has
    parsed the request (no socket, no HTTP parsing: the same for both apps, left out), on
    one event loop kept for all the requests.

    A round's requests run one after another in one task (`run_all`), as a server's event
    loop runs for all of its requests: the threads a request hands its work to (anyio's) are
    kept for the next while that task lives, and stopped when it ends. A loop run for each
    request (`__call__`) starts a thread for each, which no server does."""

    def __init__(
        self, app: Any, headers: dict[str, str], before: Callable[[], None] | None = None
    ) -> None:
        self.app = app
        self.headers = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        self.loop = asyncio.new_event_loop()
        self.before = before

    def enter(self, context: Any) -> None:
        self.loop.run_until_complete(context.__aenter__())

    def __call__(self, body: dict[str, Any]) -> None:
        self.run_all([body])

    def run_all(self, bodies: list[dict[str, Any]]) -> None:
        if self.before is not None:
            self.before()
        raws = [json.dumps(body).encode() for body in bodies]
        statuses = self.loop.run_until_complete(self._post_all(raws))
        assert all(status in (200, 201) for status in statuses), statuses

    async def _post_all(self, raws: list[bytes]) -> list[int]:
        return [await self._post(raw) for raw in raws]

    async def _post(self, raw: bytes) -> int:
        path = "/api/v1/refund-requests"
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(raw)).encode()), *self.headers]  # fmt: skip
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
                 "query_string": b"", "root_path": "", "headers": headers,
                 "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80),
                 "state": {}}  # fmt: skip
        messages = [{"type": "http.request", "body": raw, "more_body": False}]
        statuses: list[int] = []

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await asyncio.Event().wait()  # the client stays: nothing more comes
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])
            elif statuses and statuses[0] >= 300 and message.get("body"):
                raise AssertionError(f"{statuses[0]}: {message['body'][:500]!r}")

        await self.app(scope, receive, send)
        return statuses[0]


def app_runners(runtime: Runtime, secret_key: str) -> tuple[AsgiDriver, AsgiDriver]:
    """(bare, intake) through their FastAPI apps: Refund Desk's with its middleware, its key
    check, its intake gate; the jobs left for a job process, as `serve --job-processes`."""
    import bare_app

    from refund_desk.web.app import create_app

    runtime.settings.job_processes = 1
    app = create_app(runtime, scheduler=False)

    def jobs_elsewhere() -> None:
        runtime.desk.jobs_elsewhere = True

    intake = AsgiDriver(app, {"Authorization": f"Bearer {secret_key}"}, before=jobs_elsewhere)
    intake.enter(app.router.lifespan_context(app))
    return AsgiDriver(bare_app.app, {}), intake


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", help="an empty database (default: a new SQLite file)")
    args = parser.parse_args()
    url = args.database_url or f"sqlite:///{tempfile.mkdtemp()}/bench.db"
    runtime, key = setup(url)
    secret_key = create_api_key(runtime.db, "bench-app")
    statements = 0

    def _count(*_: Any) -> None:
        nonlocal statements
        statements += 1

    def intake(body: dict[str, Any]) -> None:
        runtime.desk.jobs_elsewhere = True
        view, _ = create(runtime, body, key)
        assert view["status"] == "received", view

    def pipeline(body: dict[str, Any]) -> None:
        runtime.desk.jobs_elsewhere = False
        view, _ = create(runtime, body, key)
        assert view["status"] == "refunded", view
        runtime.desk.jobs.sweep()  # and what the refund left to do: notifications, the customer

    bare = bare_runner(url)
    bare_app, intake_driver = app_runners(runtime, secret_key)

    def click(body: dict[str, Any]) -> None:
        runtime.desk.jobs_elsewhere = True  # its refund is left for a job process
        approvals.act(runtime.desk, token_value=body["token"], user=APPROVER)

    figures: dict[str, list[float]] = {
        n: [] for n in ("bare", "intake", "pipeline", "click", *APPS)
    }
    counted: dict[str, int] = {}
    runners = {"bare": bare, "intake": intake, "pipeline": pipeline, "click": click,
               "bare app": bare_app, "intake app": intake_driver}  # fmt: skip
    for round_ in range(args.rounds + 2):  # the first round warms up, the last counts
        counting = round_ == args.rounds + 1
        for name, run in runners.items():
            make = (
                partial(clicks_for, runtime, key)
                if name == "click"
                else partial(requests_for, runtime)
            )
            bodies = make(
                args.requests if not counting else 20, f"{name.replace(' ', '-')}{round_}"
            )
            if counting:  # statements are counted apart: a listener takes the hot statements
                # off their direct path (`storage/prepared.py`), and would change the CPU
                event.listen(Engine, "before_cursor_execute", _count)  # every engine
                statements = 0
                cpu_per_request(run, bodies)
                counted[name] = round(statements / len(bodies))
                event.remove(Engine, "before_cursor_execute", _count)
            else:
                cpu = cpu_per_request(run, bodies)
                if round_:
                    figures[name].append(cpu)
            if name in (
                "intake",
                "intake app",
            ):  # its cases' jobs, run now, unmeasured, not in a later sweep
                runtime.desk.jobs_elsewhere = False
                while runtime.desk.jobs.sweep():
                    pass
    print(f"{args.requests} requests x {args.rounds} rounds, {runtime.db.engine.dialect.name}")
    for name, values in figures.items():
        reference = "bare app" if name in APPS else "bare"
        base = statistics.median(figures[reference])
        cpu = statistics.median(values)
        print(
            f"  {name:<10} {cpu:7.2f} ms CPU/request  {cpu / base:5.1f}x {reference:<8}"
            f"  {counted[name]:3d} statements/request"
        )
    runtime.db.dispose()


if __name__ == "__main__":
    main()
