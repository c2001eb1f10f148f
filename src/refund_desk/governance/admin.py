"""Changing the live policy: publish a draft, roll back, set the mode, pause and resume.

Each function changes state and appends its audit record in the caller's transaction, and
returns a ``Change`` (reply + announcement). Who may call them is checked by the surface
(``drafts.require_lead`` in Slack; the CLI is the admin's).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlmodel import Session, col

from refund_desk import clock
from refund_desk.cases.errors import InvalidRequest, NotFound
from refund_desk.cases.executor import EXECUTE
from refund_desk.governance.backtest import require_backtest
from refund_desk.governance.drafts import Change, get_draft
from refund_desk.governance.proof import proof_against_active, proof_record, proof_summary
from refund_desk.governance.versions import (
    MODES,
    check_publishable,
    control,
    publish,
)
from refund_desk.policy import PolicyDocument, parse_policy
from refund_desk.policy.backtest import summary_text
from refund_desk.policy.prove import ProofReport
from refund_desk.storage.audit import Actor, AuditLog
from refund_desk.storage.models import AuditRecord, Job, PolicyDraft, PolicyVersion
from refund_desk.text import Code, Mark, Strong, Text, lines, text


@dataclass(frozen=True)
class Gate:
    """What the publishing gate found for a draft: it is valid, its tests pass, a backtest ran
    on this exact content; plus the proof against the active version."""

    draft: PolicyDraft
    doc: PolicyDocument
    results: list[Any]  # the embedded tests' results
    backtest: Text  # the backtest's summary and the proof's, for people
    proved: tuple[int, ProofReport] | None

    @property
    def looser(self) -> bool:
        return self.proved is not None and self.proved[1].more_permissive


def gate(session: Session, draft_id: int) -> Gate:
    """Raise what stops ``draft_id`` from being published; otherwise what the gate found."""
    draft = get_draft(session, draft_id)
    if draft.published_version is not None:
        raise InvalidRequest(
            "draft_published", f"d{draft_id} is already published as v{draft.published_version}."
        )
    doc, results = check_publishable(draft.source, session)
    assert draft.content_hash is not None  # it parsed
    ran = require_backtest(session, draft.content_hash)
    proved = proof_against_active(session, draft.source)
    backtest = lines(
        summary_text(ran.summary, label=f"d{draft_id}", days=ran.days),
        proof_summary(*proved) if proved is not None else None,
    )
    return Gate(draft, doc, results, backtest, proved)


def preview_publish(session: Session, *, draft_id: int) -> Text:
    """What publishing ``draft_id`` would do, from the same gate, without changing anything:
    the tests, the backtest, the proof against the active version, and who must confirm."""
    found = gate(session, draft_id)
    second = control(session).publish_needs_second_lead or found.looser
    return lines(
        text(
            Mark("warning"),
            f" Publishing d{draft_id} makes it the live policy for every new case at once "
            f"({len(found.results)} tests pass).",
        ),
        found.backtest,
        "Then a second lead confirms it." if second else None,
        text("To go ahead: ", Code(f"/refund-policy publish d{draft_id} confirm"), "."),
    )


def publish_draft(session: Session, audit: AuditLog, *, draft_id: int, actor: Actor) -> Change:
    """The gate (valid, tests pass, backtested on this exact content), then the next version.

    With ``publish_needs_second_lead`` on, the first lead's publish is a request and a
    different lead's publish of the same content confirms it.
    """
    found = gate(session, draft_id)
    draft, proved, backtest, looser = found.draft, found.proved, found.backtest, found.looser
    # A version that pays more somewhere always needs a second lead, whatever the setting.
    if control(session).publish_needs_second_lead or looser:
        requested = draft.publish_requested_hash == draft.content_hash
        if not requested or draft.publish_requested_by is None:
            draft.publish_requested_by = str(actor)
            draft.publish_requested_hash = draft.content_hash
            session.add(draft)
            audit.append(
                session,
                action="policy.publish_requested",
                actor=actor,
                payload={"draft": draft_id, "content_hash": draft.content_hash},
            )
            confirm = Code(f"/refund-policy publish d{draft_id} confirm")
            return Change(
                reply=lines(
                    text(
                        f"Publishing d{draft_id} needs a second lead: they confirm with ",
                        confirm,
                        ".",
                    ),
                    proof_summary(*proved) if looser and proved is not None else None,
                ),
                announce=lines(
                    text(
                        actor.who,
                        f" asks to publish d{draft_id} (",
                        Code(found.doc.policy),
                        "). Another lead confirms with ",
                        confirm,
                        ".",
                    ),
                    backtest,
                ),
            )
        if draft.publish_requested_by == str(actor):
            raise InvalidRequest(
                "second_lead_needed",
                f"You asked to publish d{draft_id}; another lead must confirm.",
            )
    row = publish(
        session,
        audit,
        source=draft.source,
        actor=actor,
        backtest="require",
        proof=proof_record(proved),
    )
    draft.published_version = row.version
    session.add(draft)
    head = text(
        Mark("published"),
        " ",
        actor.who,
        f" published d{draft_id} as ",
        Strong(f"{row.policy_name} v{row.version}"),
        " (hash ",
        Code(row.content_hash[:12]),
        f", {len(found.results)} tests passed).",
    )
    return Change(reply=head, announce=lines(head, backtest))


REQUEST_LIFETIME = timedelta(days=1)


def second_lead(
    session: Session, audit: AuditLog, *, change: str, what: str, actor: Actor
) -> Change | None:
    """With second-lead on, a lead's governance change (mode, rollback, the second-lead rule
    itself) is a request until a different lead asks for the same change; then it is applied.

    Returns the reply for a request, or None when the change may go ahead. The CLI is the
    admin's and is not gated; `pause` is the one-lead emergency lever and is not gated either.
    """
    if actor.kind != "human" or not control(session).publish_needs_second_lead:
        return None
    since = clock.now() - REQUEST_LIFETIME
    recent = session.scalars(
        select(AuditRecord)
        .where(
            col(AuditRecord.action).in_(["policy.change_requested", "policy.change_confirmed"]),
            col(AuditRecord.at) >= since,
        )
        .order_by(col(AuditRecord.seq).desc())
        .limit(200)
    ).all()
    pending = None
    for record in recent:
        if (record.payload or {}).get("change") != change:
            continue
        if record.action == "policy.change_requested":
            pending = record
        break  # the latest record for this change decides
    if pending is not None and pending.actor_id != actor.id:
        audit.append(
            session,
            action="policy.change_confirmed",
            actor=actor,
            payload={"change": change, "requested_by": pending.actor_id},
        )
        return None
    if pending is not None:
        raise InvalidRequest(
            "second_lead_needed", f"You asked to {what}; another lead must confirm."
        )
    audit.append(session, action="policy.change_requested", actor=actor, payload={"change": change})
    confirm = Code(f"/refund-policy {change.replace(':', ' ')}")
    return Change(
        reply=text(f"To {what} needs a second lead: they confirm with ", confirm, "."),
        announce=text(actor.who, f" asks to {what}. Another lead confirms with ", confirm, "."),
    )


def rollback(session: Session, audit: AuditLog, *, version: int, actor: Actor) -> Change:
    """Make ``version`` active again as a new published entry: history is never rewritten.

    The same gate as a publish: the embedded tests pass and a backtest ran on this content;
    with second-lead on, a second lead confirms."""
    target = session.get(PolicyVersion, version)
    if target is None:
        raise NotFound("policy_version_missing", f"There is no policy version v{version}.")
    check_publishable(target.source, session)
    requested = second_lead(
        session, audit, change=f"rollback:v{version}", what=f"roll back to v{version}", actor=actor
    )
    if requested is not None:
        return requested
    switches = control(session)
    previous = switches.active_version
    if previous is not None:
        active = session.get(PolicyVersion, previous)
        if active is not None and active.content_hash == target.content_hash:
            raise InvalidRequest(
                "already_active", f"v{previous}, the active version, already has v{version}'s text."
            )
    parse_policy(target.source)  # still readable by this release, or refuse before changing
    latest = session.scalar(select(func.max(PolicyVersion.version))) or 0
    now = clock.now()
    row = PolicyVersion(
        version=latest + 1,
        policy_name=target.policy_name,
        content_hash=target.content_hash,
        source=target.source,
        published_by=str(actor),
        published_at=now,
        note=f"rollback to v{version}",
    )
    session.add(row)
    switches.active_version, switches.updated_at = row.version, now
    session.add(switches)
    audit.append(
        session,
        action="policy.rolled_back",
        actor=actor,
        policy_version=row.version,
        payload={"to": version, "from": previous, "content_hash": row.content_hash},
    )
    said = text(
        Mark("rolled_back"),
        " ",
        actor.who,
        f" rolled back to v{version}: it is active again as ",
        Strong(f"v{row.version}"),
        f" (was v{previous or '-'}). Cases keep the version they started with.",
    )
    return Change(reply=said, announce=said)


def set_mode(session: Session, audit: AuditLog, *, mode: str, actor: Actor) -> Change:
    if mode not in MODES:
        raise InvalidRequest("bad_mode", f"Mode must be one of {', '.join(MODES)}; got {mode!r}.")
    switches = control(session)
    before = switches.mode
    if before == mode:
        return Change(reply=text("The mode is already ", Strong(mode), "."))
    requested = second_lead(
        session, audit, change=f"mode:{mode}", what=f"set the mode to {mode}", actor=actor
    )
    if requested is not None:
        return requested
    switches.mode, switches.updated_at = mode, clock.now()
    session.add(switches)
    audit.append(
        session,
        action="policy.mode_changed",
        actor=actor,
        policy_version=switches.active_version,
        payload={"from": before, "to": mode},
    )
    said = text(actor.who, " set the mode to ", Strong(mode), f" (was {before}).")
    return Change(reply=said, announce=said)


def set_paused(
    session: Session, audit: AuditLog, *, paused: bool, actor: Actor, now: datetime | None = None
) -> Change:
    """The kill switch. Resuming makes every waiting execution due at once: nothing is lost."""
    switches = control(session)
    if switches.paused == paused:
        return Change(reply=text(f"Execution is already {'paused' if paused else 'running'}."))
    now = now or clock.now()
    switches.paused, switches.updated_at = paused, now
    session.add(switches)
    jobs: list[int] = []  # the executions waiting for the switch
    if not paused:
        jobs = [
            int(job_id)
            for job_id in session.scalars(
                update(Job)
                .where(
                    col(Job.kind) == EXECUTE,
                    col(Job.status) == "pending",
                    or_(col(Job.lease_expires_at).is_(None), col(Job.lease_expires_at) < now),
                )
                .values(due_at=now)
                .returning(col(Job.id))
            ).all()
            if job_id is not None
        ]
    audit.append(
        session,
        action="policy.paused" if paused else "policy.resumed",
        actor=actor,
        policy_version=switches.active_version,
        payload={} if paused else {"executions_resumed": len(jobs)},
    )
    if paused:
        said = text(
            Mark("paused"),
            " ",
            actor.who,
            " paused execution: no refund is paid until ",
            Code("/refund-policy resume"),
            ". Decisions and approvals are still recorded.",
        )
    else:
        said = text(
            Mark("resumed"),
            " ",
            actor.who,
            f" resumed execution ({len(jobs)} waiting refunds).",
        )
    return Change(reply=said, announce=said, jobs=jobs)


def set_second_lead(session: Session, audit: AuditLog, *, on: bool, actor: Actor) -> Change:
    """Whether a publish (and mode changes, rollbacks, this switch) needs a second lead."""
    switches = control(session)
    if not on:
        requested = second_lead(
            session,
            audit,
            change="second-lead:off",
            what="switch the second-lead rule off",
            actor=actor,
        )
        if requested is not None:
            return requested
    switches.publish_needs_second_lead, switches.updated_at = on, clock.now()
    session.add(switches)
    audit.append(
        session,
        action="policy.setting_changed",
        actor=actor,
        payload={"publish_needs_second_lead": on},
    )
    said = text(
        actor.who, f" set: publishing {'needs' if on else 'no longer needs'} a second lead."
    )
    return Change(reply=said, announce=said)


def set_review_rate(
    session: Session, audit: AuditLog, *, rate: float | None, actor: Actor
) -> Change:
    """Share of automatic refunds a person re-checks afterwards (None: the policy's own)."""
    if rate is not None and not 0 <= rate <= 1:
        raise InvalidRequest("bad_rate", "The sample rate is a share between 0 and 1 (or 5%).")
    switches = control(session)
    switches.review_sample_rate, switches.updated_at = rate, clock.now()
    session.add(switches)
    audit.append(session, action="policy.review_rate_set", actor=actor, payload={"rate": rate})
    shown = text("the policy's ", Code("review_sample_rate")) if rate is None else f"{rate:.0%}"
    said = text(actor.who, " set the after-the-fact review sample to ", shown, ".")
    if switches.mode != "supervised":
        said += " (It applies in supervised mode, where refunds execute automatically.)"
    return Change(reply=said, announce=said)
