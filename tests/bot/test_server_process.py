"""The real server in its own process: starts with no configuration, survives a power cut.

These drive the product only through its external contract: the CLI and HTTP.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import ACME

pytestmark = pytest.mark.slow


class Env:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("REFUND_DESK_", "DATABASE_URL", "SLACK_", "STRIPE_", "OPENAI_"))
        }
        self.env.update({"REFUND_DESK_SWEEP_SECONDS": "1", "REFUND_DESK_LEASE_SECONDS": "2"})

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "refund_desk", *args],
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert result.returncode == 0, result.stderr
        return result

    def serve(self) -> tuple[subprocess.Popen[str], str]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, "-m", "refund_desk", "serve", "--port", str(port)],
            cwd=self.dir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"server exited: {proc.stdout.read() if proc.stdout else ''}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    return proc, url
            except httpx.HTTPError:
                time.sleep(0.1)
        proc.kill()
        raise AssertionError("server did not come up")


@pytest.fixture()
def env(tmp_path: Path) -> Iterator[Env]:
    yield Env(tmp_path)


def _stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.stdout.read() if proc.stdout else ""


def test_starts_on_sqlite_with_no_configuration_and_generates_its_secret(env: Env) -> None:
    proc, url = env.serve()
    try:
        assert httpx.get(f"{url}/healthz").json() == {"status": "ok"}
    finally:
        output = _stop(proc)
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
    key = env.cli("api-key", "create", "--name", "shop").stdout.strip()
    payment = env.cli(
        "sandbox",
        "payment",
        "create",
        "--amount",
        "30.00",
        "--currency",
        "usd",
        "--email",
        "ada@example.com",
        "--age-days",
        "2",
    ).stdout.strip()
    env.cli("sandbox", "fault", "crash-after-success", "--times", "1")
    body: dict[str, Any] = {
        "payment": payment,
        "email": "ada@example.com",
        "currency": "USD",
        "amount": "20.00",
        "message": "The mug arrived broken.",
    }
    headers = {"Authorization": f"Bearer {key}"}

    proc, url = env.serve()
    with pytest.raises(httpx.HTTPError):
        httpx.post(f"{url}/api/v1/refund-requests", json=body, headers=headers, timeout=30)
    assert proc.wait(timeout=15) == 86  # the sandbox's power cut
    _stop(proc)
    shown = json.loads(env.cli("sandbox", "payment", "show", payment).stdout)
    assert len(shown["refunds"]) == 1  # the processor refunded before the power went

    proc, url = env.serve()
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
        _stop(proc)
    shown = json.loads(env.cli("sandbox", "payment", "show", payment).stdout)
    assert len(shown["refunds"]) == 1
    assert "ok:" in env.cli("audit", "verify").stdout
