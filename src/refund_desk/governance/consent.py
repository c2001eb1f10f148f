"""Who must agree to a change of the live policy: loosening always takes two leads.

Every change a lead makes from Slack is judged first (a ``Proposal``): *looser* when it
widens who may pay or how much (a version the prover finds more permissive anywhere, rules
or authority; the mode back to ``supervised``; a lower review sample rate; the second-lead
rule switched off). A looser change needs a second lead whatever the setting; with
``second-lead on``, so does every other change but the two that only stop (``pause`` and
``second-lead on``, which never ask). Otherwise one lead is enough.

A request is bound to a ``digest``: the sha256 of the state it starts from and the state it
leads to (for a publish, the draft's content hash and the active version). A second lead
confirms only that digest, only while the request is open (no change of the same kind
applied since, ``voided_by``, and within a day), and only as a different person; the surface
has checked that they are a lead of the version active before the change
(``drafts.require_lead``). Otherwise the second lead's command is a request of its own. The
CLI is the machine admin's and is not gated.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlmodel import Session, col

from refund_desk import clock
from refund_desk.cases.errors import InvalidRequest
from refund_desk.governance.drafts import Change, leads
from refund_desk.governance.versions import control
from refund_desk.storage.audit import Actor, AuditLog, canonical
from refund_desk.storage.models import AuditRecord
from refund_desk.text import Code, Person, Text, join, lines, text

SHORT = 16
"""Hex characters of a digest shown and typed: 64 bits, beyond a brute-forced look-alike."""
REQUEST_LIFETIME = timedelta(days=1)
REQUESTED = ("policy.change_requested", "policy.publish_requested")
CONFIRMED = "policy.change_confirmed"
_HEX = re.compile(r"^[0-9a-f]+$")


@dataclass(frozen=True)
class Proposal:
    """A change a lead asks for, judged; ``digest`` names exactly what it changes."""

    change: str  # which change, for matching requests: "publish:d3", "mode:supervised", ...
    what: str  # for sentences: "publish d3", "set the mode to supervised"
    command: str  # what a second lead sends: "publish d3 confirm 0123…", "mode supervised"
    digest: str
    looser: bool
    why: Text | None = None  # what the judgement rests on (the proof's summary)
    voided_by: tuple[str, ...] = ()
    """Audit actions that close an earlier request for this change once applied: the state
    it started from may have come back since (paused, resumed, paused again)."""

    @property
    def short(self) -> str:
        return self.digest[:SHORT]


def digest_of(**state: Any) -> str:
    """The sha256 of a change's canonical JSON: where it starts, where it leads."""
    return hashlib.sha256(canonical(state).encode("utf-8")).hexdigest()


def needs_second_lead(session: Session, proposal: Proposal) -> bool:
    """Looser: always. Otherwise as the second-lead setting says."""
    return proposal.looser or control(session).publish_needs_second_lead


def other_leads(session: Session, user: str | None) -> list[str]:
    """The active version's leads but ``user`` (a user group counts: it may hold others)."""
    return [lead for lead in leads(session) if lead != user]


def second_leads(session: Session, asked_by: str | None = None) -> Text | None:
    """Who may confirm a change, by name ("Lee Park or Lina Haddad"): the leads of the active
    version (``drafts.leads``, the list ``require_lead`` checks) but the one who asked; with
    nobody asking yet, all of them, if there are two. None when nobody can: the policy has
    one lead (a user group may hold more)."""
    others = other_leads(session, asked_by)
    one = len(others) == 1 and not others[0].startswith("S")  # `S…`: a user group
    if not others or (asked_by is None and one):
        return None
    return join(" or ", [Person(lead) for lead in others])


def nobody_confirms(session: Session) -> Text:
    """Why a change that needs a second lead cannot be confirmed from Slack."""
    return text(
        "nobody can confirm it in Slack: ",
        join(" and ", [Person(lead) for lead in leads(session)]),
        " is the policy's only lead (a second one is added by the admin's CLI, ",
        Code("refund-desk policy publish FILE"),
        ", which is not gated)",
    )


