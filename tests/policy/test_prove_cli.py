"""`refund-desk policy prove OLD NEW`: the exit code says whether NEW loosens anything, and each
witness it prints is a context that `policy test`'s engine decides differently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from refund_desk.cli.main import app
from refund_desk.policy import CompiledPolicy, parse_policy
from tests.cli_helpers import run, runner

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


def _with_test(source: str, given: dict[str, object], expect: dict[str, object]) -> str:
    raw = yaml.safe_load(source)
    test = {"name": "prover witness", "given": given, "expect": expect}
    raw["tests"] = [*(raw.get("tests") or []), test]
    return yaml.safe_dump(raw, sort_keys=False)


@pytest.mark.parametrize("pair", sorted(p.name for p in PAIRS.iterdir() if p.is_dir()))
def test_every_witness_is_confirmed_by_policy_test(pair: str, tmp_path: Path) -> None:
    """Each region's example, written as an embedded test expecting NEW's verdict, passes
    `refund-desk policy test` on NEW, and fails on OLD wherever the verdicts say it must."""
    old, new = PAIRS / pair / "old.yaml", PAIRS / pair / "new.yaml"
    result = runner.invoke(app, ["policy", "prove", str(old), str(new), "--json"])
    assert result.exit_code in (0, 3), result.output
    report = json.loads(result.stdout)
    assert report["regions"] or not report["more_permissive"]
    rules = {
        rule["id"]
        for rule in yaml.safe_load(new.read_text())["rules"]
        + yaml.safe_load(old.read_text())["rules"]
    }
    for i, region in enumerate(report["regions"]):
        verdict = region["new"]
        expect: dict[str, object] = {"outcome": verdict["outcome"], "tier": verdict["tier"]}
        if verdict["path"] in rules:
            expect["rule"] = verdict["path"]
        on_new = tmp_path / f"new-{i}.yaml"
        on_new.write_text(_with_test(new.read_text(), region["given"], expect))
        run("policy", "test", str(on_new))
        before = region["old"]
        if (before["outcome"], before["tier"]) != (verdict["outcome"], verdict["tier"]):
            on_old = tmp_path / f"old-{i}.yaml"
            on_old.write_text(_with_test(old.read_text(), region["given"], expect))
            run("policy", "test", str(on_old), code=1)


@pytest.mark.usefixtures("cli_db")
def test_an_unknown_version_exits_2_with_one_line() -> None:
    pair = PAIRS / "tightening-only"
    out = run("policy", "prove", "v99", str(pair / "new.yaml"), code=2)
    assert "v99" in out and "Traceback" not in out
