"""Running a policy's embedded tests: the publishing gate and ``policy test``."""

from __future__ import annotations

from dataclasses import dataclass

from refund_desk.policy.context import given_to_context
from refund_desk.policy.engine import CompiledPolicy, Decision
from refund_desk.policy.errors import ContextInvalid
from refund_desk.policy.schema import PolicyDocument, PolicyTest


@dataclass(frozen=True)
class TestResult:
    """One embedded test: passed or not, and a message saying what happened."""

    __test__ = False  # not a pytest test class

    name: str
    passed: bool
    message: str
    decision: Decision | None = None


def run_policy_tests(doc: PolicyDocument | CompiledPolicy) -> list[TestResult]:
    """Lay each test's ``given`` over the neutral context, decide it, compare with ``expect``.

    Guardrails are included: a test shows what would really happen to such a case.
    """
    compiled = doc if isinstance(doc, CompiledPolicy) else CompiledPolicy.compile(doc)
    return [_run(compiled, test) for test in compiled.doc.tests]


def _run(compiled: CompiledPolicy, test: PolicyTest) -> TestResult:
    try:
        context = given_to_context(test.given, compiled.doc.currency)
    except ContextInvalid as exc:
        return TestResult(test.name, False, f"bad given: {exc}")
    decision = compiled.evaluate(context, counterfactual=False)
    expect = test.expect
    got = f"{decision.outcome} by {decision.rule} at tier {decision.tier}"
    if decision.error:
        got += f" ({decision.error})"
    wrong = (
        decision.outcome != expect.outcome
        or (expect.rule is not None and decision.rule != expect.rule)
        or (expect.tier is not None and decision.tier != expect.tier)
    )
    if wrong:
        want: str = expect.outcome
        if expect.rule is not None:
            want += f" by {expect.rule}"
        if expect.tier is not None:
            want += f" at tier {expect.tier}"
        return TestResult(test.name, False, f"expected {want}, got {got}", decision)
    return TestResult(test.name, True, got, decision)
