"""The web desk over 100,000 cases: its pages against the bare endpoint, in one run.

Seeds N decided cases by bulk insert (as `backtest_bench.py` does), files `--waiting` requests
through the real intake API so they wait for finance, and gives one case 50 audit records;
then, signed in as a finance approver, times in process (FastAPI's TestClient, one request at a
time, the same client for every route):

- the bare endpoint: `/healthz`, one `SELECT 1` through the same app and stack;
- `/desk`, my queue;
- `/desk/cases` filtered (status, rule, amount range) and ordered by amount;
- `/desk/cases/{id}`, the record of the case with 50 audit records.

Prints p50/p95 of each and the p95 ratio to the bare endpoint (targets: the queue and the list
within 10x, the record within 5x).

    python bench/desk_bench.py [--cases 100000] [--waiting 200] [--only sqlite|postgres]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from fastapi.responses import Response
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from starlette.requests import Request

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "tests" / "fixtures" / "acme.yaml"
SECRET = "bench-secret-" + "d" * 40
FINANCE = "U0FIN1"
TARGETS = {"queue": 10, "cases": 10, "record": 5}
PG_ADMIN = os.environ.get(
    "REFUND_DESK_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def _backtest_bench():  # type: ignore[no-untyped-def]
    path = ROOT / "bench" / "backtest_bench.py"
    spec = importlib.util.spec_from_file_location("backtest_bench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def signed_in(client: TestClient, secret: str, user: str) -> None:
    from refund_desk.web.desk import session

    response = Response()
    scope = {"type": "http", "scheme": "http", "path": "/", "headers": [], "app": client.app}
    session.start(response, Request(scope), secret, user, "Bench Finance")
    key, _, value = response.headers["set-cookie"].split(";", 1)[0].partition("=")
    client.cookies.set(key, value)


def timed(client: TestClient, url: str, n: int) -> list[float]:
    client.get(url)  # warm: templates compiled, caches filled
    out = []
    for _ in range(n):
        start = time.perf_counter()
        answer = client.get(url)
        out.append(time.perf_counter() - start)
        assert answer.status_code == 200, (url, answer.status_code, answer.text[:300])
    return out


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[18]


def measure(name: str, url: str, cases: int, waiting: int, rounds: int) -> None:
    from refund_desk import clock
    from refund_desk.api_keys import create_api_key
    from refund_desk.governance.versions import publish
    from refund_desk.runtime import build
    from refund_desk.settings import Settings
    from refund_desk.storage.audit import Actor
    from refund_desk.web.app import create_app

    runtime = build(
        Settings.model_validate({"DATABASE_URL": url, "REFUND_DESK_SECRET": SECRET}), migrate=True
    )
    seconds = _backtest_bench().seed(runtime.db, cases)
    with runtime.db.engine.begin() as conn:  # the outcomes a live desk holds, not all "decided"
        conn.execute(text("UPDATE cases SET status = 'refunded'"))
        conn.execute(text("UPDATE cases SET status = 'denied' WHERE id LIKE '%3' OR id LIKE '%7'"))
        conn.execute(text("UPDATE cases SET status = 'parked' WHERE id LIKE '%99'"))
    with runtime.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE" if runtime.db.is_sqlite else "VACUUM ANALYZE cases"))
    print(f"{name}: seeded {cases:,} decided cases in {seconds:.1f}s", flush=True)
    with runtime.db.write() as session:
        publish(session, runtime.desk.audit, source=POLICY.read_text(), actor=Actor("cli", "b"))
    key = create_api_key(runtime.db, "bench")
    client = TestClient(create_app(runtime, scheduler=False))
    sandbox = runtime.sandbox
    assert sandbox is not None
    ids = []
    for i in range(waiting):
        email = f"waiting{i}@example.com"
        payment = sandbox.create_payment(
            amount=90_000, currency="usd", email=email, created_at=clock.now() - timedelta(days=3)
        )
        body = {"payment": payment, "email": email, "currency": "USD", "amount": "600.00",
                "message": "The sofa arrived torn."}  # fmt: skip
        answer = client.post(
            "/api/v1/refund-requests", json=body, headers={"Authorization": f"Bearer {key}"}
        )
        assert answer.json()["status"] == "awaiting_approval", answer.text
        ids.append(answer.json()["id"])
    long_one = ids[0]
    with runtime.db.write() as session:  # 50 audit records on one case: notes of a long life
        for n in range(50 - _audit_count(runtime, long_one)):
            runtime.desk.audit.append(
                session,
                action="case.note",
                actor=Actor("human", FINANCE),
                case_id=long_one,
                payload={"n": n},
            )
    print(f"{name}: {waiting} cases wait for finance; {long_one} has 50 audit records", flush=True)
    signed_in(client, SECRET, FINANCE)
    routes = {
        "bare": "/healthz",
        "queue": "/desk",
        "cases": "/desk/cases?status=refunded&rule=large&min=100&max=2000&sort=largest",
        "record": f"/desk/cases/{long_one}",
    }
    for label, route in list(routes.items()):
        if client.get(route).status_code == 404:
            print(f"{name}: {label} ({route}) is not served here; left out", flush=True)
            del routes[label]
    times: dict[str, list[float]] = {k: [] for k in routes}
    for _ in range(rounds):  # alternate, so a noisy neighbour hits every route alike
        for label, route in routes.items():
            times[label] += timed(client, route, 25)
    bare = p95(times["bare"])
    for label, values in times.items():
        ratio = p95(values) / bare
        target = f" (target <= {TARGETS[label]}x)" if label in TARGETS else ""
        print(
            f"{name}: {label:<6} p50 {statistics.median(values) * 1000:7.2f} ms  "
            f"p95 {p95(values) * 1000:7.2f} ms  = {ratio:5.1f}x bare{target}",
            flush=True,
        )
    runtime.db.dispose()


def _audit_count(runtime, case_id: str) -> int:  # type: ignore[no-untyped-def]
    from sqlalchemy import func, select

    from refund_desk.storage.models import AuditRecord

    with runtime.db.read() as session:
        return int(
            session.scalar(
                select(func.count()).select_from(AuditRecord).where(AuditRecord.case_id == case_id)
            )
            or 0
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--waiting", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--only", choices=["sqlite", "postgres"])
    args = parser.parse_args()
    if args.only != "postgres":
        with tempfile.TemporaryDirectory() as tmp:
            measure("sqlite", f"sqlite:///{tmp}/bench.db", args.cases, args.waiting, args.rounds)
    if args.only != "sqlite":
        admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        name = f"rd_desk_bench_{os.getpid()}"
        try:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        except Exception as exc:
            print(f"postgres: not reachable at {PG_ADMIN} ({type(exc).__name__})", file=sys.stderr)
            return
        try:
            url = make_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
            measure("postgres", url, args.cases, args.waiting, args.rounds)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()


if __name__ == "__main__":
    main()
