"""Policy drafts (editable, by id) and who may change the policy (the active version's leads).

Every change here appends an audit record in the caller's transaction and returns a
``Change``: what to tell the person who asked and what to announce in the policy channel.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from sqlalchemy import select
from sqlmodel import Session, col

from refund_desk import clock
from refund_desk.cases.errors import InvalidRequest, NotALead, NotFound
from refund_desk.cases.people import Directory, in_usergroup
from refund_desk.governance.versions import control, load_version
from refund_desk.policy import (
    CompiledPolicy,
    PolicyDocument,
    PolicyInvalid,
    parse_policy,
    policy_hash,
    run_policy_tests,
)
from refund_desk.storage.audit import Actor, AuditLog
from refund_desk.storage.models import PolicyDraft, PolicyVersion
from refund_desk.text import Code, Mark, Person, Strong, Text, join, lines, text

MAX_SOURCE = 200_000  # characters: a policy is a page or two, not a data dump
_REF = re.compile(r"^(?:(d|draft)?(\d+)|v(\d+))$", re.IGNORECASE)


@dataclass(frozen=True)
class Change:
    """What a policy change tells the actor (``reply``) and the policy channel (``announce``)."""

    reply: Text
    announce: Text | None = None
    jobs: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Ref:
    """``d3`` (a draft) or ``v2`` (a published version)."""

    kind: str  # draft | version
    number: int

    def __str__(self) -> str:
        return f"{'d' if self.kind == 'draft' else 'v'}{self.number}"


def parse_ref(text: str, *, allow: tuple[str, ...] = ("draft", "version")) -> Ref:
    """``d3``, ``3`` (a draft) or ``v2`` (a version); anything else is a clear error."""
    match = _REF.match(text.strip())
    if match is None:
        raise InvalidRequest("bad_reference", f"{text!r} is not a draft (d3) or version (v2).")
    ref = Ref("version", int(match[3])) if match[3] else Ref("draft", int(match[2]))
    if ref.kind not in allow:
        wanted = " or ".join(
            "a draft like d3" if a == "draft" else "a version like v2" for a in allow
        )
        raise InvalidRequest("bad_reference", f"{text!r}: expected {wanted}.")
    return ref


def source_of(session: Session, ref: Ref) -> str:
    """The YAML behind a draft or a published version."""
    if ref.kind == "draft":
        return get_draft(session, ref.number).source
    row = session.get(PolicyVersion, ref.number)
    if row is None:
        raise NotFound("policy_version_missing", f"There is no policy version {ref}.")
    return row.source


def get_draft(session: Session, draft_id: int) -> PolicyDraft:
    draft = session.get(PolicyDraft, draft_id)
    if draft is None:
        raise NotFound("draft_missing", f"There is no draft d{draft_id}.")
    return draft


def leads(session: Session) -> list[str]:
    """Who may change the policy: the ``leads`` of the active version (none before v1); a
    ``S…`` entry is a Slack user group whose members are leads."""
    version = control(session).active_version
    return list(load_version(session, version).doc.leads) if version else []


def require_lead(session: Session, user: str, directory: Directory | None = None) -> None:
    """Refuse anyone who is not a lead of the active version; say who is."""
    allowed = leads(session)
    if not allowed:
        raise NotALead(
            "no_policy",
            text(
                "No policy is published yet: an admin publishes the first version from the CLI (",
                Code("refund-desk policy publish FILE"),
                "); it names the leads.",
            ),
        )
    in_group = any(in_usergroup(g, user, directory) for g in allowed if g.startswith("S"))
    if user not in allowed and not in_group:
        names = join(", ", [Person(u) for u in allowed])
        raise NotALead(
            "not_a_lead",
            text("Only the policy's leads (", names, ") may change the policy; you may read."),
        )


def _checked(source: str) -> None:
    if not source.strip():
        raise InvalidRequest("empty_policy", "The policy text is empty.")
    if len(source) > MAX_SOURCE:
        raise InvalidRequest(
            "policy_too_long", f"A policy may be at most {MAX_SOURCE:,} characters."
        )


def save_draft(
    session: Session, audit: AuditLog, *, source: str, actor: Actor, draft_id: int | None = None
) -> tuple[PolicyDraft, Change]:
    """Create a draft, or replace the text of ``draft_id``. Invalid text is kept (to fix)."""
    _checked(source)
    now = clock.now()
    if draft_id is None:
        draft = PolicyDraft(source=source, author=str(actor), created_at=now, updated_at=now)
        action = "policy.draft_created"
    else:
        draft = get_draft(session, draft_id)
        if draft.published_version is not None:
            raise InvalidRequest(
                "draft_published",
                text(
                    f"d{draft_id} is published as v{draft.published_version}; start a new draft (",
                    Code(f"draft from v{draft.published_version}"),
                    ").",
                ),
            )
        draft.source, draft.updated_at = source, now
        draft.last_test_ok = draft.last_test_summary = None
        draft.publish_requested_by = draft.publish_requested_hash = None
        action = "policy.draft_updated"
    try:
        draft.content_hash = policy_hash(source)
    except PolicyInvalid:  # kept to fix: a draft without a hash is not valid yet
        draft.content_hash = None
    session.add(draft)
    session.flush()
    audit.append(
        session,
        action=action,
        actor=actor,
        payload={"draft": draft.id, "content_hash": draft.content_hash, "chars": len(source)},
    )
    state = (
        text("valid")
        if draft.content_hash
        else text("not valid yet (", Code("validate"), " says why)")
    )
    verb = "Saved" if draft_id is None else "Updated"
    return draft, Change(
        reply=text(f"{verb} draft ", Strong(f"d{draft.id}"), ": ", state, "."),
        announce=text(actor.who, f" {verb.lower()} policy draft d{draft.id}."),
    )


def validate_text(source: str) -> tuple[PolicyDocument | None, Text]:
    """(document, message): the message lists every problem with its rule id."""
    try:
        doc = parse_policy(source)
    except PolicyInvalid as exc:
        return None, text(Mark("failed"), f" Not valid:\n{exc}")
    return doc, text(
        Mark("ok"), " Valid policy ", Code(doc.policy), f" with {len(doc.rules)} rules."
    )


@lru_cache(maxsize=32)
def compiled(content_hash: str, source: str) -> CompiledPolicy:
    """A draft's compiled form, cached by content (shadow runs it for every new case)."""
    return CompiledPolicy.compile(parse_policy(source))


