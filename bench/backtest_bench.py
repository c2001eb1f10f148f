"""Backtest speed: cases per second replaying stored cases, on SQLite and PostgreSQL.

Seeds N cases (default 100,000) by bulk insert, with realistic frozen facts spread over the
last 30 days and the decision the reference policy made on them, then backtests a stricter
draft over them the way `/refund-policy backtest` does (keyset batches, compiled once,
one process). A second pass under tracemalloc compares peak memory for a 3-day and a 30-day
window (about a tenth of the cases, then all of them): flat means memory does not grow with
the number of cases.

    python bench/backtest_bench.py [--cases 100000] [--only sqlite|postgres]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import tracemalloc
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, insert, text
from sqlalchemy.engine import make_url

from refund_desk import clock
from refund_desk.cases.decide import decision_record
from refund_desk.governance.backtest import run_backtest
from refund_desk.policy import CompiledPolicy, parse_policy
from refund_desk.storage.db import Database
from refund_desk.storage.migrate import upgrade
from refund_desk.storage.models import Case, Payment

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "tests" / "fixtures" / "acme.yaml"
PG_ADMIN = os.environ.get(
    "REFUND_DESK_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REASONS = ["damaged", "defective", "not_received", "late", "changed_mind", "other"]
DISTINCT = 5000  # distinct fact sets, decided once each; cases cycle through them
PAYMENTS = 1000


def stricter(source: str) -> str:
    """The draft under test: small damaged orders refund themselves only up to $10."""
    text_ = source.replace("request.amount <= 50 and", "request.amount <= 10 and")
    return text_.replace("{amount: 20, reason: damaged}", "{amount: 5, reason: damaged}")


def fact_sets(n: int, seed: int = 11) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        captured = rnd.choice([1999, 4500, 12_000, 80_000, 250_000])
        amount = captured if rnd.random() < 0.7 else rnd.randint(100, captured * 2)
        out.append(
            {
                "request": {
                    "amount": amount,
                    "currency": "USD",
                    "reason": rnd.choice(REASONS),
                    "source": rnd.choice(["api", "web_form", "slack", "email"]),
                    "possible_duplicate": rnd.random() < 0.03,
                    "amount_source": "customer_input",
                    "reason_source": rnd.choice(["customer_input", "model_inference"]),
                },
                "order": {
                    "amount": captured,
                    "refunded": 0,
                    "refundable": captured,
                    "currency": "USD",
                    "age_days": rnd.randint(0, 120),
                },
                "customer": {
                    "verified": rnd.random() < 0.95,
                    "chargebacks_365d": 1 if rnd.random() < 0.02 else 0,
                    "refunds_90d": rnd.randint(0, 6),
                    "open_cases": rnd.randint(0, 2),
                },
                "advisor": {
                    "confidence": round(rnd.uniform(0.3, 1.0), 2),
                    "injection_suspected": rnd.random() < 0.01,
                },
                "evidence": {"count": rnd.randint(0, 3), "checked": 0},
            }
        )
    return out


def seed(db: Database, n: int) -> float:
    """Bulk-insert ``n`` decided cases over the last 30 days; returns seconds taken."""
    started = time.perf_counter()
    policy = CompiledPolicy.compile(parse_policy(POLICY.read_text()))
    facts = fact_sets(DISTINCT)
    decided = [decision_record(policy.evaluate(f)) for f in facts]
    now = clock.now()
    with db.engine.begin() as conn:
        conn.execute(
            insert(Payment),
            [
                {
                    "id": f"py_bench_{i}",
                    "processor": "sandbox",
                    "currency": "USD",
                    "amount": 250_000,
                    "refunded": 0,
                    "created_at": now,
                    "seen_at": now,
                }
                for i in range(PAYMENTS)
            ],
        )
    rnd = random.Random(5)
    batch = 10_000
    for start in range(0, n, batch):
        rows = []
        for i in range(start, min(n, start + batch)):
            k = i % DISTINCT
            created = now - timedelta(seconds=rnd.randint(0, 30 * 86400 - 60))
            rows.append(
                {
                    "id": f"case_bench_{i:08d}",
                    "revision": 3,
                    "status": "decided",
                    "source": "api",
                    "correlation_id": f"req_{i}",
                    "payment_id": f"py_bench_{i % PAYMENTS}",
                    "currency": "USD",
                    "amount": facts[k]["request"]["amount"],
                    "amount_source": "customer_input",
                    "email_enc": "x",
                    "email_hash": f"{i % 5000:064d}",
                    "customer_verified": True,
                    "possible_duplicate": False,
                    "policy_version": 1,
                    "facts": facts[k],
                    "decision": decided[k],
                    "escalation_level": 0,
                    "approval_round": 0,
                    "created_at": created,
                    "updated_at": created,
                }
            )
        with db.engine.begin() as conn:
            conn.execute(insert(Case), rows)
    # Steady state, as in a live database: statistics, and on PostgreSQL the visibility
    # hint bits the first scan after a bulk load would otherwise write.
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE cases" if not db.is_sqlite else "ANALYZE"))
    return time.perf_counter() - started


def measure(name: str, url: str, n: int) -> None:
    db = Database.from_url(url)
    upgrade(db.engine)
    seconds = seed(db, n)
    print(f"{name}: seeded {n:,} cases in {seconds:.1f}s", flush=True)
    draft = CompiledPolicy.compile(parse_policy(stricter(POLICY.read_text())))
    started = time.perf_counter()
    run = run_backtest(db, draft, label="bench", days=30)
    elapsed = time.perf_counter() - started
    assert run.summary["cases"] == n, run.summary["cases"]
    print(
        f"{name}: backtest of {n:,} cases in {elapsed:.2f}s = {n / elapsed:,.0f} cases/s "
        f"({run.summary['changed']:,} would change)",
        flush=True,
    )
    peaks = []
    for days in (3, 30):
        tracemalloc.start()
        window = run_backtest(db, draft, label="bench", days=days)
        peaks.append((days, window.summary["cases"], tracemalloc.get_traced_memory()[1]))
        tracemalloc.stop()
    shown = ", ".join(f"{c:,} cases ({d} days): {p / 1e6:.1f} MB" for d, c, p in peaks)
    print(f"{name}: peak traced memory {shown}", flush=True)
    db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--only", choices=["sqlite", "postgres"])
    args = parser.parse_args()
    if args.only != "postgres":
        with tempfile.TemporaryDirectory() as tmp:
            measure("sqlite", f"sqlite:///{tmp}/bench.db", args.cases)
    if args.only != "sqlite":
        admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        name = f"rd_backtest_bench_{os.getpid()}"
        try:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        except Exception as exc:
            print(f"postgres: not reachable at {PG_ADMIN} ({type(exc).__name__})", file=sys.stderr)
            return
        try:
            url = make_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
            measure("postgres", url, args.cases)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()


if __name__ == "__main__":
    main()
