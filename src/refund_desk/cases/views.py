"""A case as the API shows it: DESIGN.md's shape, amounts as decimal strings in major units."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlmodel import Session, col

from refund_desk import money
from refund_desk.cases.advisory import summary_text
from refund_desk.cases.errors import NotFound
from refund_desk.cases.evidence import shown
from refund_desk.crypto import Vault
from refund_desk.storage.audit import record_json
from refund_desk.storage.models import AuditRecord, Case, Execution, Payment, SlackMessage


def major(minor: int | None, currency: str) -> str | None:
    return None if minor is None else str(money.to_major(minor, currency))


def case_view(
    session: Session, case_id: str, *, with_audit: bool, vault: Vault | None = None
) -> dict[str, Any]:
    """The case as the API shows it; `with_audit` adds the record, the facts and the advice.
    What the customer wrote (the advice's summary, evidence links and file names) is unsealed
    with `vault`, and left out (None) without one."""
    case = session.get(Case, case_id)
    if case is None:
        raise NotFound("case_not_found", f"No case {case_id} exists.")
    executions = session.scalars(
        select(Execution)
        .where(col(Execution.case_id) == case_id)
        .order_by(col(Execution.created_at))
    ).all()
    payment = session.get(Payment, case.payment_id)
    processor = payment.processor if payment is not None else None
    view = _view(case, executions, slack_delivery(session, case_id), vault, session, processor)
    if with_audit:
        _add_audit(session, view, case, vault)
    return view


def new_case_view(case: Case, processor: str | None) -> dict[str, Any]:
    """`case_view` without the record, of a case its own transaction just inserted: nothing
    refers to it yet (no execution, no Slack message), so nothing needs reading."""
    return _view(case, (), None, None, None, processor)


def _view(
    case: Case,
    executions: Sequence[Execution],
    slack: dict[str, Any] | None,
    vault: Vault | None,
    session: Session | None,
    processor: str | None,
) -> dict[str, Any]:
    decision = case.decision or {}
    wanted = case.asked()
    refunded = sum(e.amount for e in executions if e.status == "succeeded")
    return {
        "id": case.id,
        "status": case.status,
        "revision": case.revision,
        "amount": major(case.amount, case.currency),
        "currency": case.currency,
        "amount_source": case.amount_source,
        # What the customer asked for, and what was paid: "200.00 of 320.00" for a partial.
        "requested_amount": major(wanted, case.currency),
        "refunded_amount": major(refunded, case.currency),
        "partial": case.status == "refunded" and wanted is not None and refunded < wanted,
        "payment": case.payment_id,
        "processor": processor,
        "source": case.source,
        "external_id": case.external_id,
        "reason": case.reason,
        "reason_source": case.reason_source,
        "customer_verified": case.customer_verified,
        "possible_duplicate": case.possible_duplicate,
        "duplicate_of": case.duplicate_of,
        "appeal_of": case.appeal_of,
        "evidence": [
            {k: v for k, v in item.items() if k not in ("view_url", "file")}
            for item in shown(vault, case.evidence, session=session)
        ],
        "decision": {
            "outcome": decision.get("outcome"),
            "rule": decision.get("rule"),
            "tier": decision.get("tier"),
            "policy_version": case.policy_version,
            "reason": decision.get("error") or decision.get("say"),
        },
        "customer_message": case.customer_message,
        "park_reason": case.park_reason,
        "escalation_level": case.escalation_level,
        "sla_due_at": case.sla_due_at.isoformat() if case.sla_due_at else None,
        "refunds": [
            {
                "id": e.processor_refund_id or e.id,
                "processor": processor,
                "execution_id": e.id,
                "amount": major(e.amount, e.currency),
                "status": e.processor_status or e.status,
            }
            for e in executions
        ],
        "created_at": case.created_at.isoformat(),
        "updated_at": case.updated_at.isoformat(),
        "erased_at": case.erased_at.isoformat() if case.erased_at else None,
        "slack": slack,
    }


def _add_audit(session: Session, view: dict[str, Any], case: Case, vault: Vault | None) -> None:
    decision = case.decision or {}
    view["decision"]["trace"] = decision.get("trace", [])
    view["decision"]["approvers"] = decision.get("approvers")
    view["decision"]["counterfactual"] = decision.get("counterfactual")
    view["facts"] = case.facts
    advice = dict(case.advice or {})
    if "summary" in advice:
        advice["summary"] = summary_text(vault, advice, session=session) if vault else None
    view["advice"] = advice if case.advice is not None else None
    view["earlier_messages"] = vault.decrypt(case.earlier_enc, session=session) if vault else None
    view["provenance"] = case.provenance
    records = session.scalars(
        select(AuditRecord)
        .where(col(AuditRecord.case_id) == case.id)
        .order_by(col(AuditRecord.seq))
    ).all()
    view["audit"] = [record_json(r) for r in records]


def slack_delivery(session: Session, case_id: str) -> dict[str, Any] | None:
    """Where the case's card is in Slack, or why Slack would not take it (None: no card)."""
    rows = session.scalars(
        select(SlackMessage)
        .where(col(SlackMessage.case_id) == case_id, col(SlackMessage.kind) != "dm")
        .order_by(col(SlackMessage.id))
    ).all()
    card = next((m for m in rows if m.kind == "card"), None)
    if card is not None:
        return {"status": "delivered", "channel": card.channel, "ts": card.ts}
    failed = next((m for m in rows if m.kind == "undelivered"), None)
    if failed is not None:
        return {"status": "not delivered to Slack", "channel": failed.channel, "error": failed.ts}
    return None
