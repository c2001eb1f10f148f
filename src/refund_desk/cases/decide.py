"""Advise, decide and route a case: the network calls (the advisor, the processor) first, then
one short transaction for the advice, the decision and the route; never a call inside one."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from refund_desk.cases import advisory
from refund_desk.cases import facts as case_facts
from refund_desk.cases.executor import enqueue_execution, pay_reserved, reserve_early
from refund_desk.cases.lifecycle import Status, mark_possible_duplicate, move, set_amount
from refund_desk.cases.ports import (
    AdviceRequest,
    AdvisorError,
    PaymentFacts,
    ProcessorError,
    Provenance,
)
from refund_desk.cases.rows import load_for_update
from refund_desk.crypto import hold_key_of_case
from refund_desk.governance import shadow
from refund_desk.governance.versions import (
    LoadedPolicy,
    control,
    evaluate,
    load_version,
    strictest_route,
)
from refund_desk.jobs.queue import ClaimedJob, RetryLater, backoff
from refund_desk.policy import Decision
from refund_desk.storage.audit import MODEL, POLICY, SYSTEM
from refund_desk.storage.db import lock_payment
from refund_desk.storage.models import Case, Execution

if TYPE_CHECKING:
    from sqlmodel import Session

    from refund_desk.cases.desk import Desk

DEFAULT_DENIAL = "We could not approve this refund request."
PROCESSOR_PATIENCE = 8  # attempts before a case waiting on a down processor is parked


def advance(desk: Desk, job: ClaimedJob) -> None:
    """Advise, decide and route a case: the advisor and the processor are asked outside any
    transaction, then one transaction records it all. If the processor cannot be asked, the
    advice is recorded alone, so a retry never asks the advisor again."""
    case_id = job.payload["case_id"]
    request: AdviceRequest | None = None
    with desk.db.read() as session:
        case = session.get(Case, case_id)
        if case is not None and case.status == Status.received:
            request = _request(desk, session, case)  # decrypted here: one read, not four
    if case is None or case.status not in (Status.received, Status.advised):
        return
    asked = _ask(desk, request) if request is not None else None
    payment_id = case.payment_id
    try:
        payment = desk.processor.payment(payment_id)
    except ProcessorError as exc:
        if asked is not None:
            with desk.db.write() as session:
                if _record_advice(desk, session, case_id, asked).status != Status.advised:
                    return  # decided meanwhile (a run of this job whose lease had run out)
        if exc.transient and job.failures + 1 < PROCESSOR_PATIENCE:
            raise RetryLater(backoff(job.failures + 1), f"{exc.code}: {exc.message}") from None
        _park(desk, case_id, f"The processor could not be asked about the payment ({exc.code}).")
        return
    claimed: ClaimedJob | None = None
    reserved: Execution | None = None
    try:
        with desk.db.write() as session:
            lock_payment(session, payment_id)  # the payment first, as everywhere else
            if asked is not None:
                locked = _record_advice(desk, session, case_id, asked)
            else:
                locked = load_for_update(session, case_id)
            exec_job, money = _decide(desk, session, locked, payment)
            if exec_job is not None and not desk.jobs_elsewhere:
                # Approved by the policy: reserve now, on the facts just read, and take the
                # execute job here; it only pays and records. This job ends in this commit.
                assert money is not None  # decided here
                reserved = reserve_early(desk, session, locked, payment, money)
                claimed = desk.jobs.claim_in(session, exec_job)
            correlation_id = locked.correlation_id
            desk.jobs.finish_in(session, job)
    except Exception:
        if asked is not None:  # keep the advice we have; the decision is retried
            with desk.db.write() as session:
                _record_advice(desk, session, case_id, asked)
        raise
    if claimed is not None and reserved is not None:
        desk.run_claimed(
            claimed, partial(pay_reserved, desk, execution=reserved, correlation_id=correlation_id)
        )
    elif claimed is not None:
        desk.run_claimed(claimed)
    else:
        desk.start(exec_job)


@dataclass(frozen=True)
class _Asked:
    advice: dict[str, Any] | None
    failure: str | None
    error: AdvisorError | None


def _request(desk: Desk, session: Session, case: Case) -> AdviceRequest:
    """What the advisor may see, with the pinned policy's rule texts for tier-1 questions."""
    pinned = load_version(session, case.policy_version) if case.policy_version else None
    name, email, message = (
        desk.vault.decrypt(field, session=session)
        for field in (case.name_enc, case.email_enc, case.message_enc)
    )
    return AdviceRequest(
        message=message or "",
        currency=case.currency,
        known_names=(name,) if name else (),
        known_emails=(email,) if email else (),
        policy=advisory.policy_texts(pinned.doc if pinned else None),
    )


