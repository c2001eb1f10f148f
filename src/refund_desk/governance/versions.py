"""Published policy versions and the control switches (active version, mode, kill switch).

Versions are immutable once published, so their compiled form is cached by number forever.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from sqlalchemy import func, select
from sqlmodel import Session, col

from refund_desk import clock
from refund_desk.cases.errors import CaseError, InvalidRequest
from refund_desk.governance.backtest import ensure_backtest, require_backtest
from refund_desk.policy import (
    CompiledPolicy,
    ContextInvalid,
    Decision,
    PolicyDocument,
    PolicyInvalid,
    parse_policy,
    policy_hash,
    run_policy_tests,
)
from refund_desk.storage.audit import Actor, AuditLog
from refund_desk.storage.db import on_commit, shared
from refund_desk.storage.models import Control, PolicyVersion
from refund_desk.text import Code, Moment, Person, Strong, Text, lines, text

MODES = ("shadow", "approve-all", "supervised")


@dataclass(frozen=True)
class LoadedPolicy:
    version: int
    doc: PolicyDocument
    compiled: CompiledPolicy


@lru_cache(maxsize=64)
def _compile(version: int, content_hash: str, source: str) -> LoadedPolicy:
    doc = parse_policy(source)
    return LoadedPolicy(version, doc, CompiledPolicy.compile(doc))


def load_version(session: Session, version: int) -> LoadedPolicy:
    """A published version, compiled. Versions never change once published, so a version a
    committed transaction read is not read again by this database's later transactions."""
    loaded: dict[int, LoadedPolicy] = shared(session, "policy versions")
    found = loaded.get(version)
    if found is not None:
        return found
    row = session.get(PolicyVersion, version)
    if row is None:
        raise CaseError("policy_version_missing", f"Policy version {version} does not exist.")
    compiled = _compile(row.version, row.content_hash, row.source)

    def keep() -> None:  # once committed: this transaction may be publishing it, and roll back
        loaded.setdefault(version, compiled)

    on_commit(session, keep)
    return compiled


ACTIVE_VERSION = select(col(Control.active_version)).where(col(Control.id) == 1)  # built once


def active_version(session: Session) -> int | None:
    """The published version new cases are pinned to: one column, no `Control` object (a
    capture reads nothing else of the control row)."""
    row = session.execute(ACTIVE_VERSION).first()
    if row is None:  # the migration seeds it; a damaged database should say so
        raise CaseError("control_missing", "The control row is missing; run `db upgrade`.")
    version: int | None = row[0]
    return version


def control(session: Session) -> Control:
    """The control row as this transaction sees it."""
    with session.no_autoflush:  # the control row depends on no other row's pending change
        row = session.get(Control, 1)
    if row is None:  # the migration seeds it; a damaged database should say so
        raise CaseError("control_missing", "The control row is missing; run `db upgrade`.")
    return row


def by_whom(actor: str) -> Person | str:
    """Who did something, from an actor as stored (``human:U0LEAD1``, ``cli:ana``): a person
    by name, the admin on the command line, or what acted."""
    kind, _, who = actor.partition(":")
    if kind == "human" and who:
        return Person(who)
    if kind == "cli" and who:
        return f"{who} (command line)"
    return actor


def history(session: Session, limit: int = 20) -> Text:
    """Published versions, newest first, the active one said so; who published each by name."""
    rows = session.scalars(
        select(PolicyVersion).order_by(col(PolicyVersion.version).desc()).limit(limit)
    ).all()
    if not rows:
        return text("No policy version is published yet.")
    active = control(session).active_version
    return lines(
        "Policy history, newest first:",
        *[
            text(
                "• ",
                Strong(f"v{r.version}"),
                " (active)" if r.version == active else "",
                ": published by ",
                by_whom(r.published_by),
                " on ",
                Moment(r.published_at),
                f", {r.note}" if r.note else "",
                " · hash ",
                Code(r.content_hash[:12]),
            )
            for r in rows
        ],
    )


def check_publishable(
    source: str, session: Session | None = None
) -> tuple[PolicyDocument, list[Any]]:
    """The publishing gate shared by every surface: valid, its embedded tests pass, and (with
    a session to look in) a backtest over the last 30 days has run on exactly this content."""
    try:
        doc = parse_policy(source)
    except PolicyInvalid as exc:
        raise InvalidRequest("policy_invalid", str(exc)) from exc
    results = run_policy_tests(doc)
    failed = [r for r in results if not r.passed]
    if failed:
        lines = "; ".join(f"{r.name}: {r.message}" for r in failed)
        raise InvalidRequest("policy_tests_failed", f"{len(failed)} policy test(s) failed: {lines}")
    if session is not None:
        require_backtest(session, policy_hash(doc))
    return doc, results


def publish(
    session: Session,
    audit: AuditLog,
    *,
    source: str,
    actor: Actor,
    backtest: Literal["require", "run"] = "run",
    proof: dict[str, Any] | None = None,
) -> PolicyVersion:
    """Freeze the next version and make it active, with an audit record, in one transaction.

    Slack and the CLI pass ``backtest="require"``: a lead or admin has run and seen the
    backtest before. ``"run"`` (scripts, tests) runs the 30-day backtest here first when none
    is on record for this content, so the gate below still finds one.
    """
    if backtest == "run":
        ensure_backtest(session, audit, source=source, actor=actor)
    doc, results = check_publishable(source, session)
    ran = require_backtest(session, policy_hash(doc))
    latest = session.scalar(select(func.max(PolicyVersion.version))) or 0
    row = PolicyVersion(
        version=latest + 1,
        policy_name=doc.policy,
        content_hash=policy_hash(doc),
        source=source,
        published_by=str(actor),
        published_at=clock.now(),
    )
    session.add(row)
    switches = control(session)
    switches.active_version = row.version
    switches.updated_at = clock.now()
    session.add(switches)
    audit.append(
        session,
        action="policy.published",
        actor=actor,
        policy_version=row.version,
        payload={
            "policy": doc.policy,
            "content_hash": row.content_hash,
            "tests_passed": len(results),
            "backtest": {
                "id": ran.id,
                "cases": ran.cases,
                "changed": ran.summary.get("changed", 0),
                "days": ran.days,
                "ran_by": ran.ran_by,
            },
            **({"proof": proof} if proof is not None else {}),
        },
    )
    return row


def strictest_route(doc: PolicyDocument) -> tuple[int, str | None]:
    """The highest tier the policy defines (at least 3) and that decision's group: where a
    case goes whose facts could not be read, never the default's."""
    candidates = [*doc.rules, doc.default]
    tier = max(d.tier for d in candidates)
    top = next(d for d in candidates if d.tier == tier)
    return max(3, tier), doc.approvers_for(top)


def evaluate(policy: LoadedPolicy | None, context: dict[str, Any]) -> Decision:
    if policy is None:
        return Decision(
            outcome="review",
            rule="no-policy",
            tier=3,
            approvers=None,
            say=None,
            policy_rule="no-policy",
        )
    try:
        return policy.compiled.evaluate(context)
    except ContextInvalid as exc:
        # Facts the engine cannot read (an amount beyond exact comparison, say) are an
        # evaluation error of this case: the strictest tier and group look, the job does not
        # retry for ever.
        tier, group = strictest_route(policy.doc)
        return Decision(
            outcome="review",
            rule="policy-error",
            tier=tier,
            approvers=group,
            say=None,
            error=str(exc),
            policy_rule="policy-error",
        )
