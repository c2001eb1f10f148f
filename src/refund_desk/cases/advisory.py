"""What the workflow does with advice: provenance, the approver's explanation, tier-1 answers,
and the log of advisor calls. Advice is data with provenance `model_inference` (DESIGN
invariant 1): only ever shown (labelled advisory), used to answer a question from the policy's
own words (tier 1, no money), or counted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select
from sqlmodel import Session, col

from refund_desk import logs, money
from refund_desk.cases.ports import Advisor, AdvisorError, PolicyText, Provenance
from refund_desk.crypto import Vault
from refund_desk.governance.versions import LoadedPolicy
from refund_desk.policy import Decision, PolicyDocument
from refund_desk.storage.models import AdvisorCall, Case

ANSWER_RULE = "policy-question"
ADVISORY = "Advisory (AI-generated, not a decision)"
ERASED = "[erased]"  # what stands where an erased customer's words were


def provenance(case: Case) -> dict[str, str | None]:
    """Where each consequential field of the case came from."""
    return {
        "payment": Provenance.customer_input,  # the id the requester gave; checked at intake
        "currency": Provenance.system_of_record,  # intake refuses one unlike the payment's
        "amount": case.amount_source,
        "reason": case.reason_source,
        "customer.verified": Provenance.system_of_record,  # email matched to the payment's
        "order": Provenance.system_of_record,
        "customer.history": Provenance.system_of_record,
        "possible_duplicate": Provenance.system_of_record,
        "advice": Provenance.model_inference,  # confidence, flags, summary, read ids/amounts
    }


def policy_texts(doc: PolicyDocument | None) -> tuple[PolicyText, ...]:
    """The rules an advisor may cite: those with a `say` (the merchant's published words)."""
    if doc is None:
        return ()
    return tuple(PolicyText(rule=r.id, say=r.say, when=r.when) for r in doc.rules if r.say)


@dataclass(frozen=True)
class Question:
    """A question about the policy; `answer` is None when no published rule answers it."""

    cited: tuple[str, ...]
    answer: str | None


def seal_summary(
    vault: Vault, session: Session, case: Case, advice: dict[str, Any]
) -> dict[str, Any]:
    """The advice as stored: its summary quotes the customer's words, so it is encrypted
    under the customer's data key like their message, and an erasure makes it unreadable
    in every copy (an old row version, a backup) at once."""
    summary = advice.get("summary")
    if not isinstance(summary, str) or not summary or summary == ERASED:
        return advice
    cipher = vault.for_customer(session, case.email_hash)
    return {**advice, "summary": cipher.encrypt(summary)}


def summary_text(vault: Vault, advice: dict[str, Any], *, session: Session | None = None) -> str:
    """The advisor's summary to show a person: plain text, or ERASED once the key is gone."""
    summary = advice.get("summary")
    if not isinstance(summary, str) or not summary:
        return ""
    # ERASED, or a summary stored before summaries were sealed, stays as it is.
    return vault.unseal(summary, session=session) or ERASED


def amount_asked_in_words(case: Case, advice: dict[str, Any]) -> int | None:
    """The smaller amount the message asks for when the request's fields named none: only in
    the case's currency and below what the case stands for (the price paid changes nothing)."""
    if case.requested_amount is not None or case.amount_source != Provenance.system_of_record:
        return None
    minor, currency = advice.get("amount_minor"), advice.get("currency")
    if not isinstance(minor, int) or isinstance(minor, bool) or not 0 < minor < case.amount:
        return None
    if currency is None and money.exponent(case.currency) != 2:
        return None  # an amount with no currency is in hundredths
    if currency is not None and str(currency).upper() != case.currency.upper():
        return None
    return minor


def policy_question(case: Case, policy: LoadedPolicy | None) -> Question | None:
    """The case is a tier-1 question, not a request for money: only when the advisor says so
    *and* the requester typed no amount and no reason."""
    advice = case.advice or {}
    if advice.get("intent") != "policy_question":
        return None
    if case.requested_amount is not None or case.reason_source == Provenance.customer_input:
        return None
    if policy is None or advice.get("injection_suspected"):
        return Question((), None)  # unanswered: a person reads it (a flagged message always)
    floor = policy.doc.advisor.min_confidence
    if floor is not None and float(advice.get("confidence") or 0) < floor:
        return Question((), None)
    says = {p.rule: p.say for p in policy_texts(policy.doc)}
    cited = tuple(r for r in advice.get("cited_rules") or () if r in says)
    if not cited:
        return Question((), None)
    text = " ".join(says[r].strip() for r in cited)
    ref = ", ".join(cited)
    return Question(cited, f"{text} (Refund policy v{policy.version}, rule {ref}.)")


def answered_record(question: Question) -> dict[str, Any]:
    """The decision record of a tier-1 answer: outcome `inform`, no money, rules cited."""
    return {
        "outcome": "inform",
        "rule": ANSWER_RULE,
        "tier": 1,
        "approvers": None,
        "say": question.answer,
        "error": None,
        "trace": [],
        "policy_rule": ANSWER_RULE,
        "counterfactual": None,
        "guardrails": [],
        "automatic": False,
        "cited_rules": list(question.cited),
    }


def to_review(
    decision: Decision, policy: LoadedPolicy | None, rule: str, **changes: Any
) -> Decision:
    """`decision` turned into a review by `rule`, at tier 3 or higher, in the group the policy
    names for it: it never pays or denies by itself."""
    approvers = decision.approvers
    if approvers is None and policy is not None:
        approvers = policy.doc.approvers_for(policy.doc.default)
    tier = max(3, decision.tier)
    return replace(
        decision, outcome="review", rule=rule, tier=tier, approvers=approvers, say=None, **changes
    )


_GUARDRAILS = {
    "possible-duplicate": "another open case or a recent refund of this amount exists",
    "unverified-customer": "the requester's email is not the payer's",
    "model-amount": "only the model produced the amount",
    "suspected-injection": "the message tries to instruct the system",
    "low-confidence": "the advisor is not confident enough of its reading",
    "unknown-amount": "the amount or what is refundable is unknown",
    "currency-mismatch": "the currency is not the payment's or the policy's",
    "exceeds-refundable": "more than is left to refund",
    ANSWER_RULE: "the customer asks about the policy and no published rule answers it",
}


def why(rule: str, policy: LoadedPolicy | None) -> str:
    """Why ``rule`` decided, in words: the guardrail's meaning, or the rule's description
    (its condition where it has none)."""
    if rule.startswith("guardrail:"):
        return _GUARDRAILS.get(rule.removeprefix("guardrail:"), "a hard limit")
    if policy is None:
        return "no policy is published"
    if rule == "default":
        return policy.doc.default.description or "no rule matched"
    try:
        found = policy.doc.rule(rule)
    except KeyError:
        return rule
    return found.description or found.when


def explanation(
    case: Case, context: dict[str, Any], record: dict[str, Any], policy: LoadedPolicy | None
) -> str:
    """What the customer asked, what the record shows, which rule fired and why."""
    advice = case.advice or {}
    order, customer = context["order"], context["customer"]
    cur = case.currency

    def fmt(minor: int | None) -> str:
        return "unknown" if minor is None else money.format_money(minor, cur)

    ask = f"{fmt(case.amount)} ({case.amount_source})"
    reason = f"{case.reason or 'unknown'} ({case.reason_source or 'unknown'}"
    if case.reason_source == Provenance.model_inference and advice.get("confidence") is not None:
        reason += f", confidence {float(advice['confidence']):.2f}"
    verified = "verified" if customer.get("verified") else "NOT verified"
    lines = [
        f"{ADVISORY}.",
        f"Asked: amount {ask}; reason {reason}).",  # the customer's words stay sealed
        f"Record: paid {fmt(order.get('amount'))} {order.get('age_days')} days ago, "
        f"refundable {fmt(order.get('refundable'))}; customer {verified}, "
        f"{customer.get('refunds_90d')} refunds in 90 days, "
        f"{customer.get('chargebacks_365d')} chargebacks in 365 days.",
        f"Rule: {record.get('rule')} -> {record.get('outcome')} (tier {record.get('tier')}): "
        f"{why(str(record.get('rule')), policy)}.",
    ]
    if record.get("error"):
        lines.append(f"Error: {record['error']}.")
    if advice.get("injection_suspected"):
        lines.append("Flag: the message tries to instruct the system; it was treated as data.")
    return " ".join(lines)


def record_call(
    session: Session,
    *,
    now: datetime,
    case_id: str | None,
    advisor: Advisor,
    advice: dict[str, Any] | None,
    error: AdvisorError | None,
) -> None:
    """One row per advisor call: `parsed`, `unparsed` (answered, bad format) or `failed`."""
    if advice is not None and advice.get("fallback"):  # the model failed; offline answered
        outcome = "unparsed" if advice.get("fallback_format_error") else "failed"
        prompt, completion = advice["prompt_tokens"], 0
    elif advice is not None:
        outcome, prompt, completion = "parsed", advice["prompt_tokens"], advice["completion_tokens"]
    else:
        outcome = "unparsed" if error is not None and error.format_error else "failed"
        prompt, completion = (error.tokens_used if error else 0), 0
    session.connection().execute(  # a row nothing in the transaction reads back
        _ADD_CALL,
        {
            "at": now,
            "day": now.date().isoformat(),
            "case_id": case_id,
            "correlation_id": (
                logs.current()[1] if case_id and logs.current()[0] == case_id else None
            ),
            "provider": advisor.name,
            "model": advice["model"] if advice else getattr(advisor, "model", None),
            "outcome": outcome,
            "error_code": error.code if error else (advice or {}).get("fallback"),
            "prompt_tokens": prompt,
            "completion_tokens": completion,
        },
    )


_ADD_CALL = insert(AdvisorCall.__table__)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class DayFigures:
    day: str
    provider: str
    calls: int
    answers: int  # parsed + unparsed: the model said something
    parsed: int
    tokens: int

    @property
    def format_adherence(self) -> float | None:
        """Share of answers that parsed; None on a day without answers."""
        return self.parsed / self.answers if self.answers else None


def format_by_day(session: Session) -> list[DayFigures]:
    outcome = col(AdvisorCall.outcome)
    rows = session.execute(
        select(
            col(AdvisorCall.day),
            col(AdvisorCall.provider),
            func.count(),
            func.count().filter(outcome.in_(["parsed", "unparsed"])),
            func.count().filter(outcome == "parsed"),
            func.sum(col(AdvisorCall.prompt_tokens) + col(AdvisorCall.completion_tokens)),
        )
        .group_by(col(AdvisorCall.day), col(AdvisorCall.provider))
        .order_by(col(AdvisorCall.day), col(AdvisorCall.provider))
    ).all()
    return [DayFigures(d, p, n, a, parsed, int(t or 0)) for d, p, n, a, parsed, t in rows]
