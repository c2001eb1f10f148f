"""Slack ack latency while intake load runs: Refund Desk beside a bare Bolt + FastAPI app.

Both servers get the same load from the same client: `throughput_bench.py`'s intake requests
(N by C concurrent connections) and, once that runs, 50 concurrent signed button clicks
(`block_actions`, Approve, by a finance approver on a case awaiting finance). Refund Desk
checks the approver's authority and records the approval in one transaction before it
acknowledges (the refund itself runs as a job); the bare app only verifies the signature and
acknowledges. Prints the acks' p50/p99 and the ratio. SQLite by default.

    python bench/slack_ack_bench.py [--clicks 50] [--requests 295] [--concurrency 16]
        [--database sqlite|postgres] [--job-processes N] [--profile DIR]

`--job-processes N` runs Refund Desk's jobs in N processes apart from the HTTP server
(`serve --job-processes N`); `--profile DIR` samples Refund Desk with py-spy while the clicks
and the load run (`parts/profile_summary.py` reads it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput_bench import (
    ROOT,
    SECRET,
    PostgresUrl,
    SqliteUrl,
    bodies_for,
    cli,
    drive,
    free_port,
    prepare,
    profile_of,
    start,
    stop,
)

from refund_desk.cases import tokens
from refund_desk.demo.slack.requests import sign

SIGNING_SECRET = "bench-signing-" + "s" * 30
APPROVER = "U0FIN1"


def click(token: str, n: int) -> str:
    payload = {
        "type": "block_actions",
        "team": {"id": "T0BENCH", "domain": "bench"},
        "user": {"id": APPROVER, "username": "felix", "name": "felix", "team_id": "T0BENCH"},
        "api_app_id": "A0BENCH",
        "token": "bench-verification-token",
        "container": {"type": "message", "message_ts": f"1700000000.{n:06d}",
                      "channel_id": "C0FINANCE", "is_ephemeral": False},
        "trigger_id": f"{n}.1.bench",
        "channel": {"id": "C0FINANCE", "name": "finance-approvals"},
        "message": {"type": "message", "ts": f"1700000000.{n:06d}", "text": "case"},
        "response_url": "https://hooks.slack.invalid/actions/bench",
        "actions": [{"action_id": "approve", "block_id": "decide", "type": "button",
                     "value": token, "action_ts": f"{time.time():.6f}"}],
    }  # fmt: skip
    return urlencode({"payload": json.dumps(payload)})


async def clicks_under_load(
    url: str, bodies: list[dict[str, Any]], headers: dict[str, str], concurrency: int,
    clicks: list[str],
) -> list[float]:  # fmt: skip
    """Start the intake load, then fire every click at once; the clicks' latencies."""
    load = asyncio.create_task(drive(url, bodies, headers, concurrency))
    await asyncio.sleep(0.5)  # the intake load is running
    limits = httpx.Limits(max_connections=len(clicks))
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:

        async def one(body: str) -> float:
            signed = {**sign(SIGNING_SECRET, body),
                      "Content-Type": "application/x-www-form-urlencoded"}  # fmt: skip
            began = time.perf_counter()
            response = await client.post("/slack/events", content=body, headers=signed)
            seconds = time.perf_counter() - began
            if response.status_code != 200:
                raise RuntimeError(f"click answered {response.status_code}: {response.text}")
            return seconds

        latencies = await asyncio.gather(*(one(c) for c in clicks))
    await load
    return list(latencies)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] * 1000


def fake_slack(cwd: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start(
        [sys.executable, "-m", "uvicorn", "fake_slack:app", "--app-dir",
         str(ROOT / "bench" / "parts"), "--port", str(port), "--log-level", "warning"],
        dict(os.environ), cwd, url,
    )  # fmt: skip
    return proc, f"{url}/api/"


def bare(database_url: str, args: argparse.Namespace, clicks: list[str]) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        fake, api = fake_slack(Path(tmp))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "DATABASE_URL": database_url, "SLACK_SIGNING_SECRET": SIGNING_SECRET,
               "SLACK_API_URL": api}  # fmt: skip
        proc = start(
            [sys.executable, "-m", "uvicorn", "bare_slack_app:app", "--app-dir",
             str(ROOT / "bench" / "parts"), "--port", str(port), "--log-level", "info"],
            env, Path(tmp), url,
        )  # fmt: skip
        try:
            bodies = bodies_for([f"py_bare{i:06d}" for i in range(args.requests + 1)])
            return asyncio.run(clicks_under_load(url, bodies, {}, args.concurrency, clicks))
        finally:
            stop(proc)
            stop(fake)


