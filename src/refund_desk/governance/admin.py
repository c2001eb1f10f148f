"""Changing the live policy: publish a draft, roll back, set the mode, pause and resume.

Each function changes state and appends its audit record in the caller's transaction, and
returns a ``Change`` (reply + announcement). Who may call them is checked by the surface
(``drafts.require_lead`` in Slack; the CLI is the admin's). Whether a second lead must agree
is ``consent.py``'s: every change here is judged (looser or not) and bound to a digest first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlmodel import Session, col

from refund_desk import clock
from refund_desk.cases.errors import InvalidRequest, NotFound
from refund_desk.cases.executor import EXECUTE
from refund_desk.governance.backtest import require_backtest
from refund_desk.governance.consent import (
    SHORT,
    Proposal,
    check_digest,
    consent,
    digest_of,
    needs_second_lead,
    other_leads,
    pending,
)
from refund_desk.governance.drafts import Change, get_draft
from refund_desk.governance.proof import proof_against_active, proof_record, proof_summary
from refund_desk.governance.versions import (
    MODES,
    check_publishable,
    control,
    load_version,
    publish,
)
from refund_desk.policy import PolicyDocument
from refund_desk.policy.backtest import summary_text
from refund_desk.policy.diff import diff_text
from refund_desk.policy.prove import ProofReport
from refund_desk.policy.words import people
from refund_desk.storage.audit import Actor, AuditLog
from refund_desk.storage.models import Job, PolicyBacktest, PolicyDraft, PolicyVersion
from refund_desk.text import Code, Mark, Person, Strong, Text, lines, text


@dataclass(frozen=True)
class Gate:
    """What the publishing gate found for a draft: it is valid, its tests pass, a backtest ran
    on this exact content; plus the proof against the active version."""

    draft: PolicyDraft
    doc: PolicyDocument
    results: list[Any]  # the embedded tests' results
    backtest: Text  # what changes against the active version: diff, backtest, proof
    proved: tuple[int, ProofReport] | None

    @property
    def looser(self) -> bool:
        """More permissive than the active version somewhere (or nothing to compare with)."""
        return self.proved is None or self.proved[1].more_permissive


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
    return Gate(draft, doc, results, findings(session, doc, ran, f"d{draft_id}", proved), proved)


def findings(
    session: Session,
    doc: PolicyDocument,
    ran: PolicyBacktest,
    label: str,
    proved: tuple[int, ProofReport] | None,
) -> Text:
    """What making ``doc`` live changes, for people: the rules and settings that differ from
    the active version, the backtest on its text, and what the proof found."""
    if proved is None:
        return summary_text(ran.summary, label=label, days=ran.days, doc=doc)
    version, report = proved
    active = load_version(session, version).doc
    return lines(
        diff_text(active, doc, old=f"v{version}", new=label),
        summary_text(ran.summary, label=label, days=ran.days, doc=doc),
        proof_summary(version, report, (active, doc)),
    )


def _active_state(session: Session) -> dict[str, Any]:
    """The active version a text change starts from: its number and content hash."""
    version = control(session).active_version
    row = session.get(PolicyVersion, version) if version else None
    return {"active_version": version, "active_hash": row.content_hash if row else None}


def publish_proposal(session: Session, found: Gate) -> Proposal:
    """Publishing this draft's text over the active version, judged by its proof."""
    draft_id = found.draft.id
    digest = digest_of(
        change="publish",
        draft=draft_id,
        content_hash=found.draft.content_hash,
        **_active_state(session),
    )
    return Proposal(
        change=f"publish:d{draft_id}",
        what=f"publish d{draft_id}",
        command=f"publish d{draft_id} confirm {digest[:SHORT]}",
        digest=digest,
        looser=found.looser,
        why=found.backtest,
    )


def _who_confirms(session: Session, proposal: Proposal, asker: str | None) -> Text | None:
    """Who must agree, by name; and, when the policy names no other lead, that nobody can."""
    if not needs_second_lead(session, proposal):
        return None
    why = "it is more permissive" if proposal.looser else "second-lead is on"
    asked = pending(session, proposal)
    if asked is not None and asked.payload.get("digest") == proposal.digest and asked.actor_id:
        others = other_leads(session, asked.actor_id)
        return text(
            Person(asked.actor_id),
            f" asked to {proposal.what} ({why}); a different lead (",
            people(others),
            ") confirms it with the same hash.",
        )
    others = other_leads(session, asker)
    if not others:
        return text(
            Mark("warning"),
            f" It needs a second lead ({why}), and the active policy names no other lead, so "
            "nobody can confirm it here: publish a version that names a second lead in ",
            Code("leads"),
            " first (or the admin uses the command line).",
        )
    return text(f"Then a second lead confirms it ({why}) with the same hash: ", people(others), ".")


def preview_publish(session: Session, *, draft_id: int, asker: str | None = None) -> Text:
    """What publishing ``draft_id`` would do, from the same gate, without changing anything:
    the tests, what changes (diff, backtest, proof against the active version), who must
    confirm, and the hash that names exactly this text over the active version."""
    found = gate(session, draft_id)
    return _preview(session, found, publish_proposal(session, found), asker)


