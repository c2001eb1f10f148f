"""Refund Desk's intake and end-to-end refunds beside a bare FastAPI endpoint, same client.

For each database (SQLite, PostgreSQL) it starts, one after the other, `bare_app.py` (FastAPI,
pydantic, one SQLAlchemy INSERT per request) and `refund-desk serve`, and drives both with the
same asyncio client: N requests (default 295) by C concurrent keep-alive connections (16).
For Refund Desk every request is a small damaged-item refund the reference policy pays by
itself, so it also measures end to end: from the first request until every case is refunded
on the sandbox processor. It prints req/s, p50/p99, and each figure's ratio to the bare
endpoint's req/s in the same run; at the end `audit verify` must pass.

    python bench/throughput_bench.py [--requests 295] [--concurrency 16]
        [--only sqlite|postgres] [--workers 1,2] [--job-processes] [--http-processes N]
        [--wait]

`--workers 1,2` runs Refund Desk on PostgreSQL once per worker count (`serve --workers N`);
`--job-processes` runs the jobs in processes apart from one HTTP process: the worker counts
are then job processes (`serve --job-processes N`; SQLite: one, or the counts of
`--sqlite-job-processes 1,2`; on PostgreSQL `--http-processes N` runs N HTTP processes beside
them, `serve --workers N --job-processes M`);
`--wait` adds a run where every client sends `Prefer: wait=10` and gets the outcome in the
answer; `--profile DIR` samples the Refund Desk server with py-spy during each run (collapsed
stacks, one file per run; `bench/parts/profile_summary.py` reads them).

After each Refund Desk run a line splits the CPU, in % of one core, by role (the server's
first process, its other processes, PostgreSQL's processes on this machine, the client)
over the intake burst and over the time after it until every case is refunded: which of them
had the cores, and whether the cores were full.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "tests" / "fixtures" / "acme.yaml"
PG_ADMIN = os.environ.get(
    "REFUND_DESK_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
SECRET = "bench-secret-" + "b" * 40


@dataclass
class Load:
    count: int
    seconds: float
    latencies: list[float]
    outcomes: Counter[str]
    cpu_ms: float | None = None  # the server's CPU time per request (all its processes)
    root_cpu_ms: float | None = None  # of which its first process (the HTTP one, if split)
    # Each role's CPU seconds when the counted requests began and ended (`roles`).
    roles_began: dict[str, float] | None = None
    roles_ended: dict[str, float] | None = None

    @property
    def rate(self) -> float:
        return self.count / self.seconds

    def pct(self, p: int) -> float:
        return statistics.quantiles(self.latencies, n=100)[p - 1] * 1000

    def line(self, label: str, reference: float | None) -> str:
        ratio = f"  ratio {self.rate / reference:5.2f}" if reference else ""
        cpu = ""
        if self.cpu_ms is not None and self.root_cpu_ms is not None:
            cpu = f"   server CPU {self.cpu_ms:5.1f} ms/req"
            if abs(self.cpu_ms - self.root_cpu_ms) > 0.05:
                cpu += f" ({self.root_cpu_ms:.1f} in its first process)"
        return (
            f"  {label:<28} {self.rate:7.1f} req/s   p50 {self.pct(50):7.1f} ms   "
            f"p99 {self.pct(99):7.1f} ms{ratio}   {dict(self.outcomes)}{cpu}"
        )


def cpu_seconds(pid: int, *, alone: bool = False) -> float | None:
    """CPU time (user + system) of `pid` and its live descendants (`alone`: of `pid` only),
    from Linux's /proc; None where there is no /proc. What the server spends, apart from the
    client on the same cores."""
    proc = Path("/proc")
    if not (proc / str(pid) / "stat").exists():
        return None
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended meanwhile
        child = int(stat.parent.name)
        parents[child] = int(fields[1])
        times[child] = (int(fields[11]) + int(fields[12])) / tick
    tree, grew = {pid}, not alone
    while grew:
        more = {child for child, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(times.get(p, 0.0) for p in tree)


def roles(pid: int, *, postgres: bool = True) -> dict[str, float] | None:
    """CPU seconds so far by role, from /proc (None where there is none): the server's first
    process (`http`), its other processes (`jobs`: job processes, or more HTTP workers), the
    PostgreSQL server's processes on this machine (`postgres`), and this client (`client`)."""
    root = cpu_seconds(pid, alone=True)
    tree = cpu_seconds(pid)
    if root is None or tree is None:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    database = 0.0
    for cmdline in Path("/proc").glob("[0-9]*/cmdline") if postgres else ():
        try:
            if not cmdline.read_bytes().startswith(b"postgres"):
                continue
            fields = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        database += (int(fields[11]) + int(fields[12])) / tick
    client = sum(os.times()[:2])
    found = {"http": root, "jobs": tree - root, "postgres": database, "client": client}
    return found if postgres else {k: v for k, v in found.items() if k != "postgres"}


