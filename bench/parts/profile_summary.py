"""Where a py-spy profile (collapsed stacks, `--format raw`) spends its samples.

    python bench/parts/profile_summary.py PROFILE.txt [--top 25]

Prints, for the functions of refund_desk and the main libraries, the share of all samples
spent in them or in what they call (inclusive), highest first.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

FRAME = re.compile(r"^(?P<func>[^ ]+) \((?P<file>[^:]+)(?::\d+)?\)$")
KEEP = ("refund_desk", "sqlalchemy", "sqlmodel", "sqlite3", "psycopg", "pydantic", "fastapi")


def summarize(path: Path, top: int) -> list[tuple[str, float]]:
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        samples = int(count)
        total += samples
        seen: set[str] = set()
        for frame in stack.split(";"):
            match = FRAME.match(frame.strip())
            if not match:
                continue
            file = match["file"]
            if not any(part in file for part in KEEP):
                continue
            short = file.split("site-packages/")[-1].split("src/")[-1]
            name = f"{match['func']} ({short})"
            if name not in seen:
                seen.add(name)
                inclusive[name] += samples
    return [(name, 100 * n / total) for name, n in inclusive.most_common(top)] if total else []


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    for name, share in summarize(args.profile, args.top):
        print(f"{share:5.1f}%  {name}")


if __name__ == "__main__":
    main()
