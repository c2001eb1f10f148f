"""`refund-desk policy prove OLD NEW`: the exit code says whether NEW loosens anything, and each
witness it prints is a context that `policy test`'s engine decides differently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refund_desk.policy import CompiledPolicy, parse_policy
from tests.cli_helpers import run

PAIRS = Path(__file__).resolve().parents[1] / "fixtures" / "prove"


def test_a_loosening_version_exits_3_with_witnesses_the_engine_confirms() -> None:
    old, new = PAIRS / "limit-raised" / "old.yaml", PAIRS / "limit-raised" / "new.yaml"
    report = json.loads(run("policy", "prove", str(old), str(new), "--json", code=3))
    assert report["regions"], report
    engines = [CompiledPolicy.compile(parse_policy(p.read_text())) for p in (old, new)]
    for region in report["regions"]:
        witness = region["witness"]
        a, b = (engine.evaluate(witness) for engine in engines)
        assert (a.outcome, a.rule, a.tier) != (b.outcome, b.rule, b.tier), region


def test_a_tightening_only_version_exits_0() -> None:
    pair = PAIRS / "tightening-only"
    out = run("policy", "prove", str(pair / "old.yaml"), str(pair / "new.yaml"), code=0)
    assert out.strip()


def test_an_unreadable_file_exits_2(tmp_path: Path) -> None:
    pair = PAIRS / "tightening-only"
    out = run("policy", "prove", str(tmp_path / "missing.yaml"), str(pair / "new.yaml"), code=2)
    assert "missing.yaml" in out


@pytest.mark.parametrize("bad", ["policy: [", "policy: x\n"])
def test_an_invalid_policy_exits_2(tmp_path: Path, bad: str) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(bad)
    run("policy", "prove", str(broken), str(PAIRS / "tightening-only" / "new.yaml"), code=2)