def shares(began: dict[str, float], ended: dict[str, float], seconds: float) -> str:
    """Each role's CPU between two `roles` snapshots, in % of one core."""
    return ", ".join(f"{role} {100 * (ended[role] - began[role]) / seconds:.0f}" for role in began)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cli(env: dict[str, str], cwd: Path, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "refund_desk", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise RuntimeError(f"refund-desk {' '.join(args)} failed: {out.stderr[-2000:]}")
    return out.stdout.strip()


def start(
    cmd: list[str], env: dict[str, str], cwd: Path, url: str, *, ready: str = "/healthz"
) -> subprocess.Popen[bytes]:
    """Start `cmd` and wait until `ready` answers 200 (Refund Desk: `/readyz`, which waits for
    its job processes' first sweep as well as for the HTTP server)."""
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    for _ in range(600):
        try:
            if httpx.get(f"{url}{ready}", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd} exited with {proc.returncode}")
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{cmd} did not start")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def drive(
    url: str,
    bodies: list[dict[str, Any]],
    headers: dict[str, str],
    concurrency: int,
    pid: int | None = None,
    settled: Callable[[], object] | None = None,
    postgres: bool = False,
) -> Load:
    """Send every body once: `concurrency` keep-alive connections, each one request at a time;
    `pid` is the server's, whose CPU time per request is measured over the same window. The
    first body warms the connection up and is not counted; `settled`, if given, is waited for
    after it (Refund Desk: until the warm-up's case is refunded, so the pipeline has run once
    before the clock starts, as the bare endpoint's INSERT has)."""
    latencies: list[float] = []
    outcomes: Counter[str] = Counter()
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:

        async def one(body: dict[str, Any]) -> None:
            began = time.perf_counter()
            response = await client.post("/api/v1/refund-requests", json=body, headers=headers)
            latencies.append(time.perf_counter() - began)
            outcomes[str(response.json().get("status", f"http {response.status_code}"))] += 1

        async def worker() -> None:
            while not queue.empty():
                await one(queue.get_nowait())

        await one(bodies[0] | {"payment": bodies[0]["payment"]})  # warm the connection
        if settled is not None:
            await asyncio.to_thread(settled)
        latencies.clear()
        outcomes.clear()
        queue.get_nowait()
        before = (cpu_seconds(pid), cpu_seconds(pid, alone=True)) if pid else (None, None)
        roles_began = roles(pid, postgres=postgres) if pid else None
        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - began
        after = (cpu_seconds(pid), cpu_seconds(pid, alone=True)) if pid else (None, None)
        roles_ended = roles(pid, postgres=postgres) if pid else None
    tree, root = (
        (1000 * (a - b) / len(latencies) if a is not None and b is not None else None)
        for a, b in zip(after, before, strict=True)
    )
    return Load(len(latencies), seconds, latencies, outcomes, tree, root, roles_began, roles_ended)


def bodies_for(payments: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "payment": p,
            "email": "ada@example.com",
            "currency": "USD",
            "amount": "20.00",
            "message": "The vase arrived broken, shattered in the box.",
        }
        for p in payments
    ]


def bare(database_url: str, requests: int, concurrency: int) -> Load:
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "DATABASE_URL": database_url}
        proc = start(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "bare_app:app",
                "--app-dir",
                str(ROOT / "bench" / "parts"),
                "--port",
                str(port),
                "--log-level",
                "info",
            ],
            env,
            Path(tmp),
            url,
        )
        try:
            payments = [f"py_bare{i:06d}" for i in range(requests + 1)]
            return asyncio.run(drive(url, bodies_for(payments), {}, concurrency, proc.pid))
        finally:
            stop(proc)


def prepare(env: dict[str, str], cwd: Path, count: int) -> tuple[str, list[str]]:
    """Migrate, publish the bench policy, create an API key and `count` sandbox payments."""
    cli(env, cwd, "db", "upgrade")
    # The reference policy without its circuit breaker (the bench refunds hundreds an hour)
    # and without the repeat-refunds signal (every bench payment has the same customer).
    raw = yaml.safe_load(POLICY.read_text())
    raw.pop("breaker", None)
    for rule in raw["rules"]:
        if rule["id"] == "risk-signal":
            rule["when"] = "customer.chargebacks_365d > 0"
    policy = cwd / "policy.yaml"
    policy.write_text(yaml.safe_dump(raw, sort_keys=False))
    cli(env, cwd, "policy", "publish", str(policy))
    key = cli(env, cwd, "api-key", "create", "--name", "bench")
    payments = cli(
        env, cwd, "sandbox", "payment", "create", "--amount", "30.00", "--currency", "usd",
        "--email", "ada@example.com", "--age-days", "3", "--count", str(count),
    ).split()  # fmt: skip
    return key, payments


