"""The prover checked against the engine, not against itself.

Random pairs of policies are built from the fact schema; random contexts are decided by the
project's engine (zen-engine underneath). Every context on which the two versions' verdicts
differ must lie in a region the prover reported (same pair of decision paths, same kind),
and every witness the prover prints must really differ when the engine evaluates it.
"""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from refund_desk.policy import CompiledPolicy, PolicyInvalid, parse_policy
from refund_desk.policy.context import REASONS
from refund_desk.policy.prove import classify, decision_path, decision_verdict, prove, render

MONEY = ["request.amount", "order.refundable", "order.amount", "order.refunded"]
COUNTS = ["order.age_days", "customer.chargebacks_365d", "customer.refunds_90d", "evidence.count"]
BOOLS = ["request.possible_duplicate", "customer.verified", "advisor.injection_suspected"]
MONEY_LITERALS = ["0", "10", "50", "50.01", "100", "500"]
COUNT_LITERALS = ["0", "1", "2", "5", "30"]
OPS = ["<", "<=", ">", ">=", "==", "!="]


@st.composite
def atoms(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["money", "count", "conf", "reason", "string", "bool", "arith"]))
    op = draw(st.sampled_from(OPS))
    if kind == "money":
        return f"{draw(st.sampled_from(MONEY))} {op} {draw(st.sampled_from(MONEY_LITERALS))}"
    if kind == "count":
        fact = draw(st.sampled_from(COUNTS))
        if draw(st.booleans()):
            lo, hi = sorted(draw(st.lists(st.sampled_from(COUNT_LITERALS), min_size=2, max_size=2)))
            return f"{fact} in [{lo}..{hi}]"
        return f"{fact} {op} {draw(st.sampled_from(COUNT_LITERALS))}"
    if kind == "conf":
        return f"advisor.confidence {op} {draw(st.sampled_from(['0.5', '0.6', '0.9']))}"
    if kind == "reason":
        values = draw(st.lists(st.sampled_from(REASONS[:4]), min_size=1, max_size=2, unique=True))
        if len(values) > 1:
            neg = "not in" if draw(st.booleans()) else "in"
            return f"request.reason {neg} [{', '.join(repr(v) for v in values)}]"
        return f'request.reason {draw(st.sampled_from(["==", "!="]))} "{values[0]}"'
    if kind == "string":
        fact, value = draw(
            st.sampled_from(
                [
                    ("request.source", "email"),
                    ("request.amount_source", "model_inference"),
                    ("request.currency", "USD"),
                    ("request.reason_source", "customer_input"),
                ]
            )
        )
        return f'{fact} {draw(st.sampled_from(["==", "!="]))} "{value}"'
    if kind == "bool":
        fact = draw(st.sampled_from(BOOLS))
        return draw(st.sampled_from([fact, f"not {fact}", f"{fact} == true", f"{fact} == false"]))
    a, b = draw(st.lists(st.sampled_from(MONEY), min_size=2, max_size=2))
    form = draw(
        st.sampled_from(["{a} > {b}", "{a} + {b} <= 100", "{a} * 2 > {b}", "{a} - 10 < {b}"])
    )
    return form.format(a=a, b=b)


@st.composite
def conditions(draw: st.DrawFn, depth: int = 2) -> str:
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        return draw(atoms())
    left = draw(conditions(depth - 1))
    right = draw(conditions(depth - 1))
    join = draw(st.sampled_from(["and", "or"]))
    text = f"({left}) {join} ({right})"
    return f"not ({text})" if draw(st.integers(0, 5)) == 0 else text


@st.composite
def decides(draw: st.DrawFn) -> dict[str, Any]:
    outcome = draw(st.sampled_from(["approve", "deny", "review"]))
    out: dict[str, Any] = {"outcome": outcome}
    if outcome == "approve":
        out["tier"] = draw(st.sampled_from([1, 2, 2, 3]))
    elif outcome == "review":
        out["tier"] = draw(st.sampled_from([2, 3, 4]))
        out["approvers"] = draw(st.sampled_from(["leads", "finance"]))
    return out


@st.composite
def policies(draw: st.DrawFn) -> dict[str, Any]:
    rules = []
    for i in range(draw(st.integers(1, 4))):
        rules.append({"id": f"r{i}", "when": draw(conditions()), **draw(decides())})
    default = draw(decides())
    if default["outcome"] != "review":
        default["approvers"] = "leads"
    return {
        "policy": "prop",
        "currency": "USD",
        "rules": rules,
        "default": default,
        "approvers": {
            "leads": {"members": ["U0LEAD1"], "limit": draw(st.sampled_from([100, 500]))},
            "finance": {"members": ["U0FIN1"], "limit": 5000},
        },
        "advisor": {"min_confidence": draw(st.sampled_from([None, 0.6]))},
    }


