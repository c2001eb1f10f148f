"""What a case card shows, read from the record at the moment the card is drawn.

The outbox calls this inside its job (never on the event loop), on every post and update, so
the refundable amount, the approvals and the customer line are true when the card is drawn.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlmodel import Session, col

from refund_desk.bot.blocks.cards import CardContext, Decider, Told, record_url
from refund_desk.cases import advisory
from refund_desk.cases.advisory import why
from refund_desk.cases.approvals import deciders, may_not_act
from refund_desk.cases.desk import Desk
from refund_desk.cases.evidence import shown
from refund_desk.cases.facts import left_on_record
from refund_desk.cases.quorum import approval_count, approvals_needed
from refund_desk.governance.versions import LoadedPolicy
from refund_desk.storage.models import Approval, Case, CustomerMessage, Execution, Payment


def card_context(
    session: Session,
    desk: Desk,
    case: Case,
    policy: LoadedPolicy | None,
    now: datetime,
    *,
    desk_url: str | None = None,
) -> CardContext:
    decision = case.decision or {}
    group = decision.get("approvers")
    if group is None and policy is not None:
        group = policy.doc.approvers_for(policy.doc.default)
    return CardContext(
        case=case,
        email=desk.vault.decrypt(case.email_enc),
        approvals=approval_count(session, case),
        needed=approvals_needed(case),
        channel_group=group,
        now=now,
        authority=deciders(session, case, policy) if policy is not None else None,
        not_acting=frozenset(may_not_act(session, case)),
        why=case.park_reason or _why(case, policy),
        asked=case.asked(),
        left=left_on_record(session, case.payment_id),
        refunded=_refunded(session, case.id),
        deciders=_deciders(session, case),
        told=_told(session, case.id),
        summary=advisory.summary_text(desk.vault, case.advice or {}, session=session),
        evidence=tuple(shown(desk.vault, case.evidence, session=session)),
        processor=_processor(session, case.payment_id),
        record_url=record_url(desk_url, case.id),
    )


def _processor(session: Session, payment_id: str) -> str | None:
    payment = session.get(Payment, payment_id)
    return payment.processor if payment is not None else None


def _why(case: Case, policy: LoadedPolicy | None) -> str | None:
    decision = case.decision or {}
    if decision.get("error"):
        return f"the policy could not decide: {decision['error']}"
    if say := decision.get("say"):
        return str(say)
    rule = decision.get("rule")
    return why(str(rule), policy) if rule else None


def _refunded(session: Session, case_id: str) -> int:
    paid = session.scalar(
        select(func.coalesce(func.sum(col(Execution.amount)), 0)).where(
            col(Execution.case_id) == case_id, col(Execution.status) == "succeeded"
        )
    )
    return int(paid or 0)


def _deciders(session: Session, case: Case) -> tuple[Decider, ...]:
    """This round's approvals, and every deny and escalation, oldest first."""
    rows = session.scalars(
        select(Approval)
        .where(col(Approval.case_id) == case.id)
        .order_by(col(Approval.created_at), col(Approval.id))
    ).all()
    return tuple(
        Decider(r.approver, r.decision, r.created_at, r.amount, r.reason)
        for r in rows
        if r.decision != "approve" or r.round == case.approval_round
    )


def _told(session: Session, case_id: str) -> Told | None:
    message = session.scalars(
        select(CustomerMessage)
        .where(col(CustomerMessage.case_id) == case_id, col(CustomerMessage.direction) == "out")
        .order_by(col(CustomerMessage.id).desc())
        .limit(1)
    ).first()
    if message is None:
        return None
    channel = None if message.channel in (None, "none") else message.channel
    return Told(message.body, channel, message.status)
