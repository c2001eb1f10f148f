"""Start `refund-desk demo` in its own process, as a new user would, and read what it prints."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ADDRESS = re.compile(r"open (http://\S+)")
SAMPLES = 10  # the demo's sample stream (refund_desk.demo.runner.SAMPLES)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REFUND_DESK_", "DATABASE_URL", "SLACK_", "STRIPE_", "OPENAI_"))
    }


class Demo:
    def __init__(self, directory: Path, *, stream_seconds: float = 20) -> None:
        self.dir = directory
        self.port = free_port()
        self.log = directory.parent / f"demo-{self.port}.log"
        with self.log.open("w") as out:  # a file, not a pipe: a full pipe would block it
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "refund_desk", "demo", "--port", str(self.port),
                 "--dir", str(directory), "--stream-seconds", str(stream_seconds)],
                env=clean_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )  # fmt: skip
        self.url = self._wait_for_address()
        self.base = self.url.removesuffix("/sandbox/")

    def _wait_for_address(self, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = ADDRESS.search(self.log.read_text())
            if found:
                return found.group(1)
            if self.proc.poll() is not None:
                raise AssertionError(f"the demo exited: {self.log.read_text()}")
            time.sleep(0.1)
        self.stop()
        raise AssertionError(f"the demo printed no address: {self.log.read_text()}")

    def state(self, user: str = "U0OPS1") -> dict[str, Any]:
        response = httpx.get(f"{self.base}/sandbox/state", params={"user": user}, timeout=10)
        response.raise_for_status()
        return dict(response.json())

    def case(self, case_id: str) -> dict[str, Any]:
        """The case as the sandbox page lists it (its record is the desk's)."""
        found = [c for c in self.state()["cases"] if c["id"] == case_id]
        assert found, f"{case_id} is not among the sandbox's newest cases"
        return dict(found[0])

    def wait_for_stream(self, timeout: float = 90) -> list[dict[str, Any]]:
        """Until every sample request is a case and none is still being worked on."""
        deadline = time.monotonic() + timeout
        cases: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            cases = [c for c in self.state()["cases"] if c["source"] in ("api", "slack")]
            busy = [
                c for c in cases if c["status"] in ("received", "advised", "approved", "executing")
            ]
            if len(cases) >= SAMPLES and not busy:
                return cases
            time.sleep(0.5)
        raise AssertionError(f"the sample stream did not finish: {cases}")

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**clean_env(), "DATABASE_URL": f"sqlite:///{self.dir / 'demo.db'}"}
        return subprocess.run(
            [sys.executable, "-m", "refund_desk", *args],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.log.read_text()