def _preview(session: Session, found: Gate, proposal: Proposal, asker: str | None) -> Text:
    return lines(
        text(
            Mark("warning"),
            f" Publishing d{found.draft.id} makes it the live policy for every new case at once "
            f"({len(found.results)} tests pass).",
        ),
        found.backtest,
        _who_confirms(session, proposal, asker),
        text("To go ahead: ", Code(f"/refund-policy {proposal.command}"), "."),
    )


def publish_draft(
    session: Session,
    audit: AuditLog,
    *,
    draft_id: int,
    actor: Actor,
    confirm: str | None = None,
) -> Change:
    """The gate (valid, tests pass, backtested on this exact content), then the next version.

    ``confirm`` is the hash the lead was shown (``preview_publish``): it must still name this
    draft's text over the active version. Without a hash, a publish goes ahead only when one
    lead is enough (``consent.py``); otherwise the answer is the preview with the hash to
    confirm, and nothing changes.
    """
    found = gate(session, draft_id)
    draft, proved, backtest = found.draft, found.proved, found.backtest
    proposal = publish_proposal(session, found)
    if confirm is not None:
        check_digest(proposal, confirm, now=_preview(session, found, proposal, actor.id))
    elif actor.kind == "human" and needs_second_lead(session, proposal):
        return Change(
            reply=lines(
                text(
                    f"Not published: d{draft_id} needs a second lead, so a confirmation names "
                    "the exact text it confirms."
                ),
                _preview(session, found, proposal, actor.id),
            )
        )
    requested = consent(
        session,
        audit,
        proposal,
        actor=actor,
        action="policy.publish_requested",
        payload={"draft": draft_id, "content_hash": draft.content_hash},
    )
    if requested is not None:
        return requested
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


@dataclass(frozen=True)
class Rollback:
    """What the gate found for a rollback: the version's text passes the publishing gate and is
    not the active one; what making it live again changes."""

    target: PolicyVersion
    previous: int | None
    proved: tuple[int, ProofReport] | None
    changes: Text

    @property
    def looser(self) -> bool:
        return self.proved is None or self.proved[1].more_permissive


def rollback_gate(session: Session, version: int) -> Rollback:
    """Raise what stops a rollback to ``version``; otherwise what it would change."""
    target = session.get(PolicyVersion, version)
    if target is None:
        raise NotFound("policy_version_missing", f"There is no policy version v{version}.")
    doc, _ = check_publishable(target.source, session)
    previous = control(session).active_version
    if previous is not None:
        active = session.get(PolicyVersion, previous)
        if active is not None and active.content_hash == target.content_hash:
            raise InvalidRequest(
                "already_active", f"v{previous}, the active version, already has v{version}'s text."
            )
    proved = proof_against_active(session, target.source)
    ran = require_backtest(session, target.content_hash)
    return Rollback(target, previous, proved, findings(session, doc, ran, f"v{version}", proved))


def rollback_proposal(session: Session, found: Rollback) -> Proposal:
    """Making ``found``'s text live again over the active version, judged by its proof."""
    version = found.target.version
    digest = digest_of(
        change="rollback",
        version=version,
        content_hash=found.target.content_hash,
        **_active_state(session),
    )
    return Proposal(
        change=f"rollback:v{version}",
        what=f"roll back to v{version}",
        command=f"rollback v{version} confirm {digest[:SHORT]}",
        digest=digest,
        looser=found.looser,
        why=found.changes,
    )


def preview_rollback(session: Session, *, version: int, asker: str | None = None) -> Text:
    """What rolling back to ``version`` would do, as a publish shows it, changing nothing:
    what changes (diff, backtest, proof), who must confirm, and the hash to confirm with."""
    found = rollback_gate(session, version)
    return _rollback_preview(session, found, rollback_proposal(session, found), asker)


def _rollback_preview(
    session: Session, found: Rollback, proposal: Proposal, asker: str | None
) -> Text:
    return lines(
        text(
            Mark("warning"),
            f" Rolling back to v{found.target.version} makes its text the live policy for every "
            "new case at once, as a new version (cases keep the version they started with).",
        ),
        found.changes,
        _who_confirms(session, proposal, asker),
        text("To go ahead: ", Code(f"/refund-policy {proposal.command}"), "."),
    )


def rollback(
    session: Session,
    audit: AuditLog,
    *,
    version: int,
    actor: Actor,
    confirm: str | None = None,
) -> Change:
    """Make ``version`` active again as a new published entry: history is never rewritten.

    The same gate as a publish: the embedded tests pass, a backtest ran on this content, and
    the proof against the active version decides whether a second lead must confirm (any
    rollback with second-lead on); the proof's hash is kept in the audit record. ``confirm``
    is the hash the lead was shown (``preview_rollback``): it must still name this version
    over the active one."""
    found = rollback_gate(session, version)
    proposal = rollback_proposal(session, found)
    if confirm is not None:
        shown = _rollback_preview(session, found, proposal, actor.id)
        check_digest(proposal, confirm, now=shown)
    requested = consent(session, audit, proposal, actor=actor)
    if requested is not None:
        return requested
    target, previous, proved = found.target, found.previous, found.proved
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
    switches = control(session)
    switches.active_version, switches.updated_at = row.version, now
    session.add(switches)
    proof = proof_record(proved)
    audit.append(
        session,
        action="policy.rolled_back",
        actor=actor,
        policy_version=row.version,
        payload={
            "to": version,
            "from": previous,
            "content_hash": row.content_hash,
            **({"proof": proof} if proof is not None else {}),
        },
    )
    said = text(
        Mark("rolled_back"),
        " ",
        actor.who,
        f" rolled back to v{version}: it is active again as ",
        Strong(f"v{row.version}"),
        f" (was v{previous or '-'}). Cases keep the version they started with.",
    )
    said = lines(said, found.changes)
    return Change(reply=said, announce=said)


