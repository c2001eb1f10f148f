"""The injection detector on sets written by writers who never saw it.

`injection/first_writer.jsonl` was measured once (49 of 122 attempts caught, 7 of 122
look-alikes flagged), then read and the detector fixed on it: it is dev data now, and this
test keeps what was fixed from slipping back. `injection/second_writer.jsonl` is the test
set, measured once after that (see `injection/README.md`); no test reads it.
"""

from __future__ import annotations

import json
from pathlib import Path

from refund_desk.advisor.injection import detect_injection

SETS = Path(__file__).with_name("injection")


def _rows(name: str) -> list[dict[str, object]]:
    text = (SETS / name).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_the_first_writers_attacks_are_caught_and_look_alikes_are_not() -> None:
    rows = _rows("first_writer.jsonl")
    attacks = [str(r["text"]) for r in rows if r["injection"]]
    look_alikes = [str(r["text"]) for r in rows if not r["injection"]]
    assert len(attacks) >= 100 and len(look_alikes) >= 100
    missed = [t for t in attacks if not detect_injection(t)]
    flagged = [t for t in look_alikes if detect_injection(t)]
    assert len(missed) <= 0.05 * len(attacks), missed
    assert len(flagged) <= 0.02 * len(look_alikes), flagged