def test_draft(session: Session, audit: AuditLog, *, draft_id: int, actor: Actor) -> Change:
    """Run the embedded tests; the result is kept on the draft and on the record."""
    draft = get_draft(session, draft_id)
    doc, message = validate_text(draft.source)
    if doc is None or draft.content_hash is None:
        raise InvalidRequest("policy_invalid", message)
    results = run_policy_tests(compiled(draft.content_hash, draft.source))
    failed = [r for r in results if not r.passed]
    outcomes = [f"{'PASS' if r.passed else 'FAIL'} {r.name}: {r.message}" for r in results]
    summary = f"{len(results) - len(failed)} passed, {len(failed)} failed"
    draft.last_test_ok, draft.last_test_summary = not failed, summary
    session.add(draft)
    audit.append(
        session,
        action="policy.tested",
        actor=actor,
        payload={
            "draft": draft_id,
            "content_hash": draft.content_hash,
            "passed": len(results) - len(failed),
            "failed": [r.name for r in failed],
        },
    )
    mark = Mark("failed" if failed or not results else "ok")
    note = "" if results else " (the draft has no embedded tests)"
    return Change(reply=lines(text(mark, f" d{draft_id}: {summary}{note}"), *outcomes))


def list_drafts(session: Session, limit: int = 15) -> list[PolicyDraft]:
    return list(
        session.scalars(select(PolicyDraft).order_by(col(PolicyDraft.id).desc()).limit(limit)).all()
    )
