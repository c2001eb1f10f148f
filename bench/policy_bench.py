"""Benchmark: the acme policy's rules in zen-engine vs the same conditions in cel-python.

Run ``python bench/policy_bench.py``. Prints microseconds per decision (first match over
the rules, context conversion included) and per single rule evaluation, side by side, plus
the full ``CompiledPolicy.evaluate`` cost (context checks, guardrails) for reference.
Both engines are checked to agree on every context before timing.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import celpy
import zen

from refund_desk.policy import CompiledPolicy, parse_policy
from refund_desk.policy.context import to_zen

ROOT = Path(__file__).resolve().parent.parent
ACME = ROOT / "tests" / "policy" / "fixtures" / "acme.yaml"

# The acme rules written in CEL (CEL does not mix int and double in comparisons).
CEL: dict[str, str] = {
    "exceeds-refundable": "request.amount > order.refundable",
    "risk-signal": "customer.chargebacks_365d > 0 || customer.refunds_90d >= 5",
    "damaged-small": (
        'request.reason == "damaged" && request.amount <= 50.0 && order.age_days <= 30'
    ),
    "large": "request.amount > 500.0",
}
REASONS = ["damaged", "defective", "not_received", "late", "changed_mind", "other"]


def contexts(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """A realistic mix: mostly small claims, some large, some risky, some over refundable."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        refundable = rnd.choice([1999, 4500, 12_000, 80_000, 250_000])
        amount = refundable if rnd.random() < 0.7 else rnd.randint(100, refundable * 2)
        out.append(
            {
                "request": {
                    "amount": amount,
                    "currency": "USD",
                    "reason": rnd.choice(REASONS),
                    "source": "api",
                    "possible_duplicate": rnd.random() < 0.03,
                    "amount_source": "customer_input",
                },
                "order": {
                    "amount": refundable,
                    "refunded": 0,
                    "refundable": refundable,
                    "currency": "USD",
                    "age_days": rnd.randint(0, 90),
                },
                "customer": {
                    "verified": rnd.random() < 0.9,
                    "chargebacks_365d": 1 if rnd.random() < 0.05 else 0,
                    "refunds_90d": rnd.choice([0, 0, 0, 1, 2, 6]),
                    "open_cases": 0,
                },
                "advisor": {"confidence": rnd.random(), "injection_suspected": False},
                "evidence": {"count": rnd.randint(0, 3), "checked": 0},
            }
        )
    return out


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Best-of-three seconds for ``repeat`` calls of ``fn`` (cheap noise reduction)."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(n_contexts: int = 200, loops: int = 8) -> None:
    doc = parse_policy(ACME.read_text())
    compiled = CompiledPolicy.compile(doc)
    ids = [r.id for r in doc.rules]
    assert ids == list(CEL), ids
    zen_rules = [zen.compile_expression(r.when) for r in doc.rules]
    env = celpy.Environment()
    cel_rules = [env.program(env.compile(CEL[i])) for i in ids]

    ctxs = contexts(n_contexts)
    zen_ctxs = [to_zen(c, "USD") for c in ctxs]
    cel_ctxs = [{k: celpy.json_to_cel(v) for k, v in z.items()} for z in zen_ctxs]

    def zen_decide(c: dict[str, Any]) -> str:
        z = to_zen(c, "USD")
        for rule_id, expr in zip(ids, zen_rules, strict=True):
            if expr.evaluate(z):
                return rule_id
        return "default"

    def cel_decide(c: dict[str, Any]) -> str:
        z = to_zen(c, "USD")
        act = {k: celpy.json_to_cel(v) for k, v in z.items()}
        for rule_id, prog in zip(ids, cel_rules, strict=True):
            if bool(prog.evaluate(act)):
                return rule_id
        return "default"

    for c in ctxs:  # same conditions, same answers
        assert zen_decide(c) == cel_decide(c) == compiled.evaluate(c).policy_rule

    decisions = n_contexts * loops
    rule_evals = decisions * len(ids)

    def run_zen_decisions() -> None:
        for c in ctxs:
            zen_decide(c)

    def run_cel_decisions() -> None:
        for c in ctxs:
            cel_decide(c)

    def run_zen_rules() -> None:
        for z in zen_ctxs:
            for expr in zen_rules:
                expr.evaluate(z)

    def run_cel_rules() -> None:
        for act in cel_ctxs:
            for prog in cel_rules:
                prog.evaluate(act)

    def run_full() -> None:
        for c in ctxs:
            compiled.evaluate(c)

    us = 1e6
    zen_d = timed(run_zen_decisions, loops) / decisions * us
    cel_d = timed(run_cel_decisions, loops) / decisions * us
    zen_r = timed(run_zen_rules, loops) / rule_evals * us
    cel_r = timed(run_cel_rules, loops) / rule_evals * us
    full = timed(run_full, loops) / decisions * us

    print(f"acme policy: {len(ids)} rules, {n_contexts} contexts x {loops} loops (best of 3)")
    print(f"{'':24}{'zen-engine':>12}{'cel-python':>12}{'cel/zen':>10}")
    print(f"{'us per decision':24}{zen_d:12.1f}{cel_d:12.1f}{cel_d / zen_d:9.1f}x")
    print(f"{'us per rule':24}{zen_r:12.2f}{cel_r:12.2f}{cel_r / zen_r:9.1f}x")
    print(f"{'us per evaluate() (zen)':24}{full:12.1f}   (context checks, guardrails, hints)")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
