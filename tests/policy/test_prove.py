"""The prover on named, real-looking policy pairs, its partial mode, output and exit codes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from refund_desk.policy import CompiledPolicy, parse_policy, run_policy_tests
from refund_desk.policy.prove import (
    EXIT_ERROR,
    EXIT_NOWHERE,
    EXIT_SOMEWHERE,
    decision_path,
    main_prove,
    prove,
    render,
    to_json,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "prove"
PAIRS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
BASE = (FIXTURES / "base.yaml").read_text()


def pair(name: str) -> tuple[str, str]:
    """The old and new policy texts of a named pair."""
    return (FIXTURES / name / "old.yaml").read_text(), (FIXTURES / name / "new.yaml").read_text()


def test_the_named_pairs_are_all_there() -> None:
    assert set(PAIRS) >= {
        "limit-raised",
        "rule-reordered",
        "new-exception",
        "tier-lowered",
        "null-rule-removed",
        "tightening-only",
    }


@pytest.mark.parametrize("name", PAIRS)
def test_named_pair_regions_exactly(name: str) -> None:
    expected = yaml.safe_load((FIXTURES / name / "expected.yaml").read_text())
    old, new = pair(name)
    report = prove(old, new)
    assert report.complete
    assert report.more_permissive is expected["more_permissive"]
    assert [[r.kind, r.old.path, r.new.path] for r in report.regions] == expected["regions"]
    engines = CompiledPolicy.compile(parse_policy(old)), CompiledPolicy.compile(parse_policy(new))
    for region in report.regions:
        assert region.confirmed
        a = engines[0].evaluate(region.witness, counterfactual=False)
        b = engines[1].evaluate(region.witness, counterfactual=False)
        assert decision_path(engines[0].doc, a) == region.old.path
        assert decision_path(engines[1].doc, b) == region.new.path


def test_limit_raised_region_is_described_by_its_bounds() -> None:
    old, new = pair("limit-raised")
    report = prove(old, new)
    (region,) = report.regions
    bounds = {b.fact: b.text for b in region.bounds}
    assert bounds["request.amount"] == "from 50.01 USD to 100.00 USD"
    assert bounds["request.reason"] == "one of damaged"
    assert bounds["order.age_days"] == "≤ 30"
    assert "passed every guardrail" in render(report)
    # the `given` form is what a policy test takes: it decides the same way
    test = {"name": "witness", "given": region.given, "expect": {"outcome": "approve"}}
    raw = yaml.safe_load(new)
    raw["tests"] = [test]
    (result,) = run_policy_tests(parse_policy(yaml.safe_dump(raw)))
    assert result.passed, result.message


def test_tightening_only_is_nowhere_more_permissive_but_lists_its_regions() -> None:
    report = prove(*pair("tightening-only"))
    assert not report.more_permissive
    assert report.regions
    assert not any(r.permissive for r in report.regions)


def test_an_unchanged_policy_differs_nowhere() -> None:
    report = prove(BASE, BASE)
    assert report.regions == ()
    assert report.complete and not report.more_permissive


def _with_rule(when: str, outcome: str = "approve") -> str:
    raw = yaml.safe_load(BASE)
    raw["rules"].insert(2, {"id": "opaque", "when": when, "outcome": outcome, "tier": 2})
    return yaml.safe_dump(raw, sort_keys=False)


def test_an_unmodelled_function_makes_the_analysis_partial_not_silent() -> None:
    new = _with_rule('len(request.source) > 3 and request.reason == "late"')
    report = prove(BASE, new)
    assert not report.complete
    (partial,) = report.partial
    assert (partial.version, partial.rule) == ("new", "opaque")
    assert "len()" in partial.construct
    # the opaque rule may match anything: it could pay automatically, so it says so
    assert report.more_permissive
    assert any(r.kind == "pays-automatically" and r.new.path == "opaque" for r in report.regions)
    assert "Partial" in render(report)


def test_the_same_unmodelled_rule_in_both_versions_is_not_a_difference() -> None:
    text = _with_rule('len(request.source) > 3 and request.reason == "late"')
    report = prove(text, text)
    assert report.partial and report.regions == ()
    assert not report.more_permissive


def test_an_unmodelled_deny_rule_added_is_still_reported_as_possibly_permissive() -> None:
    # a deny rule that may fail to evaluate sends cases to a person where OLD denied none
    # of them... or paid them: whatever it does is listed, never "no differences"
    report = prove(BASE, _with_rule("len(request.source) > 3", outcome="deny"))
    assert report.regions
    assert {r.kind for r in report.regions} & {"denies", "person-instead-of-automatic"}


def test_json_form_and_hash_are_stable_and_canonical() -> None:
    old, new = pair("limit-raised")
    first, second = to_json(prove(old, new)), to_json(prove(old, new))
    assert first == second
    body = {k: v for k, v in first.items() if k != "hash"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert first["hash"] == hashlib.sha256(canonical.encode()).hexdigest()
    assert first["more_permissive"] is True
    assert first["regions"][0]["witness"]["request"]["currency"] == "USD"
    json.dumps(first)  # JSON-ready


def test_main_prove_exit_codes(tmp_path: Path) -> None:
    folder = FIXTURES / "tightening-only"
    code, text = main_prove(str(folder / "old.yaml"), str(folder / "new.yaml"), as_json=False)
    assert code == EXIT_NOWHERE and "nowhere more permissive" in text
    folder = FIXTURES / "limit-raised"
    code, out = main_prove(str(folder / "old.yaml"), (folder / "new.yaml").read_text(), True)
    assert code == EXIT_SOMEWHERE and json.loads(out)["more_permissive"] is True
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy: x\n")
    code, text = main_prove(str(bad), str(folder / "new.yaml"), as_json=False)
    assert code == EXIT_ERROR
    code, text = main_prove(str(tmp_path / "missing.yaml"), BASE, as_json=False)
    assert code == EXIT_ERROR and "missing.yaml" in text


def test_currency_case_and_foreign_currencies_are_modelled() -> None:
    # a rule on the exact currency string: "usd" passes the guardrail but not the rule
    raw = yaml.safe_load(BASE)
    raw["rules"].insert(
        0, {"id": "not-usd", "when": 'request.currency != "USD"', "outcome": "deny"}
    )
    report = prove(BASE, yaml.safe_dump(raw, sort_keys=False))
    witnesses = [r.witness["request"]["currency"] for r in report.regions if r.kind == "denies"]
    assert "usd" in witnesses
    assert all(r.confirmed for r in report.regions)