def refund_desk(
    database_url: str,
    requests: int,
    concurrency: int,
    *,
    workers: int = 1,
    job_processes: int = 0,
    wait: bool = False,
    profile: Path | None = None,
    label: str = "",
) -> tuple[Load, float, str, float | None, str, Spent | None]:
    """Intake load, then the time from the first request until every case is refunded (and
    the server's CPU time per refund over that time, its job processes included; the CPU by
    role; and every role's CPU per refund over that time: server, database and client)."""
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "REFUND_DESK_SECRET": SECRET,
        }
        key, payments = prepare(env, cwd, requests + 1)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = start(
            [
                sys.executable,
                "-m",
                "refund_desk",
                "serve",
                "--port",
                str(port),
                "--workers",
                str(workers),
                "--job-processes",
                str(job_processes),
            ],
            env,
            cwd,
            url,
            ready="/readyz",
        )
        engine = create_engine(database_url)
        spy = profile_of(proc, profile, label) if profile else None
        clock_started: dict[str, Any] = {}

        def settled() -> None:
            """The warm-up's case refunded: the clock starts with the counted requests."""
            if count_until(engine, 1, timeout=120) < 1:
                raise RuntimeError("the warm-up request was not refunded within 120 s")
            clock_started["at"], clock_started["cpu"] = time.perf_counter(), cpu_seconds(proc.pid)

        try:
            headers = {"Authorization": f"Bearer {key}"}
            if wait:
                headers["Prefer"] = "wait=10"
            postgres = database_url.startswith("postgresql")
            load = asyncio.run(
                drive(url, bodies_for(payments), headers, concurrency, proc.pid, settled, postgres)
            )
            intake_ended = time.perf_counter()
            refunded = count_until(engine, requests + 1, timeout=300)
            e2e = time.perf_counter() - clock_started["at"]
            drained = time.perf_counter() - intake_ended
            cpu_ended, cpu_began = cpu_seconds(proc.pid), clock_started["cpu"]
            roles_drained = roles(proc.pid, postgres=postgres)
            if refunded < requests + 1:
                raise RuntimeError(f"only {refunded} of {requests + 1} cases were refunded")
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its file and exits
                spy.wait(timeout=60)
            stop(proc)
            engine.dispose()
        verify = cli(env, cwd, "audit", "verify")
        # The warm-up request refunds too, but before the clock started.
        e2e_cpu = (
            1000 * (cpu_ended - cpu_began) / requests
            if cpu_began is not None and cpu_ended is not None
            else None
        )
        split, spent = "", None
        if load.roles_began and load.roles_ended and roles_drained:
            during = shares(load.roles_began, load.roles_ended, load.seconds)
            after = shares(load.roles_ended, roles_drained, drained)
            split = f"CPU, % of a core: intake {during}; after it, until refunded {after}"
            spent = Spent(
                all_ms=1000
                * (sum(roles_drained.values()) - sum(load.roles_began.values()))
                / requests,
                jobs_ms=1000 * (roles_drained["jobs"] - load.roles_began["jobs"]) / requests,
                job_processes=job_processes,
                requests=requests,
                burst_s=load.seconds,
            )
        return load, requests / e2e, verify, e2e_cpu, split, spent


E2E_TARGET = 0.25  # issue 15: end to end at a quarter of the bare endpoint's requests/s


@dataclass(frozen=True)
class Spent:
    """CPU per refund over an end-to-end run (from the first counted request until every
    case is refunded): every role's (server, database, client), and the job processes'."""

    all_ms: float
    jobs_ms: float
    job_processes: int
    requests: int
    burst_s: float  # the intake burst's length in this run

    def budget(self, bare_rate: float) -> str:
        """What end to end at the target asks of this machine: the refunds a second it means
        here, times what a refund cost in CPU, against the cores there are; and, with job
        processes, their own part: they do it after the burst (requests go first), so in
        what the burst leaves of the time the target allows, each on one core at most (one
        interpreter)."""
        wanted = E2E_TARGET * bare_rate
        said = (
            f"a refund cost {self.all_ms:.1f} ms of CPU in all (server, database, client): "
            f"{E2E_TARGET} of the bare endpoint ({wanted:.0f} refunds/s) needs "
            f"{wanted * self.all_ms / 1000:.2f} cores fully used, of {os.cpu_count() or 1}"
        )
        if self.job_processes:
            left = self.requests / wanted - self.burst_s
            work = self.requests * self.jobs_ms / 1000
            said += f"; of it {self.jobs_ms:.1f} ms in the job processes, after the burst: " + (
                f"{work / left:.2f} cores of their {self.job_processes} in the {left:.2f} s "
                "the burst leaves"
                if left > 0
                else "the burst alone takes longer than the target allows"
            )
        return said


