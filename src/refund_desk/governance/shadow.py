"""Shadow runs: while a draft is set as the shadow, every new case is also decided by it.

The shadow decision is stored beside the case and has no effect on it. ``record`` runs inside
the deciding transaction and never raises for a problem of the draft: the live decision must
not depend on a draft.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlmodel import Session, col

from refund_desk import clock, money
from refund_desk.cases.errors import InvalidRequest
from refund_desk.governance.drafts import Change, compiled, get_draft
from refund_desk.governance.versions import control
from refund_desk.policy import Decision, PolicyError
from refund_desk.storage.audit import Actor, AuditLog
from refund_desk.storage.models import Case, PolicyDraft, ShadowDecision
from refund_desk.text import Code, Mark, Text, lines, text

log = logging.getLogger(__name__)
SHOWN_DISAGREEMENTS = 10


def start(session: Session, audit: AuditLog, *, draft_id: int, actor: Actor) -> Change:
    draft = get_draft(session, draft_id)
    if draft.content_hash is None:
        raise InvalidRequest(
            "policy_invalid", text(f"d{draft_id} is not valid; ", Code("validate"), " says why.")
        )
    switches = control(session)
    switches.shadow_draft, switches.shadow_started_at = draft_id, clock.now()
    session.add(switches)
    audit.append(
        session,
        action="policy.shadow_started",
        actor=actor,
        payload={"draft": draft_id, "content_hash": draft.content_hash},
    )
    said = text(
        Mark("shadow"),
        " ",
        actor.who,
        f" started a shadow run of d{draft_id}: new cases are also decided by it, without effect. ",
        Code("/refund-policy shadow report"),
        " compares.",
    )
    return Change(reply=said, announce=said)


def stop(session: Session, audit: AuditLog, *, actor: Actor) -> Change:
    switches = control(session)
    draft_id = switches.shadow_draft
    if draft_id is None:
        return Change(reply=text("No shadow run is going on."))
    switches.shadow_draft = None
    session.add(switches)
    audit.append(session, action="policy.shadow_stopped", actor=actor, payload={"draft": draft_id})
    said = lines(
        text(actor.who, f" stopped the shadow run of d{draft_id}."),
        report(session, draft_id),
    )
    return Change(reply=said, announce=said)


def record(session: Session, case: Case, context: Mapping[str, Any], live: Decision) -> None:
    """Decide ``case`` with the shadow draft too, if one is set; no effect on the case."""
    draft_id = control(session).shadow_draft
    if draft_id is None:
        return
    draft = session.get(PolicyDraft, draft_id)
    if draft is None or draft.content_hash is None:
        return
    try:
        shadow = compiled(draft.content_hash, draft.source).evaluate(context, counterfactual=False)
        outcome, rule = str(shadow.outcome), shadow.rule
    except PolicyError as exc:  # the draft cannot decide this case: that is a disagreement
        log.warning("shadow draft d%s could not decide case %s: %s", draft_id, case.id, exc)
        outcome, rule = "error", "error"
    session.merge(
        ShadowDecision(
            case_id=case.id,
            draft_id=draft_id,
            content_hash=draft.content_hash,
            live_outcome=live.outcome,
            live_rule=live.rule,
            outcome=outcome,
            rule=rule,
            agree=outcome == live.outcome,
            amount=case.amount,
            currency=case.currency,
            created_at=clock.now(),
        )
    )


@dataclass(frozen=True)
class Tally:
    """A shadow run so far: how many cases agree, and the latest that do not."""

    draft_id: int
    total: int
    agree: int
    disagreements: list[ShadowDecision]

    def to_json(self) -> dict[str, Any]:
        return {
            "draft": f"d{self.draft_id}",
            "cases": self.total,
            "agree": self.agree,
            "disagree": self.total - self.agree,
            "disagreements": [
                {
                    "case_id": r.case_id,
                    "amount": str(money.to_major(r.amount, r.currency)),
                    "currency": r.currency,
                    "live": {"outcome": r.live_outcome, "rule": r.live_rule},
                    "shadow": {"outcome": r.outcome, "rule": r.rule},
                }
                for r in self.disagreements
            ],
        }


def tally(session: Session, draft_id: int | None = None) -> Tally | None:
    """The (current or given) shadow draft's agreement; None when no run is going on."""
    draft_id = draft_id if draft_id is not None else control(session).shadow_draft
    if draft_id is None:
        return None
    mine = col(ShadowDecision.draft_id) == draft_id
    counts = select(func.count(), func.count().filter(col(ShadowDecision.agree)))
    total, agree = session.execute(counts.select_from(ShadowDecision).where(mine)).one()
    rows = session.scalars(
        select(ShadowDecision)
        .where(mine, col(ShadowDecision.agree).is_(False))
        .order_by(col(ShadowDecision.created_at).desc())
        .limit(SHOWN_DISAGREEMENTS)
    ).all()
    return Tally(draft_id, total, agree, list(rows))


def report(session: Session, draft_id: int | None = None) -> Text:
    """Agreement rate of the (current or given) shadow draft and the disagreeing cases."""
    run = tally(session, draft_id)
    if run is None:
        return text(
            "No shadow run is going on; start one with ",
            Code("/refund-policy shadow start DRAFT"),
            ".",
        )
    if run.total == 0:
        return text(f"Shadow run of d{run.draft_id}: no new cases yet.")
    head = (
        f"Shadow run of d{run.draft_id}: {run.agree} of {run.total} cases agree "
        f"({run.agree / run.total:.0%}); {run.total - run.agree} disagree."
    )
    return lines(
        text(head),
        *[
            text(
                "• ",
                Code(r.case_id),
                f" {money.format_money(r.amount, r.currency)}: live {r.live_outcome} (",
                Code(r.live_rule),
                f"), shadow {r.outcome} (",
                Code(r.rule),
                ")",
            )
            for r in run.disagreements
        ],
    )
