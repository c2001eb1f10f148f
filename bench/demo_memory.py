"""Memory of the demo server after its sample stream (the limit is 250 MB RSS).

Starts `refund-desk demo` in its own process on a free port and a temporary folder, waits until
every sample request is a case and none is still being worked on, then reads VmRSS (and the
peak, VmHWM) from /proc.

    python bench/demo_memory.py [--stream-seconds 20]
"""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

SAMPLES = 10
LIMIT_MB = 250
BUSY = ("received", "advised", "approved", "executing")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for {pid}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream-seconds", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="demo-bench-") as tmp:
        log = Path(tmp) / "demo.log"
        port = free_port()
        with log.open("w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "refund_desk", "demo", "--port", str(port),
                 "--dir", str(Path(tmp) / "data"), "--stream-seconds", str(args.stream_seconds)],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            started = time.monotonic()
            while not re.search(r"open http://", log.read_text()):
                if proc.poll() is not None or time.monotonic() - started > 60:
                    print(log.read_text(), file=sys.stderr)
                    return 1
                time.sleep(0.1)
            ready = time.monotonic() - started
            deadline = time.monotonic() + args.stream_seconds + 60
            while time.monotonic() < deadline:
                state = httpx.get(
                    f"http://127.0.0.1:{port}/sandbox/state", params={"user": "U0OPS1"}
                ).json()
                cases = state["cases"]
                if len(cases) >= SAMPLES and not any(c["status"] in BUSY for c in cases):
                    break
                time.sleep(0.5)
            else:
                print("the sample stream did not finish", file=sys.stderr)
                return 1
            rss, peak = proc_mb(proc.pid, "VmRSS"), proc_mb(proc.pid, "VmHWM")
        finally:
            proc.terminate()
            proc.wait(timeout=15)
    verdict = "ok" if rss < LIMIT_MB else "OVER THE LIMIT"
    print(
        f"demo: address printed after {ready:.1f}s; after the sample stream "
        f"({SAMPLES} requests) RSS {rss:.0f} MB, peak {peak:.0f} MB "
        f"(limit {LIMIT_MB} MB: {verdict})"
    )
    return 0 if rss < LIMIT_MB else 1


if __name__ == "__main__":
    sys.exit(main())