def _ask(desk: Desk, request: AdviceRequest) -> _Asked:
    try:  # outside any transaction: the advisor may call a model over the network
        return _Asked(asdict(desk.advisor.advise(request)), None, None)
    except AdvisorError as exc:
        return _Asked(None, f"{exc.code}: {exc.message}", exc)


def _record_advice(desk: Desk, session: Session, case_id: str, asked: _Asked) -> Case:
    """Record the advice on the case; the case, locked."""
    hold_key_of_case(session, case_id)  # before the case: as an erasure takes them
    locked = load_for_update(session, case_id)
    advice, failure, error = asked.advice, asked.failure, asked.error
    advisory.record_call(session, now=desk.now(), case_id=case_id, advisor=desk.advisor,
                         advice=advice, error=error)  # fmt: skip
    if locked.status != Status.received:
        return locked  # someone else advised it meanwhile
    if advice is None:
        locked.provenance = advisory.provenance(locked)
        # No advice is not no policy: the policy decides on unknown facts (null means a
        # person looks) and names the tier and group, as with a working advisor.
        locked.advice = {"error": failure}
        move(
            session,
            desk.audit,
            locked,
            Status.advised,
            actor=MODEL,
            action="advisor.failed",
            payload={"error": failure, "tokens_used": error.tokens_used if error else 0},
        )
        return locked
    if locked.erased_at is not None:  # erased while the advisor read it: keep no quote of it
        advice = {**advice, "summary": advisory.ERASED}
    locked.advice = advisory.seal_summary(desk.vault, session, locked, advice)
    if locked.reason is None:
        locked.reason, locked.reason_source = advice["reason"], Provenance.model_inference
    in_words = advisory.amount_asked_in_words(locked, advice)
    if in_words is not None:
        # The request's fields named no amount, so the case was for all that is left, but its
        # words ask for less: the case is for what was asked, as the model read it, and only
        # a person can confirm an amount the model produced (invariant 1).
        set_amount(session, desk.audit, locked, in_words, Provenance.model_inference, actor=MODEL)
        repeated = case_facts.duplicate_of(session, locked.payment_id, in_words, exclude=locked.id)
        if repeated is not None and not locked.possible_duplicate:
            mark_possible_duplicate(session, desk.audit, locked, repeated, actor=MODEL)
    locked.provenance = advisory.provenance(locked)
    move(
        session,
        desk.audit,
        locked,
        Status.advised,
        actor=MODEL,
        action="advisor.advised",
        payload={
            k: advice[k]
            for k in (
                *("reason", "confidence", "injection_suspected", "intent", "cited_rules"),
                *("provider", "model", "tokens_used", "prompt_tokens", "completion_tokens"),
                "fallback",
            )
        },
    )
    return locked


def _decide(
    desk: Desk, session: Session, locked: Case, payment: PaymentFacts
) -> tuple[int | None, case_facts.Refundable | None]:
    """Decide an advised case (locked) and route it, in the caller's transaction (payment
    locked): the execute job it queued, if any, and the remainder it decided on."""
    now = desk.now()
    if locked.status != Status.advised:
        return None, None
    money = case_facts.refundable(session, payment)
    context = case_facts.policy_context(session, locked, payment, money, now)
    policy = load_version(session, locked.policy_version) if locked.policy_version else None
    decision = evaluate(policy, context)
    shadow.record(session, locked, context, decision)  # a shadow draft's view; no effect
    if (locked.advice or {}).get("error") and decision.automatic:
        # the advisor failed: what the policy would approve by itself waits for a person
        failed = "guardrail:advisor-failed"
        decision = advisory.to_review(
            decision, policy, failed, guardrails=(*decision.guardrails, failed)
        )
    question = advisory.policy_question(locked, policy)
    if question is not None and question.answer is None:  # no published rule answers it
        name = f"guardrail:{advisory.ANSWER_RULE}"
        decision = advisory.to_review(
            decision, policy, name, counterfactual=None, guardrails=(name, *decision.guardrails)
        )
    answered = question if question is not None and question.answer is not None else None
    locked.facts = context
    locked.decision = advisory.answered_record(answered) if answered else decision_record(decision)
    locked.advice = {
        **(locked.advice or {}),
        "explanation": advisory.explanation(locked, context, locked.decision, policy),
    }
    move(
        session,
        desk.audit,
        locked,
        Status.decided,
        actor=POLICY,
        action="policy.decided",
        payload={"decision": {k: v for k, v in locked.decision.items() if k != "trace"}},
    )
    if answered:  # tier 1: the policy's own words answer; no money moves
        locked.customer_message = locked.decision["say"]
        move(
            session,
            desk.audit,
            locked,
            Status.denied,
            actor=POLICY,
            action="case.answered",
            payload={"tier": 1, "cited_rules": locked.decision["cited_rules"]},
        )
        return None, money
    return route(desk, session, locked, decision), money


