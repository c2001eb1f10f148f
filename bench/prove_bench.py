"""Benchmark: proving a 30-rule policy pair, against evaluating the same policy with the engine.

Run ``python bench/prove_bench.py``. Builds a realistic 30-rule policy and a draft that
raises one limit, adds an exception and lowers one tier, then prints the time ``prove`` takes
(target: under 2 s, so it can sit in the publish gate), the number of regions, and as a
reference the time the engine needs for a 1,000-context backtest of the same policy and for
evaluating every witness once.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

import yaml

from refund_desk.policy import CompiledPolicy, parse_policy
from refund_desk.policy.context import REASONS
from refund_desk.policy.prove import prove

RULES = 30


def policy(raise_limit: bool = False) -> dict[str, Any]:
    rnd = random.Random(3)
    rules: list[dict[str, Any]] = [
        {"id": "exceeds", "when": "request.amount > order.refundable", "outcome": "deny"},
        {
            "id": "risk",
            "when": "customer.chargebacks_365d > 0 or customer.refunds_90d >= 5",
            "outcome": "review",
            "tier": 4,
            "approvers": "finance",
        },
    ]
    while len(rules) < RULES - 1:
        reason = rnd.choice(REASONS)
        cap = rnd.choice([20, 30, 50, 75, 100, 150])
        age = rnd.choice([14, 30, 60, 90])
        outcome = rnd.choice(["approve", "approve", "review", "deny"])
        rule: dict[str, Any] = {
            "id": f"{reason.replace('_', '-')}-{len(rules)}",
            "when": (
                f'request.reason == "{reason}" and request.amount <= {cap} '
                f"and order.age_days <= {age} and evidence.count >= {rnd.choice([0, 1])}"
            ),
            "outcome": outcome,
        }
        if outcome == "review":
            rule["tier"] = 3
            rule["approvers"] = rnd.choice(["support-leads", "finance"])
        rules.append(rule)
    rules.append(
        {
            "id": "large",
            "when": "request.amount > 500",
            "outcome": "review",
            "tier": 3,
            "approvers": "finance",
        }
    )
    doc: dict[str, Any] = {
        "policy": "bench",
        "currency": "USD",
        "rules": rules,
        "default": {"outcome": "review", "tier": 3, "approvers": "support-leads"},
        "approvers": {
            "support-leads": {"members": ["U0LEAD1"], "limit": 500},
            "finance": {"members": ["U0FIN1"], "limit": 5000},
        },
        "advisor": {"min_confidence": 0.6},
    }
    if raise_limit:
        first = next(r for r in rules if r["outcome"] == "approve")
        first["when"] = first["when"].replace("request.amount <=", "request.amount < 2 *")
        rules.insert(
            5,
            {
                "id": "late-small",
                "when": 'request.reason == "late" and request.amount <= 15',
                "outcome": "approve",
            },
        )
        rules.pop(10)
        rules[1]["tier"] = 3
    return doc


def contexts(n: int) -> list[dict[str, Any]]:
    rnd = random.Random(11)
    out = []
    for _ in range(n):
        refundable = rnd.choice([1999, 4500, 12_000, 80_000])
        out.append(
            {
                "request": {
                    "amount": rnd.randint(100, refundable),
                    "currency": "USD",
                    "reason": rnd.choice(REASONS),
                    "possible_duplicate": False,
                    "amount_source": "customer_input",
                },
                "order": {
                    "refundable": refundable,
                    "currency": "USD",
                    "age_days": rnd.randint(0, 99),
                },
                "customer": {"verified": True, "chargebacks_365d": 0, "refunds_90d": 0},
                "advisor": {"confidence": 0.9, "injection_suspected": False},
                "evidence": {"count": rnd.randint(0, 2), "checked": 0},
            }
        )
    return out


def main() -> None:
    old = yaml.safe_dump(policy(), sort_keys=False)
    new = yaml.safe_dump(policy(raise_limit=True), sort_keys=False)
    old_doc, new_doc = parse_policy(old), parse_policy(new)
    times = []
    report = None
    for _ in range(3):
        start = time.perf_counter()
        report = prove(old_doc, new_doc)
        times.append(time.perf_counter() - start)
    assert report is not None and report.complete
    start = time.perf_counter()
    bare = prove(old_doc, new_doc, describe=False)
    undescribed = time.perf_counter() - start
    assert len(bare.regions) == len(report.regions)
    assert all(r.confirmed for r in report.regions)
    engine = CompiledPolicy.compile(old_doc)
    batch = contexts(1000)
    start = time.perf_counter()
    for ctx in batch:
        engine.evaluate(ctx, counterfactual=False)
    backtest = time.perf_counter() - start
    start = time.perf_counter()
    for region in report.regions:
        engine.evaluate(region.witness, counterfactual=False)
    witnesses = time.perf_counter() - start
    best = min(times)
    print(f"prove: {RULES}-rule pair, {len(old_doc.rules)} -> {len(new_doc.rules)} rules")
    print(
        f"  prove (regions, bounds, witnesses checked by the engine): median "
        f"{statistics.median(times):.2f} s, best {best:.2f} s over 3 runs "
        f"({len(report.regions)} regions, {report.checks} solver checks, "
        f"more permissive: {report.more_permissive})"
    )
    print(f"  prove without per-fact bounds (regions + checked witnesses): {undescribed:.2f} s")
    print(f"  reference: backtest of 1,000 contexts with the engine: {backtest:.3f} s")
    count = len(report.regions)
    print(f"  reference: evaluating the {count} witnesses once: {witnesses * 1000:.1f} ms")
    print(f"  prove / 1,000-context backtest: {best / backtest:.1f}x")
    print(f"  under the 2 s gate budget: {'yes' if statistics.median(times) < 2 else 'NO'}")


if __name__ == "__main__":
    main()
