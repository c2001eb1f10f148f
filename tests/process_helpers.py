"""Run the real CLI and server in their own processes, configured only by the environment."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


class Env:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("REFUND_DESK_", "DATABASE_URL", "SLACK_", "STRIPE_", "OPENAI_"))
        }
        self.env.update({"REFUND_DESK_SWEEP_SECONDS": "1", "REFUND_DESK_LEASE_SECONDS": "2"})
        self.logs: dict[int, Path] = {}

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

    def api_key(self) -> str:
        return self.cli("api-key", "create", "--name", "shop").stdout.strip()

    def payment(self, amount: str, email: str, *, age_days: int = 0) -> str:
        """A sandbox payment made through the CLI; returns its id."""
        return self.cli(
            "sandbox",
            "payment",
            "create",
            "--amount",
            amount,
            "--currency",
            "usd",
            "--email",
            email,
            "--age-days",
            str(age_days),
        ).stdout.strip()

    def serve(self, *args: str) -> tuple[subprocess.Popen[str], str]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        log = self.dir / f"server-{port}.log"  # a file, not a pipe: a full pipe would block it
        with log.open("w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "refund_desk", "serve", "--port", str(port), *args],
                cwd=self.dir,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
        self.logs[proc.pid] = log
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"server exited: {log.read_text()}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    return proc, url
            except httpx.HTTPError:
                time.sleep(0.1)
        proc.kill()
        raise AssertionError("server did not come up")

    def stop(self, proc: subprocess.Popen[str]) -> str:
        """Stop a server (if it still runs) and return what it printed."""
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        log = self.logs.get(proc.pid)
        return log.read_text() if log and log.exists() else ""
