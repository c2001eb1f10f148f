"""Instructions per refund request, counted by valgrind: a figure the machine's load does not move.

CPU time on a shared machine moves by a fifth from run to run; an instruction count of the
same code on the same input moves by well under one percent. This runs the pipeline of
`pipeline_cpu_bench.py` (a request carried to `refunded` in one process on SQLite, then the
sweep of what it left due) under `valgrind --tool=callgrind` twice: after setting up and 20
requests to warm up, once with no more requests and once with `--requests` more; the
difference over that many is one request's instructions (its sandbox payment's creation
included). Needs valgrind on the PATH; each run takes a few minutes.

    python bench/pipeline_instructions.py [--requests 40]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WARM_UP = 20


def run_requests(count: int) -> None:
    """The measured process: set up, warm up, then `count` requests carried to refunded."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import pipeline_cpu_bench as pipeline

    url = f"sqlite:///{tempfile.mkdtemp()}/bench.db"
    runtime, key = pipeline.setup(url)
    runtime.desk.jobs_elsewhere = False
    bodies = pipeline.requests_for(runtime, WARM_UP + count, "i")
    for body in bodies:
        view, _ = pipeline.create(runtime, body, key)
        assert view["status"] == "refunded", view
        runtime.desk.jobs.sweep()
    runtime.db.dispose()


def instructions(count: int) -> int:
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.out",
             sys.executable, __file__, "--run", str(count)],
            capture_output=True, text=True, check=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )  # fmt: skip
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"valgrind printed no count:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)  # the measured process
    args = parser.parse_args()
    if args.run is not None:
        run_requests(args.run)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    base = instructions(0)
    loaded = instructions(args.requests)
    per_request = (loaded - base) / args.requests
    print(f"{per_request / 1e6:.2f} M instructions per request carried to refunded (SQLite)")


if __name__ == "__main__":
    main()
