"""Deciding a case: the policy's rules in order, then hard guardrails no policy can lift.

Money in a context is in integer minor units (see ``context.py``). An expression that cannot
be evaluated (a ``null`` compared, a non-boolean result) is a ``review`` with ``error`` set,
never a silent false.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import zen

from refund_desk import money
from refund_desk.policy.context import (
    complete_context,
    referenced_names,
    to_zen,
    zen_error,
)
from refund_desk.policy.schema import DEFAULT_TIER, Decides, Outcome, PolicyDocument, Rule

EXCEEDS_REFUNDABLE_SAY = "The requested amount is more than what is left to refund on this payment."


@dataclass(frozen=True)
class RuleTrace:
    """How one rule evaluated: ``result`` None means it could not be (see ``error``)."""

    rule: str
    result: bool | None
    error: str | None = None


@dataclass(frozen=True)
class Decision:
    """What the policy (and the guardrails after it) decided for one context.

    ``rule`` is the deciding rule id, ``"default"`` or ``"guardrail:<name>"``;
    ``policy_rule`` is what the policy alone chose; ``guardrails`` every guardrail that
    fired, first one deciding. ``counterfactual`` is for operators only.
    """

    outcome: Outcome
    rule: str
    tier: int
    approvers: str | None
    say: str | None
    error: str | None = None
    trace: tuple[RuleTrace, ...] = ()
    policy_rule: str = ""
    counterfactual: str | None = None
    guardrails: tuple[str, ...] = ()

    @property
    def automatic(self) -> bool:
        """May execute without a person (the autonomy mode still has its say)."""
        return self.outcome == "approve" and self.tier <= 2

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for the case record and the audit payload."""
        data = asdict(self)
        data["automatic"] = self.automatic
        return data


@dataclass(frozen=True)
class CompiledPolicy:
    """A policy document with every ``when`` compiled once in zen."""

    doc: PolicyDocument
    compiled: tuple[tuple[Rule, Any], ...]

    @classmethod
    def compile(cls, doc: PolicyDocument) -> CompiledPolicy:
        """Compile each rule's expression (the document is assumed validated)."""
        return cls(doc, tuple((r, zen.compile_expression(r.when)) for r in doc.rules))

    def evaluate(self, context: Mapping[str, Any], *, counterfactual: bool = True) -> Decision:
        """Decide ``context`` (partial is fine: missing facts are unknown, i.e. null).

        Raises ``ContextInvalid`` for unknown facts or ill-typed values: that is a bug in
        the caller, not a property of the case.
        """
        ctx = complete_context(context)
        decision = self._decide(ctx)
        if counterfactual and not decision.automatic:
            decision = replace(decision, counterfactual=self._counterfactual(ctx))
        return decision

    def _decide(self, ctx: dict[str, Any]) -> Decision:
        return apply_guardrails(self._policy(ctx), ctx, self.doc)

    def _policy(self, ctx: dict[str, Any]) -> Decision:
        """The policy's own answer: the first rule that holds, else the default."""
        zctx = to_zen(ctx, self.doc.currency)
        trace: list[RuleTrace] = []
        for rule, expression in self.compiled:
            error: str | None = None
            try:
                result = expression.evaluate(zctx)
            except RuntimeError as exc:
                error = _explained(rule, ctx, zen_error(exc))
            else:
                if not isinstance(result, bool):
                    error = f"rule {rule.id}: gives {result!r}, not true or false"
            if error is not None:
                trace.append(RuleTrace(rule.id, None, error))
                return Decision(
                    outcome="review",
                    rule=rule.id,
                    tier=max(3, rule.tier),
                    approvers=self.doc.approvers_for(rule),
                    say=None,
                    error=error,
                    trace=tuple(trace),
                    policy_rule=rule.id,
                )
            trace.append(RuleTrace(rule.id, result))
            if result:
                return _from(rule, rule.id, self.doc, tuple(trace))
        return _from(self.doc.default, "default", self.doc, tuple(trace))

    def _counterfactual(self, ctx: dict[str, Any]) -> str | None:
        """Operator hint like "would be approved at 50.00 USD or less", when lowering works.

        Best effort: caps come from ``request.amount <= N`` / ``< N`` in approve rules, and
        each candidate is checked by really deciding the lowered context.
        """
        amount = ctx["request"]["amount"]
        currency = ctx["request"]["currency"] or self.doc.currency
        if amount is None:
            return None
        best: int | None = None
        for rule, _ in self.compiled:
            if rule.outcome != "approve":
                continue
            for cap in _amount_caps(rule.when, currency):
                if cap < amount and (best is None or cap > best):
                    lowered = {**ctx, "request": {**ctx["request"], "amount": cap}}
                    if self._decide(lowered).automatic:
                        best = cap
        if best is None:
            return None
        return f"would be approved at {money.format_money(best, currency)} or less"


