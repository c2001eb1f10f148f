"""What operations cost: JSON log lines on every refund, and tracing switched off.

Runs refund requests in process (decided, refunded on the sandbox, audited: each writes about
ten log lines) with INFO lines going out as JSON, against the same requests with logging held
at WARNING (the reference), alternating rounds in one run; then a span site with tracing off
against a bare `nullcontext()`. Prints each figure and the ratio.

    python bench/ops_bench.py [--requests 200] [--rounds 4]
"""

from __future__ import annotations

import argparse
import io
import logging
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "tests" / "fixtures" / "acme.yaml"
SECRET = "bench-secret-" + "b" * 40


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()

    from refund_desk import clock, logs, tracing
    from refund_desk.api_keys import create_api_key
    from refund_desk.governance.versions import publish
    from refund_desk.runtime import build
    from refund_desk.settings import Settings
    from refund_desk.storage.audit import Actor
    from refund_desk.web.app import create_app

    folder = Path(tempfile.mkdtemp(prefix="ops-bench-"))
    url = f"sqlite:///{folder / 'bench.db'}"
    runtime = build(
        Settings.model_validate({"DATABASE_URL": url, "REFUND_DESK_SECRET": SECRET}), migrate=True
    )
    with runtime.db.write() as session:
        source = POLICY.read_text().replace(  # the breaker would stop a burst this size
            "max_refunds_per_hour: 200, max_amount_per_hour: 20000",
            "max_refunds_per_hour: 100000, max_amount_per_hour: 100000000",
        )
        publish(session, runtime.desk.audit, source=source, actor=Actor("cli", "b"))
    key = create_api_key(runtime.db, "bench")
    client = TestClient(create_app(runtime, scheduler=False))
    sandbox = runtime.sandbox
    assert sandbox is not None
    sink = io.StringIO()

    count = iter(range(1_000_000))

    def one() -> float:
        email = f"bench{next(count)}@example.com"
        payment = sandbox.create_payment(
            amount=3000, currency="usd", email=email,
            created_at=clock.now() - timedelta(days=2),
        )  # fmt: skip
        start = time.perf_counter()
        response = client.post(
            "/api/v1/refund-requests",
            json={"payment": payment, "email": email, "currency": "USD",
                  "amount": "20.00", "message": "It arrived broken."},
            headers={"Authorization": f"Bearer {key}"},
        )  # fmt: skip
        elapsed = time.perf_counter() - start
        assert response.status_code == 201, response.text
        assert response.json()["status"] == "refunded", response.json()["decision"]
        return elapsed

    per_round = max(1, args.requests // args.rounds)
    timings: dict[str, list[float]] = {"warning only (reference)": [], "JSON lines": []}
    for _ in range(3):
        one()  # warm up
    for _ in range(args.rounds):
        for label in timings:
            if label == "JSON lines":
                logs.configure(stream=sink, fmt="json")
            else:
                logging.getLogger().handlers.clear()
                logging.getLogger().setLevel(logging.WARNING)
            timings[label] += [one() for _ in range(per_round)]
            sink.seek(0)
            sink.truncate()
    lines_per_request = _count_lines(logs, one)
    logging.getLogger().handlers.clear()

    ref = statistics.median(timings["warning only (reference)"])
    print(f"refund requests in process, {per_round * args.rounds} each, SQLite, median:")
    for label, values in timings.items():
        median = statistics.median(values)
        print(f"  {label:<26} {median * 1000:7.2f} ms   ratio {median / ref:5.3f}")
    print(f"  log lines per refund request: {lines_per_request}")

    assert not tracing.enabled()
    n = 1_000_000
    start = time.perf_counter()
    for _ in range(n):
        with nullcontext():
            pass
    bare = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(n):
        with tracing.span("job advance", case_id="case_1"):
            pass
    off = time.perf_counter() - start
    print(f"span site with tracing off, {n:,} times:")
    print(f"  nullcontext() (reference)  {bare / n * 1e9:7.1f} ns")
    print(f"  tracing.span()             {off / n * 1e9:7.1f} ns   ratio {off / bare:5.2f}")
    runtime.db.dispose()


def _count_lines(logs, one) -> int:  # type: ignore[no-untyped-def]
    sink = io.StringIO()
    logs.configure(stream=sink, fmt="json")
    one()
    return len(sink.getvalue().splitlines())


if __name__ == "__main__":
    sys.exit(main())
