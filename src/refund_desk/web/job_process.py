"""Job processes: the sweeps of the jobs table in processes of their own, apart from HTTP.

`serve --job-processes N` starts N `refund-desk worker` processes beside the server at a lower
OS priority, so requests win the CPU, and the server runs no jobs itself: work it creates is
committed as due at once (`Desk.jobs_elsewhere`). A job process looks for due work every
`POLL_SECONDS` with one short read, sweeps when there is some, and runs what a job queues at
once, as a server's worker thread does. Any number of them share one database (claims use
`FOR UPDATE SKIP LOCKED` on PostgreSQL; on SQLite they take turns as the one writer). A job
process that dies stops renewing its leases; its jobs are taken over when they run out, and
`serve` starts a new process in its place.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping

from refund_desk import clock
from refund_desk.bot.app import build_surface
from refund_desk.runtime import Runtime, install_jobs
from refund_desk.web.app import Sweeper

log = logging.getLogger(__name__)

POLL_SECONDS = 0.05  # how soon a job process notices work committed by another process
NICENESS = 5  # job processes yield the CPU to the HTTP server
RESTART_SECONDS = 1.0
PR_SET_PDEATHSIG = 1  # prctl(2)


def run(runtime: Runtime, stop: threading.Event) -> None:
    """Run the jobs until `stop` is set; then finish the jobs already running (each within
    its lease) and leave the rest to the other processes."""
    install_jobs(runtime, slack=build_surface(runtime.desk, runtime.settings))
    sweeper = Sweeper(runtime)
    runtime.desk.wake = sweeper.wake  # what a job queues runs at once, here
    sweeper.start()
    log.info("job process %s running", runtime.desk.jobs.owner)
    try:
        while not stop.wait(POLL_SECONDS):
            if sweeper.running.locked():
                continue  # a sweep goes on until nothing is due: it sees new work itself
            try:
                due = runtime.desk.jobs.next_due()
            except Exception:  # the database is away: the scheduler's sweeps keep trying
                log.warning("could not look for due jobs", exc_info=True)
                continue
            if due is not None and due <= clock.now():
                sweeper.wake()
    finally:
        runtime.desk.wake = None
        sweeper.stop(timeout=runtime.desk.jobs.lease.total_seconds())


class SignalledStop(threading.Event):
    """`run`'s stop in a process stopped by signals (SIGTERM from `serve`, Ctrl-C).

    A signal handler runs in the main thread between any two of its instructions, so it must
    take no lock: not the event's (`set()`), which that very thread may hold (inside `wait`,
    or inside a first handler that a second signal interrupted), nor the one starting a
    thread takes. `handler` only flips a flag, which `wait` and `is_set` look at; `run`
    waits with a timeout, so it stops within `POLL_SECONDS`."""

    def __init__(self) -> None:
        super().__init__()
        self._signalled = False

    def handler(self, *_: object) -> None:
        self._signalled = True  # no lock: see the class

    def is_set(self) -> bool:
        return self._signalled or super().is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._signalled or super().wait(timeout) or self._signalled


def _in_child() -> None:  # pragma: no cover - runs in the child before exec
    """A lower priority; and on Linux, SIGTERM when the server goes away however it ends
    (uvicorn ends the process with the signal it was stopped by), so none is left behind."""
    os.nice(NICENESS)
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class JobProcesses:
    """The job processes `serve` keeps beside itself: started, restarted if one exits, and
    stopped (SIGTERM: each finishes the jobs it is running) when the server stops."""

    def __init__(self, count: int, env: Mapping[str, str]) -> None:
        self.count = count
        self.env = dict(env)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="job-processes", daemon=True)

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "refund_desk", "worker"],
            env=self.env,
            preexec_fn=_in_child if hasattr(os, "nice") else None,
        )

    def start(self) -> None:
        self.procs = [self._spawn() for _ in range(self.count)]
        self._watcher.start()

    def _watch(self) -> None:
        while not self.stopping.wait(RESTART_SECONDS):
            for i, proc in enumerate(self.procs):
                code = proc.poll()
                if code is not None and not self.stopping.is_set():
                    log.error("job process %s exited with %s; starting another", proc.pid, code)
                    self.procs[i] = self._spawn()

    def stop(self, timeout: float) -> None:
        self.stopping.set()
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
