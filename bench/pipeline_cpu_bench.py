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

Each request is a small damaged-item refund of a customer of its own, which the reference
policy (breaker off) refunds by itself. Prints CPU milliseconds per request (median of
`--rounds`), each as a multiple of bare, and the SQL statements per request.

    python bench/pipeline_cpu_bench.py [--requests 300] [--rounds 3] [--database-url EMPTY_DB_URL]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import Engine, event, select

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench" / "parts"))

from refund_desk import clock, money  # noqa: E402
from refund_desk.api_keys import create_api_key  # noqa: E402
from refund_desk.governance.versions import publish  # noqa: E402
from refund_desk.payments.sandbox import SandboxProcessor  # noqa: E402
from refund_desk.runtime import Runtime, build  # noqa: E402
from refund_desk.settings import Settings  # noqa: E402
from refund_desk.storage.audit import Actor  # noqa: E402
from refund_desk.storage.db import Database  # noqa: E402
from refund_desk.storage.migrate import upgrade  # noqa: E402
from refund_desk.storage.models import ApiKey  # noqa: E402
from refund_desk.web.routes.intake_api import _create  # noqa: E402

POLICY = ROOT / "tests" / "fixtures" / "acme.yaml"
SECRET = "bench-secret-" + "b" * 40


def bench_policy() -> str:
    """The reference policy without its circuit breaker (hundreds of refunds an hour here)."""
    raw = yaml.safe_load(POLICY.read_text())
    raw.pop("breaker", None)
    return yaml.safe_dump(raw, sort_keys=False)


def setup(url: str) -> tuple[Runtime, ApiKey]:
    db = Database.from_url(url)
    upgrade(db.engine)
    settings = Settings.model_validate({"DATABASE_URL": url, "REFUND_DESK_SECRET": SECRET})
    runtime = build(settings, db=db, processor=SandboxProcessor(db))
    with db.write() as session:
        publish(session, runtime.desk.audit, source=bench_policy(), actor=Actor("cli", "bench"))
    create_api_key(db, "bench")
    with db.read() as session:
        key = session.scalars(select(ApiKey)).one()
    return runtime, key


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


def cpu_per_request(run: Callable[[dict[str, Any]], None], bodies: list[dict[str, Any]]) -> float:
    started = time.process_time()
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", help="an empty database (default: a new SQLite file)")
    args = parser.parse_args()
    url = args.database_url or f"sqlite:///{tempfile.mkdtemp()}/bench.db"
    runtime, key = setup(url)
    statements = 0

    def _count(*_: Any) -> None:
        nonlocal statements
        statements += 1

    def intake(body: dict[str, Any]) -> None:
        runtime.desk.jobs_elsewhere = True
        view, _ = _create(runtime, body, key, None)
        assert view["status"] == "received", view

    def pipeline(body: dict[str, Any]) -> None:
        runtime.desk.jobs_elsewhere = False
        view, _ = _create(runtime, body, key, None)
        assert view["status"] == "refunded", view
        runtime.desk.jobs.sweep()  # and what the refund left to do: notifications, the customer

    bare = bare_runner(url)
    figures: dict[str, list[float]] = {"bare": [], "intake": [], "pipeline": []}
    counted: dict[str, int] = {}
    runners = {"bare": bare, "intake": intake, "pipeline": pipeline}
    for round_ in range(args.rounds + 2):  # the first round warms up, the last counts
        counting = round_ == args.rounds + 1
        for name, run in runners.items():
            bodies = requests_for(runtime, args.requests if not counting else 20, f"{name}{round_}")
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
            if name == "intake":  # its cases' jobs, run now, unmeasured, not in a later sweep
                runtime.desk.jobs_elsewhere = False
                while runtime.desk.jobs.sweep():
                    pass
    base = statistics.median(figures["bare"])
    print(f"{args.requests} requests x {args.rounds} rounds, {runtime.db.engine.dialect.name}")
    for name, values in figures.items():
        cpu = statistics.median(values)
        print(
            f"  {name:<9} {cpu:7.2f} ms CPU/request  {cpu / base:5.1f}x bare"
            f"  {counted[name]:3d} statements/request"
        )
    runtime.db.dispose()


if __name__ == "__main__":
    main()