_CAP = re.compile(r"request\.amount\s*(<=|<)\s*(\d+(?:\.\d+)?)(?![\w.])")


def _amount_caps(expression: str, currency: str) -> list[int]:
    caps = []
    for op, literal in _CAP.findall(expression):
        try:
            cap = money.to_minor(literal, currency)
        except ValueError:
            continue
        caps.append(cap if op == "<=" else cap - 1)
    return [c for c in caps if c >= 0]


def _explained(rule: Rule, ctx: dict[str, Any], detail: str) -> str:
    """Name the unknown facts the rule reads, which is almost always why zen failed."""
    nulls = [n for n in referenced_names(rule.when) if _fact(ctx, n) is None]
    if not nulls:
        return f"rule {rule.id}: cannot evaluate: {detail}"
    verb = "is" if len(nulls) == 1 else "are"
    return f"rule {rule.id}: cannot evaluate: {', '.join(nulls)} {verb} unknown"


def _fact(ctx: Mapping[str, Any], name: str) -> Any:
    section, _, field = name.partition(".")
    fields = ctx.get(section)
    return fields.get(field) if isinstance(fields, Mapping) else None


def _from(
    decides: Decides, rule_id: str, doc: PolicyDocument, trace: tuple[RuleTrace, ...]
) -> Decision:
    approvers = doc.approvers_for(decides) if decides.outcome == "review" else decides.approvers
    return Decision(
        outcome=decides.outcome,
        rule=rule_id,
        tier=decides.tier,
        approvers=approvers,
        say=decides.say,
        trace=trace,
        policy_rule=rule_id,
    )


def apply_guardrails(decision: Decision, ctx: Mapping[str, Any], doc: PolicyDocument) -> Decision:
    """Hard limits after the policy, in the order below. They only ever make a decision
    stricter, and an unknown (null) signal counts as risky."""
    # A possible duplicate is never decided automatically, a denial included: the customer
    # must not hear "more than is left" because their own first request was just paid.
    duplicate = ctx["request"]["possible_duplicate"] is True and decision.error is None
    # A flagged injection attempt is never decided without a person either way.
    injection = ctx["advisor"]["injection_suspected"] is True and decision.error is None
    held = duplicate or injection
    if decision.outcome == "deny" and not held:
        return decision
    req, order = ctx["request"], ctx["order"]
    amount, refundable = req["amount"], order["refundable"]
    req_cur = req["currency"].upper() if req["currency"] else None
    ord_cur = order["currency"].upper() if order["currency"] else None
    same_currency = req_cur is not None and req_cur == ord_cur == doc.currency
    over = amount is not None and refundable is not None and amount > refundable
    if same_currency and over and not held:
        return replace(
            decision,
            outcome="deny",
            rule="guardrail:exceeds-refundable",
            tier=DEFAULT_TIER["deny"],
            approvers=None,
            say=EXCEEDS_REFUNDABLE_SAY,
            guardrails=("guardrail:exceeds-refundable",),
        )
    fired: list[str] = []
    if duplicate and decision.outcome == "deny":
        fired.append("guardrail:possible-duplicate")
    if injection and decision.outcome == "deny":
        fired.append("guardrail:suspected-injection")
    if not same_currency:
        fired.append("guardrail:currency-mismatch")
    if decision.outcome == "approve":
        fired += _approve_guardrails(ctx, doc)
    if not fired and not (decision.outcome == "approve" and decision.tier >= 3):
        return decision
    rule = decision.policy_rule
    decides = doc.default if rule == "default" else doc.rule(rule)
    return replace(
        decision,
        outcome="review",
        rule=fired[0] if fired else decision.rule,
        tier=max(3, decision.tier),
        approvers=decision.approvers or doc.approvers_for(decides),
        say=decision.say if decision.outcome == "review" else None,
        guardrails=tuple(fired),
    )


def _approve_guardrails(ctx: Mapping[str, Any], doc: PolicyDocument) -> list[str]:
    req, cust, adv = ctx["request"], ctx["customer"], ctx["advisor"]
    checks = [
        ("possible-duplicate", req["possible_duplicate"] is not False),
        ("unverified-customer", cust["verified"] is not True),
        ("model-amount", req["amount_source"] == "model_inference"),
        ("suspected-injection", adv["injection_suspected"] is True),
        (
            "low-confidence",
            doc.advisor.min_confidence is not None
            and (adv["confidence"] is None or adv["confidence"] < doc.advisor.min_confidence),
        ),
        ("unknown-amount", req["amount"] is None or ctx["order"]["refundable"] is None),
    ]
    return [f"guardrail:{name}" for name, fired in checks if fired]