def strictest(policy: LoadedPolicy | None) -> dict[str, Any]:
    """A decision record for a case whose facts could not be read: the highest tier the policy
    defines and its group, never the default's."""
    if policy is None:
        return {"outcome": "review", "rule": "unknown-facts", "tier": 4, "approvers": None,
                "automatic": False, "say": None}  # fmt: skip
    tier, group = strictest_route(policy.doc)
    return {
        "outcome": "review",
        "rule": "unknown-facts",
        "tier": tier,
        "approvers": group,
        "automatic": False,
        "say": None,
        "error": None,
        "guardrails": ["guardrail:unknown-facts"],
        "trace": [],
    }


def decision_record(decision: Decision) -> dict[str, Any]:
    """The decision as stored on the case: JSON, with its trace and the guardrails that fired."""
    record = decision.to_dict()
    record["trace"] = list(record["trace"])
    record["guardrails"] = list(record["guardrails"])
    return record


def route(desk: Desk, session: Session, case: Case, decision: Decision) -> int | None:
    """Move a decided case on; returns the execution job to run, if any."""
    failed = (case.advice or {}).get("error")
    if failed and decision.outcome != "deny":
        # The decision (tier, group) is on the case; a person looks, knowing why.
        case.park_reason = f"The advisor failed ({failed}); a person must look."
        move(
            session,
            desk.audit,
            case,
            Status.parked,
            actor=POLICY,
            payload={"rule": decision.rule, "tier": decision.tier, "approvers": decision.approvers},
        )
        return None
    if decision.error:
        case.park_reason = f"The policy could not be evaluated: {decision.error}"
        move(
            session,
            desk.audit,
            case,
            Status.parked,
            actor=POLICY,
            action="policy.error",
            payload={"error": decision.error},
        )
        return None
    if decision.outcome == "deny":
        case.customer_message = decision.say or DEFAULT_DENIAL
        move(
            session,
            desk.audit,
            case,
            Status.denied,
            actor=POLICY,
            action="case.denied",
            payload={"rule": decision.rule},
        )
        return None
    waiting: dict[str, Any] = {"tier": decision.tier, "approvers": decision.approvers}
    if decision.outcome == "approve" and decision.automatic:
        switches = control(session)
        if switches.mode == "supervised":
            move(
                session,
                desk.audit,
                case,
                Status.approved,
                actor=POLICY,
                action="case.approved",
                payload={"rule": decision.rule, "basis": "policy"},
            )
            return enqueue_execution(session, case, desk.now())
        waiting = {
            "note": "Shadow mode: the policy would have refunded this automatically."
            if switches.mode == "shadow"
            else "Approve-all mode: every refund needs a person."
        }
    move(
        session,
        desk.audit,
        case,
        Status.awaiting_approval,
        actor=POLICY,
        action="case.awaiting_approval",
        payload={"rule": decision.rule, **waiting},
    )
    return None


def _park(desk: Desk, case_id: str, reason: str) -> None:
    with desk.db.write() as session:
        case = load_for_update(session, case_id)
        if case.status in (Status.refunded, Status.denied, Status.parked):
            return
        case.park_reason = reason
        if case.decision is None:  # who decides is still the policy's: its strictest authority
            pinned = load_version(session, case.policy_version) if case.policy_version else None
            case.decision = strictest(pinned)
        move(session, desk.audit, case, Status.parked, actor=SYSTEM, payload={"reason": reason})