def check_digest(proposal: Proposal, given: str, now: Text | None = None) -> None:
    """Refuse a confirmation whose hash is not this change's: what its giver was shown has
    changed since (the draft's text, or the version it is compared with); ``now`` is what
    the change is now, to show instead."""
    shown = given.strip().lower()
    if len(shown) < SHORT or len(shown) > len(proposal.digest) or not _HEX.match(shown):
        raise InvalidRequest(
            "bad_confirmation",
            f"`{given}` is not a change hash: give the {SHORT} characters you were shown.",
        )
    if not proposal.digest.startswith(shown):
        raise InvalidRequest(
            "stale_confirmation",
            lines(
                text(
                    f"Not done: `{shown}` names another text or state than {proposal.what} "
                    "has now (the text or the active version changed since that hash was "
                    "shown). Now it is ",
                    Code(proposal.short),
                    ".",
                ),
                now,
            ),
        )


def pending(session: Session, proposal: Proposal) -> AuditRecord | None:
    """The open request for this change: the latest request or confirmation of it decides,
    and a change that voids it (``voided_by``) applied since, or a day passing, closes it."""
    since = clock.now() - REQUEST_LIFETIME
    recent = session.scalars(
        select(AuditRecord)
        .where(
            col(AuditRecord.action).in_([*REQUESTED, CONFIRMED, *proposal.voided_by]),
            col(AuditRecord.at) >= since,
        )
        .order_by(col(AuditRecord.seq).desc())
        .limit(200)
    ).all()
    for record in recent:
        if record.action in proposal.voided_by:
            return None
        if (record.payload or {}).get("change") == proposal.change:
            return record if record.action in REQUESTED else None
    return None


def consent(
    session: Session,
    audit: AuditLog,
    proposal: Proposal,
    *,
    actor: Actor,
    action: str = "policy.change_requested",
    payload: dict[str, Any] | None = None,
) -> Change | None:
    """None when the change may go ahead now: one lead is enough, the actor is not a person
    (the CLI), or a different lead asked for exactly this change (the confirmation is then on
    the record). Otherwise the request is recorded and its reply returned; the lead who
    asked cannot confirm their own request."""
    if actor.kind != "human" or not needs_second_lead(session, proposal):
        return None
    open_request = pending(session, proposal)
    same = open_request is not None and open_request.payload.get("digest") == proposal.digest
    if open_request is not None and same and open_request.actor_id != actor.id:
        audit.append(
            session,
            action=CONFIRMED,
            actor=actor,
            payload={
                "change": proposal.change,
                "digest": proposal.digest,
                "requested_by": open_request.actor_id,
                "looser": proposal.looser,
            },
        )
        return None
    if same:
        raise InvalidRequest(
            "second_lead_needed", f"You asked to {proposal.what}; another lead must confirm."
        )
    audit.append(
        session,
        action=action,
        actor=actor,
        payload={
            **(payload or {}),
            "change": proposal.change,
            "digest": proposal.digest,
            "looser": proposal.looser,
        },
    )
    confirm = Code(f"/refund-policy {proposal.command}")
    why = "it is more permissive" if proposal.looser else "second-lead is on"
    stale = None
    if open_request is not None:
        stale = f"(An earlier request to {proposal.what}, for another text or state, is stale.)"
    who = second_leads(session, actor.id)
    how = text(who, " confirms with ", confirm) if who else nobody_confirms(session)
    return Change(
        reply=lines(
            text(f"To {proposal.what} needs a second lead ({why}): ", how, "."),
            proposal.why,
            stale,
        ),
        announce=lines(
            text(
                actor.who,
                f" asks to {proposal.what} (change ",
                Code(proposal.short),
                f", {why}): ",
                how,
                ".",
            ),
            proposal.why,
        ),
    )