def set_mode(session: Session, audit: AuditLog, *, mode: str, actor: Actor) -> Change:
    """Only ``supervised`` pays automatically: switching to it is looser (two leads always);
    any other change of mode is one lead's, two with second-lead on."""
    if mode not in MODES:
        raise InvalidRequest("bad_mode", f"Mode must be one of {', '.join(MODES)}; got {mode!r}.")
    switches = control(session)
    before = switches.mode
    if before == mode:
        return Change(reply=text("The mode is already ", Strong(mode), "."))
    proposal = Proposal(
        change=f"mode:{mode}",
        what=f"set the mode to {mode}",
        command=f"mode {mode}",
        digest=digest_of(change="mode", before=before, after=mode),
        looser=mode == "supervised",
        voided_by=("policy.mode_changed", "breaker.tripped"),
    )
    requested = consent(session, audit, proposal, actor=actor)
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
    """The kill switch. Pausing is always one lead's. Resuming makes every waiting execution
    due at once (nothing is lost); it returns to the state the leads agreed on (every
    loosening of which took two), so it is not a loosening: one lead's, two with second-lead
    on."""
    switches = control(session)
    if switches.paused == paused:
        return Change(reply=text(f"Execution is already {'paused' if paused else 'running'}."))
    if not paused:
        proposal = Proposal(
            change="resume",
            what="resume execution",
            command="resume",
            digest=digest_of(change="resume", before="paused", after="running"),
            looser=False,
            voided_by=("policy.paused", "policy.resumed"),
        )
        requested = consent(session, audit, proposal, actor=actor)
        if requested is not None:
            return requested
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
    """Whether every publish, rollback, change of mode or review rate, resume and this switch
    need a second lead (a looser change always does). On is one lead's; off, two."""
    switches = control(session)
    if not on:
        was = switches.publish_needs_second_lead
        proposal = Proposal(
            change="second-lead:off",
            what="switch the second-lead rule off",
            command="second-lead off",
            digest=digest_of(change="second-lead", before=was, after=False),
            looser=was,
            voided_by=("policy.setting_changed",),
        )
        requested = consent(session, audit, proposal, actor=actor)
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


def _sample_shares(
    session: Session, before: float | None, after: float | None
) -> list[tuple[float, float]]:
    """(share before, share after) for the cases of each published text: an override, or
    the version's own ``review_sample_rate`` (``review.sample_rate``)."""
    versions = session.execute(
        select(func.min(PolicyVersion.version)).group_by(col(PolicyVersion.content_hash))
    ).scalars()
    own = [load_version(session, v).doc.review_sample_rate for v in versions] or [0.0]
    return [(r if before is None else before, r if after is None else after) for r in own]


def set_review_rate(
    session: Session, audit: AuditLog, *, rate: float | None, actor: Actor
) -> Change:
    """Share of automatic refunds a person re-checks afterwards (None: the policy's own).

    Lower for the cases of any published text is looser, as the same share written in the
    policy text is judged by the prover: two leads. Otherwise one, two with second-lead on."""
    if rate is not None and not 0 <= rate <= 1:
        raise InvalidRequest("bad_rate", "The sample rate is a share between 0 and 1 (or 5%).")
    switches = control(session)
    before = switches.review_sample_rate
    shares = _sample_shares(session, before, rate)
    named = "policy" if rate is None else repr(rate)
    share = "the policy's own" if rate is None else f"{rate:.0%}"
    proposal = Proposal(
        change=f"review-rate:{named}",
        what=f"set the review sample to {share}",
        command=f"review-rate {named}",
        digest=digest_of(change="review-rate", before=before, after=rate),
        looser=any(after < share for share, after in shares),
        voided_by=("policy.review_rate_set",),
    )
    requested = consent(session, audit, proposal, actor=actor)
    if requested is not None:
        return requested
    switches.review_sample_rate, switches.updated_at = rate, clock.now()
    session.add(switches)
    audit.append(session, action="policy.review_rate_set", actor=actor, payload={"rate": rate})
    shown = text("the policy's ", Code("review_sample_rate")) if rate is None else f"{rate:.0%}"
    said = text(actor.who, " set the after-the-fact review sample to ", shown, ".")
    if switches.mode != "supervised":
        said += " (It applies in supervised mode, where refunds execute automatically.)"
    return Change(reply=said, announce=said)
