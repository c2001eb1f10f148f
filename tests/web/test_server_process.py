"""The real server in its own process: starts with no configuration, survives a power cut.

These drive the product only through its external contract: the CLI and HTTP.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import ACME
from tests.process_helpers import Env

pytestmark = pytest.mark.slow


@pytest.fixture()
def env(tmp_path: Path) -> Iterator[Env]:
    yield Env(tmp_path)


def test_starts_on_sqlite_with_no_configuration_and_generates_its_secret(env: Env) -> None:
    proc, url = env.serve()
    try:
        assert httpx.get(f"{url}/healthz").json() == {"status": "ok"}
    finally:
        output = env.stop(proc)
    secret = env.dir / "refund-desk.db.secret"
    assert secret.exists() and (secret.stat().st_mode & 0o777) == 0o600
    assert "generated a new REFUND_DESK_SECRET" in output


def test_serve_refuses_several_workers_on_sqlite(env: Env) -> None:
    result = env.cli("serve", "--workers", "2", check=False)
    assert result.returncode == 2
    assert "SQLite supports one worker" in result.stderr


def test_postgres_without_a_secret_is_a_clear_startup_error(env: Env) -> None:
    env.env["DATABASE_URL"] = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    result = env.cli("serve", check=False)
    assert result.returncode == 2
    assert "REFUND_DESK_SECRET must be set" in result.stderr


def test_power_cut_after_the_processor_refunded_ends_with_one_refund(env: Env) -> None:
    env.cli("db", "upgrade")
    env.cli("policy", "publish", str(ACME))
    key = env.api_key()
    payment = env.payment("30.00", "ada@example.com", age_days=2)
    env.cli("sandbox", "fault", "crash-after-success", "--times", "1")
    body: dict[str, Any] = {
        "payment": payment,
        "email": "ada@example.com",
        "currency": "USD",
        "amount": "20.00",
        "message": "The mug arrived broken.",
    }
    headers = {"Authorization": f"Bearer {key}"}

    proc, url = env.serve("--job-processes", "0")  # the jobs on its threads: the cut takes it down
    with pytest.raises(httpx.HTTPError):  # the power goes while the answer waits for the refund
        httpx.post(
            f"{url}/api/v1/refund-requests",
            json=body,
            headers={**headers, "Prefer": "wait=10"},
            timeout=30,
        )
    assert proc.wait(timeout=15) == 86  # the sandbox's power cut
    env.stop(proc)
    shown = json.loads(env.cli("sandbox", "payment", "show", payment).stdout)
    assert len(shown["refunds"]) == 1  # the processor refunded before the power went

    proc, url = env.serve("--job-processes", "0")
    try:
        case_id = shown["refunds"][0]["metadata"]["case_id"]
        deadline = time.monotonic() + 30
        case: dict[str, Any] = {}
        while time.monotonic() < deadline:
            case = httpx.get(f"{url}/api/v1/cases/{case_id}", headers=headers).json()
            if case["status"] == "refunded":
                break
            time.sleep(0.2)
        assert case["status"] == "refunded", case
        assert [r["amount"] for r in case["refunds"]] == ["20.00"]
    finally:
        env.stop(proc)
    shown = json.loads(env.cli("sandbox", "payment", "show", payment).stdout)
    assert len(shown["refunds"]) == 1
    assert "ok:" in env.cli("audit", "verify").stdout


def test_a_busy_server_stops_promptly_and_leaves_nothing_half_done(env: Env) -> None:
    env.cli("db", "upgrade")
    env.cli("policy", "publish", str(ACME))
    key = env.api_key()
    payments = [env.payment("30.00", "ada@example.com") for _ in range(6)]
    proc, url = env.serve()
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, timeout=30) as client:
        for payment in payments:
            body = {
                "payment": payment,
                "email": "ada@example.com",
                "currency": "USD",
                "amount": "20.00",
                "message": "It arrived broken.",
            }
            assert (
                client.post("/api/v1/refund-requests", json=body, headers=headers).status_code
                == 201
            )
    started = time.monotonic()
    proc.terminate()
    assert proc.wait(timeout=20) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal
    assert time.monotonic() - started < 10
    assert "ok:" in env.cli("audit", "verify").stdout