def profile_of(proc: subprocess.Popen[bytes], directory: Path, name: str) -> Any:
    """Sample the server (and its worker processes) with py-spy while the load runs."""
    directory.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(proc.pid),
         "--subprocesses", "--rate", "250",
         "--format", "raw", "--output", str(directory / f"{name}.txt")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def count_until(engine: Any, want: int, *, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    done = 0
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            done = conn.scalar(text("SELECT count(*) FROM cases WHERE status = 'refunded'"))
        if done >= want:
            return int(done)
        time.sleep(0.05)
    return int(done)


def side_by_side(
    label: str, url_for: Callable[[], Any], args: argparse.Namespace, worker_counts: list[int]
) -> None:
    print(f"{label}: {args.requests} requests, {args.concurrency} concurrent clients")
    with url_for() as url:
        reference = bare(url, args.requests, args.concurrency)
    print(reference.line("bare FastAPI + INSERT", None))
    for count in worker_counts:
        # Replicas that each run HTTP and jobs, or one HTTP process and `count` job processes.
        http = args.http_processes if label == "PostgreSQL" else 1
        split = (
            {"workers": http, "job_processes": count} if args.job_processes else {"workers": count}
        )
        tag = f"{count}jp" if args.job_processes else f"{count}w"
        if args.job_processes and http > 1:
            tag = f"{http}w+{tag}"
        with url_for() as url:
            load, e2e, verify, e2e_cpu, split_cpu, spent = refund_desk(
                url,
                args.requests,
                args.concurrency,
                **split,
                profile=args.profile,
                label=f"{label.lower()}-{tag}",
            )
        print(load.line(f"Refund Desk intake ({tag})", reference.rate))
        cpu = f"   server CPU {e2e_cpu:5.1f} ms/refund" if e2e_cpu is not None else ""
        print(
            f"  {'end to end, refunded (' + tag + ')':<28} {e2e:7.1f} refunds/s"
            f"{'':38}ratio {e2e / reference.rate:5.2f}{cpu}   audit: {verify}"
        )
        if split_cpu:
            print(f"  {split_cpu}")
        if spent is not None:
            print(f"  {spent.budget(reference.rate)}")
        if args.wait:
            with url_for() as url:
                load, *_ = refund_desk(url, args.requests, args.concurrency, **split, wait=True)
            print(load.line(f"Prefer: wait=10 ({tag})", reference.rate))


class SqliteUrl:
    def __enter__(self) -> str:
        self.tmp = tempfile.TemporaryDirectory()
        return f"sqlite:///{self.tmp.name}/bench.db"

    def __exit__(self, *exc: object) -> None:
        self.tmp.cleanup()


class PostgresUrl:
    counter = 0

    def __enter__(self) -> str:
        PostgresUrl.counter += 1
        self.name = f"rd_throughput_{os.getpid()}_{PostgresUrl.counter}"
        self.admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        with self.admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{self.name}"'))
        return PG_ADMIN.rsplit("/", 1)[0] + f"/{self.name}"

    def __exit__(self, *exc: object) -> None:
        with self.admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))
        self.admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=295)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--only", choices=["sqlite", "postgres"])
    parser.add_argument("--workers", default="1,2", help="PostgreSQL worker counts, e.g. 1,2")
    parser.add_argument("--wait", action="store_true", help="also a run with Prefer: wait=10")
    parser.add_argument(
        "--job-processes",
        action="store_true",
        help="jobs in processes apart from one HTTP process; worker counts count those",
    )
    parser.add_argument(
        "--sqlite-job-processes",
        default="1",
        help="with --job-processes, SQLite's job process counts, e.g. 1,2 (one writer: they "
        "overlap only what they do outside write transactions)",
    )
    parser.add_argument(
        "--http-processes",
        type=int,
        default=1,
        help="with --job-processes, PostgreSQL's HTTP processes beside the job processes "
        "(`serve --workers N --job-processes M`)",
    )
    parser.add_argument(
        "--profile", type=Path, help="sample Refund Desk with py-spy into this folder"
    )
    args = parser.parse_args()
    if args.only != "postgres":
        sqlite_counts = [int(n) for n in args.sqlite_job_processes.split(",")]
        side_by_side("SQLite", SqliteUrl, args, sqlite_counts if args.job_processes else [1])
    if args.only != "sqlite":
        try:
            create_engine(PG_ADMIN).connect().close()
        except Exception as exc:
            print(f"PostgreSQL: skipped, {PG_ADMIN} not reachable ({type(exc).__name__})")
            return
        side_by_side("PostgreSQL", PostgresUrl, args, [int(w) for w in args.workers.split(",")])


if __name__ == "__main__":
    main()
