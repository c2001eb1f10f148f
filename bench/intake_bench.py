"""Intake throughput through HTTP, with decisions, refunds and audit, on SQLite and PostgreSQL.

Starts `refund-desk serve` in its own process, publishes the reference policy, creates one
sandbox payment per request, and fires small damaged-item requests from a thread pool. Every
request sends `Prefer: wait=10`, so its answer comes once it is decided by the policy,
refunded on the sandbox processor, and audited (six audit records each). Prints requests per
second and latency percentiles, then checks the audit chain.

    python bench/intake_bench.py [--requests 400] [--concurrency 16] [--only sqlite|postgres]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import yaml
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "tests" / "fixtures" / "acme.yaml"
PG_ADMIN = os.environ.get(
    "REFUND_DESK_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
SECRET = "bench-secret-" + "b" * 40


def cli(env: dict[str, str], cwd: Path, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "refund_desk", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def make_payments(env: dict[str, str], n: int) -> list[str]:
    os.environ.update(env)
    from refund_desk.runtime import build
    from refund_desk.settings import load_settings

    load_settings.cache_clear()
    runtime = build(load_settings())
    sandbox = runtime.sandbox
    assert sandbox is not None
    ids = [
        sandbox.create_payment(amount=3000, currency="usd", email=f"c{i}@example.com")
        for i in range(n)
    ]
    runtime.db.dispose()
    return ids


def start_server(env: dict[str, str], cwd: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "refund_desk", "serve", "--port", str(port)],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not start")


def run(label: str, database_url: str, requests: int, concurrency: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        env = {**os.environ, "DATABASE_URL": database_url, "REFUND_DESK_SECRET": SECRET}
        cli(env, cwd, "db", "upgrade")
        # The reference policy without its circuit breaker: the bench refunds hundreds an hour.
        raw = yaml.safe_load(POLICY.read_text())
        raw.pop("breaker", None)
        policy = cwd / "policy.yaml"
        policy.write_text(yaml.safe_dump(raw, sort_keys=False))
        cli(env, cwd, "policy", "publish", str(policy))
        key = cli(env, cwd, "api-key", "create", "--name", "bench")
        payments = make_payments(env, requests)
        proc, url = start_server(env, cwd)
        # The answer waits for the outcome: each request is decided, refunded and audited.
        headers = {"Authorization": f"Bearer {key}", "Prefer": "wait=10"}
        latencies: list[float] = []
        statuses: dict[str, int] = {}
        try:
            with httpx.Client(
                base_url=url, timeout=60, limits=httpx.Limits(max_connections=concurrency)
            ) as client:

                def one(i: int) -> None:
                    body = {
                        "payment": payments[i],
                        "email": f"c{i}@example.com",
                        "currency": "USD",
                        "amount": "20.00",
                        "message": "It arrived broken.",
                    }
                    start = time.perf_counter()
                    response = client.post("/api/v1/refund-requests", json=body, headers=headers)
                    latencies.append(time.perf_counter() - start)
                    status = response.json().get("status", f"http {response.status_code}")
                    statuses[status] = statuses.get(status, 0) + 1

                one(0)  # warm up
                latencies.clear()
                statuses.clear()
                started = time.perf_counter()
                with ThreadPoolExecutor(concurrency) as pool:
                    list(pool.map(one, range(1, requests)))
                elapsed = time.perf_counter() - started
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        verify = cli(env, cwd, "audit", "verify")
        q = statistics.quantiles(latencies, n=100)
        print(
            f"{label:<10} {len(latencies) / elapsed:8.1f} req/s   p50 {q[49] * 1000:6.1f} ms   "
            f"p95 {q[94] * 1000:6.1f} ms   p99 {q[98] * 1000:6.1f} ms   "
            f"outcomes {statuses}   audit: {verify}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--only", choices=["sqlite", "postgres"])
    args = parser.parse_args()
    print(
        f"intake: {args.requests} requests, {args.concurrency} concurrent clients, "
        "each decided + refunded + audited (one server process)"
    )
    if args.only != "postgres":
        with tempfile.TemporaryDirectory() as tmp:
            run("sqlite", f"sqlite:///{tmp}/bench.db", args.requests, args.concurrency)
    if args.only != "sqlite":
        name = f"rd_bench_{os.getpid()}"
        admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        except Exception as exc:
            print(f"postgres   skipped: {PG_ADMIN} not reachable ({type(exc).__name__})")
            return
        try:
            url = PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
            run("postgres", url, args.requests, args.concurrency)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


if __name__ == "__main__":
    main()