def refund_desk(database_url: str, args: argparse.Namespace) -> tuple[list[float], int, list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        fake, api = fake_slack(cwd)
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "REFUND_DESK_SECRET": SECRET,
            "SLACK_BOT_TOKEN": "xoxb-bench",
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": api,
        }
        try:
            key, payments = prepare(env, cwd, args.requests + 1)
            large = cli(
                env, cwd, "sandbox", "payment", "create", "--amount", "900.00", "--currency",
                "usd", "--email", "ada@example.com", "--age-days", "3",
                "--count", str(args.clicks),
            ).split()  # fmt: skip
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            serve = ["serve", "--port", str(port), "--job-processes", str(args.job_processes)]
            proc = start([sys.executable, "-m", "refund_desk", *serve], env, cwd, url)
            spy = None
            try:
                headers = {"Authorization": f"Bearer {key}"}
                cases = []
                with httpx.Client(base_url=url, timeout=30) as client:
                    for p in large:  # cases waiting for finance, as the clicks need them
                        body = {**bodies_for([p])[0], "amount": "600.00"}
                        answer = client.post(
                            "/api/v1/refund-requests",
                            json=body,
                            headers={**headers, "Prefer": "wait=10"},
                        ).json()
                        if answer["status"] != "awaiting_approval":
                            raise RuntimeError(f"a case for the clicks is {answer['status']}")
                        cases.append(answer["id"])
                clicks = [click(token_for(database_url, c), n) for n, c in enumerate(cases)]
                bodies = bodies_for(payments)
                spy = profile_of(proc, args.profile, "slack-acks") if args.profile else None
                latencies = asyncio.run(
                    clicks_under_load(url, bodies, headers, args.concurrency, clicks)
                )
            finally:
                if spy is not None:
                    spy.send_signal(signal.SIGINT)  # py-spy writes its file and exits
                    spy.wait(timeout=60)
                stop(proc)
            approved = count_approvals(database_url)
        finally:
            stop(fake)
        return latencies, approved, clicks


def token_for(database_url: str, case_id: str) -> str:
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            row = conn.execute(
                text("SELECT amount, currency, revision, policy_version FROM cases WHERE id = :id"),
                {"id": case_id},
            ).one()
    finally:
        engine.dispose()
    from refund_desk import clock

    return tokens.issue(
        SECRET,
        case_id=case_id,
        action="approve",
        amount=row.amount,
        currency=row.currency,
        revision=row.revision,
        policy_version=row.policy_version,
        now=clock.now(),
    )


def count_approvals(database_url: str) -> int:
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            return int(conn.scalar(text("SELECT count(*) FROM approvals")) or 0)
    finally:
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clicks", type=int, default=50)
    parser.add_argument("--requests", type=int, default=295)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--job-processes", type=int, default=0)
    parser.add_argument(
        "--profile", type=Path, help="sample Refund Desk with py-spy into this folder"
    )
    args = parser.parse_args()
    url_for = SqliteUrl if args.database == "sqlite" else PostgresUrl
    print(
        f"Slack acks ({args.database}): {args.clicks} concurrent clicks while "
        f"{args.requests} intake requests run, {args.concurrency} at a time, "
        f"{args.job_processes} job processes"
    )
    with url_for() as url:
        ours, approved, clicks = refund_desk(url, args)
    with url_for() as url:
        reference = bare(url, args, clicks)
    for label, values in (("bare Bolt + FastAPI", reference), ("Refund Desk", ours)):
        ratio = pct(values, 99) / pct(reference, 99)
        versus = f"   ratio {ratio:5.2f} (p99)" if values is ours else ""
        print(
            f"  {label:<22} p50 {pct(values, 50):7.1f} ms   p99 {pct(values, 99):7.1f} ms   "
            f"max {max(values) * 1000:7.1f} ms{versus}"
        )
    print(f"  approvals recorded by Refund Desk: {approved} of {args.clicks}")


if __name__ == "__main__":
    main()