@st.composite
def mutated(draw: st.DrawFn, raw: dict[str, Any]) -> dict[str, Any]:
    new = yaml.safe_load(yaml.safe_dump(raw))
    for _ in range(draw(st.integers(1, 2))):
        change = draw(st.sampled_from(["when", "decides", "swap", "add", "drop", "limit", "conf"]))
        rules = new["rules"]
        i = draw(st.integers(0, len(rules) - 1))
        if change == "when":
            rules[i]["when"] = draw(conditions())
        elif change == "decides":
            rules[i] = {"id": rules[i]["id"], "when": rules[i]["when"], **draw(decides())}
        elif change == "swap" and len(rules) > 1:
            j = draw(st.integers(0, len(rules) - 1))
            rules[i], rules[j] = rules[j], rules[i]
        elif change == "add":
            rules.insert(i, {"id": f"n{len(rules)}", "when": draw(conditions()), **draw(decides())})
        elif change == "drop" and len(rules) > 1:
            rules.pop(i)
        elif change == "limit":
            new["approvers"]["leads"]["limit"] = draw(st.sampled_from([100, 500, 1000]))
        elif change == "conf":
            new["advisor"]["min_confidence"] = draw(st.sampled_from([None, 0.5, 0.6]))
    return new


def _maybe(values: list[Any]) -> st.SearchStrategy[Any]:
    return st.sampled_from([None, *values])


MINOR = [0, 1, 999, 1000, 1001, 4999, 5000, 5001, 10_000, 10_001, 50_000, 50_001, 200_000]

contexts = st.fixed_dictionaries(
    {
        "request": st.fixed_dictionaries(
            {
                "amount": _maybe(MINOR),
                "currency": st.sampled_from([None, "USD", "USD", "USD", "usd", "EUR", "JPY"]),
                "reason": _maybe(list(REASONS[:5])),
                "source": _maybe(["email", "api"]),
                "possible_duplicate": st.sampled_from([None, False, False, True]),
                "amount_source": _maybe(["customer_input", "model_inference"]),
                "reason_source": _maybe(["customer_input", "model_inference"]),
            }
        ),
        "order": st.fixed_dictionaries(
            {
                "amount": _maybe(MINOR),
                "refunded": _maybe(MINOR),
                "refundable": _maybe(MINOR),
                "currency": st.sampled_from([None, "USD", "USD", "USD", "EUR"]),
                "age_days": _maybe([-1, 0, 1, 2, 5, 30, 31]),
            }
        ),
        "customer": st.fixed_dictionaries(
            {
                "verified": st.sampled_from([None, True, True, False]),
                "chargebacks_365d": _maybe([0, 1, 2]),
                "refunds_90d": _maybe([0, 1, 5, 6]),
            }
        ),
        "advisor": st.fixed_dictionaries(
            {
                "confidence": _maybe([0.0, 0.5, 0.59, 0.6, 0.61, 0.9, 1.0]),
                "injection_suspected": st.sampled_from([None, False, False, True]),
            }
        ),
        "evidence": st.fixed_dictionaries({"count": _maybe([0, 1, 2, 5])}),
    }
)


def _parse(raw: dict[str, Any]) -> Any:
    try:
        return parse_policy(yaml.safe_dump(raw, sort_keys=False))
    except PolicyInvalid:
        return None


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_every_engine_difference_lies_in_a_reported_region(data: st.DataObject) -> None:
    raw_old = data.draw(policies())
    raw_new = data.draw(mutated(raw_old)) if data.draw(st.integers(0, 3)) else data.draw(policies())
    old, new = _parse(raw_old), _parse(raw_new)
    assume(old is not None and new is not None)
    report = prove(old, new, describe=data.draw(st.integers(0, 5)) == 0)
    assert not report.partial
    if not report.finished:
        # z3 gave up on a check (rare mixed integer/real instances): the report must then
        # claim nothing is absent, and say so
        assert report.more_permissive
        assert "did not finish" in render(report)
        return
    regions = {(r.old.path, r.new.path): r for r in report.regions}
    for region in report.regions:
        assert region.confirmed, f"witness not confirmed for {region.kind}: {region.witness}"
    engines = CompiledPolicy.compile(old), CompiledPolicy.compile(new)
    for ctx in data.draw(st.lists(contexts, min_size=20, max_size=20)):
        a = engines[0].evaluate(ctx, counterfactual=False)
        b = engines[1].evaluate(ctx, counterfactual=False)
        kind = classify(decision_verdict(old, a), decision_verdict(new, b))
        if kind is None:
            continue
        key = (decision_path(old, a), decision_path(new, b))
        assert key in regions, f"unreported difference {kind} {key} on {ctx}"
        assert regions[key].kind == kind
        if kind in ("pays-automatically", "person-instead-of-deny", "looser-review"):
            assert report.more_permissive
    if not report.more_permissive:
        assert not any(r.permissive for r in report.regions)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_policy_against_itself_differs_nowhere(data: st.DataObject) -> None:
    raw = data.draw(policies())
    doc = _parse(raw)
    assume(doc is not None)
    report = prove(doc, doc, describe=False)
    assert report.regions == ()
    assert not report.more_permissive
