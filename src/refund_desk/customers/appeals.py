"""Appeals: a denied customer may ask once for a second look, through a signed link.

The link carries a signed, expiring token naming the denied case. Opening it (a GET, which mail
scanners do) only shows a form; the POST creates the appeal: a new case linked to the first
(`appeal_of`, unique, so a case is appealed at most once), routed straight to people at tier 4
(two distinct approvers, never automatic), and `approvals.act` refuses whoever decided the
first case.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlmodel import Session, col

from refund_desk.cases import evidence
from refund_desk.cases.errors import AppealRefused
from refund_desk.cases.intake import Submitted, to_major_text
from refund_desk.cases.lifecycle import Status, move, set_amount
from refund_desk.crypto import keyed_hash, same
from refund_desk.customers import intake as channels
from refund_desk.governance.versions import load_version
from refund_desk.storage.audit import SYSTEM, Actor
from refund_desk.storage.models import Case

if TYPE_CHECKING:
    from refund_desk.cases.desk import Desk

LINK_LIFETIME = timedelta(days=30)
TIER = 4


def issue(secret: str, case_id: str, *, now: datetime) -> str:
    claims = {"case_id": case_id, "exp": int((now + LINK_LIFETIME).timestamp())}
    raw = json.dumps(claims, separators=(",", ":")).encode()
    body = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    return f"{body}.{_sign(secret, body)}"


def verify(secret: str, token: str, *, now: datetime) -> str:
    """The denied case a link names; raises AppealRefused for a bad or expired link."""
    body, _, sig = token.partition(".")
    if not body or not sig or not same(_sign(secret, body), sig):
        raise AppealRefused("appeal_link_invalid", "This appeal link is not valid.")
    try:
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        case_id, exp = str(data["case_id"]), int(data["exp"])
    except (ValueError, KeyError, TypeError):
        raise AppealRefused("appeal_link_invalid", "This appeal link is not valid.") from None
    if now.timestamp() > exp:
        raise AppealRefused("appeal_link_expired", "This appeal link has expired.")
    return case_id


def _sign(secret: str, body: str) -> str:
    return keyed_hash(secret, "appeal-links", body)


def appealable(case: Case) -> bool:
    """A denial of a refund (not a tier-1 answer to a question), and not itself an appeal."""
    tier = int((case.decision or {}).get("tier") or 3)
    return case.status == Status.denied and case.appeal_of is None and tier != 1


def link_maker(desk: Desk, base_url: str) -> Callable[[Case], str | None]:
    def link(case: Case) -> str | None:
        if not appealable(case):
            return None
        return f"{base_url.rstrip('/')}/appeal/{issue(desk.secret, case.id, now=desk.now())}"

    return link


def existing_appeal(session: Session, case_id: str) -> str | None:
    found = session.scalar(select(col(Case.id)).where(col(Case.appeal_of) == case_id))
    return str(found) if found else None


def check(desk: Desk, token: str) -> Case:
    """What a GET may do: verify the link and read the case. Nothing is written."""
    case_id = verify(desk.secret, token, now=desk.now())
    with desk.db.read() as session:
        case = session.get(Case, case_id)
    if case is None or not appealable(case):
        raise AppealRefused("not_appealable", "This decision cannot be appealed.")
    return case


def create(
    desk: Desk, token: str, *, message: str | None, base_url: str, store: evidence.EvidenceStore
) -> Submitted:
    """The POST: one appeal per denied case; a second POST answers with the same appeal."""
    original = check(desk, token)
    with desk.db.read() as session:
        already = existing_appeal(session, original.id)
    if already:
        return Submitted(already, created=False)
    vault = desk.vault
    reply: dict[str, Any] = json.loads(vault.decrypt(original.reply_enc) or "{}")
    asked = original.requested_amount if original.requested_amount is not None else original.amount

    def prepare(session: Session, case: Case) -> None:
        case.appeal_of = original.id
        case.requested_by = original.requested_by  # who filed the first case never approves
        case.callback_url = original.callback_url
        cipher = desk.vault.for_customer(session, case.email_hash)
        case.evidence = evidence.sealed_copy(cipher, original.evidence) or None
        case.facts = original.facts  # what the first decision knew; execution re-checks anyway
        if original.requested_amount is None and case.amount_source != original.amount_source:
            # The customer never typed the amount: it keeps the first case's provenance (the
            # model's reading stays the model's, which only a person can confirm).
            case.requested_amount = None
            set_amount(session, desk.audit, case, case.amount, original.amount_source, actor=SYSTEM)
        _route(desk, session, case, original)

    req = channels.ChannelRequest(
        source=original.source,
        email=vault.decrypt(original.email_enc) or "",
        payment=original.payment_id,
        actor=Actor("customer", "appeal"),
        dedupe=f"appeal:{original.id}",
        amount=to_major_text(asked, original.currency),
        message=message,
        reason=original.reason if original.reason_source == "customer_input" else None,
        external_id=original.external_id,
        links=evidence.links_in(message),
        reply=reply,
        prepare=prepare,
    )
    return channels.receive(desk, req, store=store, base_url=base_url)


def _route(desk: Desk, session: Session, case: Case, original: Case) -> None:
    """Straight to people at tier 4: the policy already spoke on the first case."""
    policy = load_version(session, case.policy_version) if case.policy_version else None
    group = (original.decision or {}).get("approvers")
    if policy is not None:
        tier4 = next(
            (r.approvers for r in policy.doc.rules if r.tier == TIER and r.approvers), None
        )
        group = tier4 or group or policy.doc.approvers_for(policy.doc.default)
    case.decision = {
        "outcome": "review",
        "rule": "guardrail:appeal",
        "policy_rule": "guardrail:appeal",
        "tier": TIER,
        "approvers": group,
        "say": None,
        "error": None,
        "trace": [],
        "guardrails": ["guardrail:appeal"],
        "appeal_of": original.id,
    }
    decision = {k: v for k, v in case.decision.items() if k != "trace"}
    for status, action, payload in (
        (Status.advised, "appeal.received", {"appeal_of": original.id}),
        (Status.decided, "appeal.decided", {"decision": decision}),
        (
            Status.awaiting_approval,
            "case.awaiting_approval",
            {"rule": "guardrail:appeal", "tier": TIER, "approvers": group},
        ),
    ):
        move(session, desk.audit, case, status, actor=SYSTEM, action=action, payload=payload)
