"""The policy on the desk: versions and what gated each, the active rules, a diff between any
two texts, drafts with their tests and backtest, what the prover found, the shadow run.

Read-only. Every figure comes from the function Slack and the CLI use: `governance/versions`
(who published), the publish's audit record (the proof and backtest that gated it),
`policy/diff.diff_text`, `policy/testing.run_policy_tests`, `policy/backtest.summary_text`,
`governance/proof.proof_between` (cached per pair of texts, as the publish gate keeps it),
`governance/shadow.tally`, and `policy/words` for rules, regions and settings in words.
Changes stay in Slack and the CLI, behind the gate and the second-lead rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from sqlalchemy import select
from sqlmodel import Session, col

from refund_desk import money
from refund_desk.cases.errors import CaseError
from refund_desk.governance import drafts, shadow
from refund_desk.governance.proof import proof_between
from refund_desk.governance.versions import by_whom, control, load_version
from refund_desk.policy import PolicyDocument, run_policy_tests
from refund_desk.policy.backtest import summary_text
from refund_desk.policy.diff import diff_text
from refund_desk.policy.prove import ProofReport
from refund_desk.policy.words import (
    KIND_WORDS,
    OUTCOME_DONE,
    bound_words,
    decides,
    example,
    rule_name,
    rule_title,
    setting_words,
    side_words,
)
from refund_desk.runtime import Runtime
from refund_desk.storage.models import AuditRecord, PolicyBacktest, PolicyDraft, PolicyVersion
from refund_desk.text import Text, text
from refund_desk.web.desk.access import reader
from refund_desk.web.desk.render import page, words
from refund_desk.web.desk.session import Viewer

router = APIRouter(include_in_schema=False)

GATED = ("policy.published", "policy.rolled_back")


@dataclass(frozen=True)
class RuleRow:
    order: str
    name: str
    does: str
    when: str


@dataclass(frozen=True)
class Gate:
    """What let a version go live, from its audit record."""

    action: str
    tests_passed: int | None
    backtest: PolicyBacktest | None
    backtest_words: list[str]
    proof: dict[str, Any] | None


def said(value: Text | str) -> list[str]:
    """A Text of several lines, as the lines (the page shows each on its own)."""
    return [line for line in words(value).splitlines() if line.strip()]


def rule_rows(doc: PolicyDocument) -> list[RuleRow]:
    rows = [
        RuleRow(str(n), words(rule_title(r, quoted=False)), words(decides(doc, r)), r.when)
        for n, r in enumerate(doc.rules, 1)
    ]
    rows.append(
        RuleRow("Otherwise", words(rule_name(doc, "default")), words(decides(doc, doc.default)), "")
    )
    return rows


def people_rows(doc: PolicyDocument) -> list[tuple[str, str, str]]:
    """(who, people, limit): approver groups, managers, leads, operators."""
    out = []
    for name, group in doc.approvers.items():
        members = [*group.members, *([group.usergroup] if group.usergroup else [])]
        limit = money.format_money(money.to_minor(group.limit, doc.currency), doc.currency)
        out.append((name.replace("-", " "), ", ".join(members) or "nobody", f"up to {limit}"))
    if doc.managers is not None:
        m = doc.managers
        members = [*m.members, *([m.usergroup] if m.usergroup else [])]
        limit = money.format_money(money.to_minor(m.limit, doc.currency), doc.currency)
        out.append(("managers (escalations)", ", ".join(members), f"up to {limit}"))
    out.append(("leads (change the policy)", ", ".join(doc.leads) or "nobody", ""))
    if doc.operators is not None:
        o = doc.operators
        members = [*o.members, *([o.usergroup] if o.usergroup else [])]
        out.append(("operators (read cases)", ", ".join(members), ""))
    return out


def gates(session: Session) -> dict[int, Gate]:
    """version -> what gated it: the publish's (or rollback's) audit record and the backtest
    it names (a rollback's: the latest on its text before it, which the gate required)."""
    records = session.scalars(
        select(AuditRecord).where(col(AuditRecord.action).in_(GATED)).order_by(col(AuditRecord.seq))
    ).all()
    out: dict[int, Gate] = {}
    for record in records:
        if record.policy_version is None:
            continue
        payload = record.payload or {}
        ran = None
        named = (payload.get("backtest") or {}).get("id")
        if named is not None:
            ran = session.get(PolicyBacktest, named)
        elif payload.get("content_hash"):
            ran = session.scalars(
                select(PolicyBacktest)
                .where(
                    col(PolicyBacktest.content_hash) == payload["content_hash"],
                    col(PolicyBacktest.ran_at) <= record.at,
                )
                .order_by(col(PolicyBacktest.id).desc())
                .limit(1)
            ).first()
        shown = said(summary_text(ran.summary, label=ran.label, days=ran.days)) if ran else []
        out[record.policy_version] = Gate(
            record.action, payload.get("tests_passed"), ran, shown, payload.get("proof")
        )
    return out


def _versions(session: Session) -> list[PolicyVersion]:
    return list(
        session.scalars(select(PolicyVersion).order_by(col(PolicyVersion.version).desc())).all()
    )


def _draft_state(draft: PolicyDraft) -> str:
    if draft.published_version is not None:
        return f"published as v{draft.published_version}"
    parts = ["valid" if draft.content_hash else "not valid"]
    if draft.last_test_summary:
        parts.append(f"tests: {draft.last_test_summary}")
    if draft.last_backtest_hash and draft.last_backtest_hash == draft.content_hash:
        parts.append("backtested")
    return ", ".join(parts)


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def _missing(request: Request, viewer: Viewer, title: str, message: str) -> Response:
    return page(
        request,
        viewer,
        "policy_missing.html",
        title=title,
        section="policy",
        message=message,
        status=404,
    )


@router.get("/desk/policy")
def overview(request: Request, viewer: Viewer = Depends(reader)) -> Response:
    with _runtime(request).db.read() as session:
        switches = control(session)
        versions = _versions(session)
        number = switches.active_version
        active = load_version(session, number).doc if number else None
        gated = gates(session)
        draft_rows = drafts.list_drafts(session, limit=50)
        tally = shadow.tally(session)
    return page(
        request,
        viewer,
        "policy.html",
        title="Policy",
        section="policy",
        switches=switches,
        active=active,
        rules=rule_rows(active) if active else [],
        groups=people_rows(active) if active else [],
        versions=versions,
        gates=gated,
        drafts=draft_rows,
        draft_state=_draft_state,
        who=lambda actor: words(text(by_whom(actor))),
        tally=tally,
    )


@router.get("/desk/policy/versions/{version}")
def version_page(request: Request, version: int, viewer: Viewer = Depends(reader)) -> Response:
    with _runtime(request).db.read() as session:
        row = session.get(PolicyVersion, version)
        if row is None:
            return _missing(request, viewer, "No such version", f"There is no version v{version}.")
        doc = load_version(session, version).doc
        gate = gates(session).get(version)
        active = control(session).active_version
    return page(
        request,
        viewer,
        "policy_version.html",
        title=f"Policy v{version}",
        section="policy",
        row=row,
        doc=doc,
        active=active,
        rules=rule_rows(doc),
        groups=people_rows(doc),
        gate=gate,
        published_by=words(text(by_whom(row.published_by))),
    )


def _refs(session: Session) -> list[str]:
    versions = [f"v{v.version}" for v in _versions(session)]
    return versions + [f"d{d.id}" for d in drafts.list_drafts(session, limit=50)]


def _doc(session: Session, ref: drafts.Ref) -> PolicyDocument:
    doc, problems = drafts.validate_text(drafts.source_of(session, ref))
    if doc is None:
        raise CaseError("policy_invalid", text(f"{ref}: ", problems))
    return doc


@router.get("/desk/policy/diff")
def diff_page(
    request: Request, a: str = "", b: str = "", viewer: Viewer = Depends(reader)
) -> Response:
    """What changed between any two texts (versions or drafts), as `/refund-policy diff`."""
    shown: list[str] = []
    problem = None
    with _runtime(request).db.read() as session:
        refs = _refs(session)
        if not a and not b and len(refs) >= 2 and refs[1].startswith("v"):
            a, b = refs[1], refs[0]  # the version before the newest, and the newest
        if a and b:
            try:
                old, new = drafts.parse_ref(a), drafts.parse_ref(b)
                shown = said(diff_text(_doc(session, old), _doc(session, new), old=a, new=b))
            except CaseError as exc:
                problem = words(exc.text)
    return page(
        request,
        viewer,
        "policy_diff.html",
        title="Policy diff",
        section="policy",
        refs=refs,
        a=a,
        b=b,
        lines=shown,
        problem=problem,
        status=400 if problem else 200,
    )


@dataclass(frozen=True)
class Flip:
    change: str
    cases: int
    money: str
    examples: list[str]


def flips(summary: dict[str, Any]) -> list[Flip]:
    """A backtest's outcome flips with the money they move (from the stored summary)."""
    out = []
    for f in summary.get("flips", []):
        amounts = f.get("amounts", {})
        shown = " + ".join(money.format_money(v, c) for c, v in sorted(amounts.items()))
        done = [OUTCOME_DONE.get(str(f[k]), str(f[k])) for k in ("from", "to")]
        out.append(Flip(f"{done[0]} → {done[1]}", int(f["cases"]), shown or "0", f["examples"]))
    return out


@router.get("/desk/policy/drafts/{draft_id}")
def draft_page(request: Request, draft_id: int, viewer: Viewer = Depends(reader)) -> Response:
    with _runtime(request).db.read() as session:
        draft = session.get(PolicyDraft, draft_id)
        if draft is None:
            return _missing(request, viewer, "No such draft", f"There is no draft d{draft_id}.")
        doc, validity = drafts.validate_text(draft.source)
        results = []
        if doc is not None and draft.content_hash is not None:
            results = run_policy_tests(drafts.compiled(draft.content_hash, draft.source))
        backtested = (
            draft.last_backtest_summary
            if draft.last_backtest_hash is not None
            and draft.last_backtest_hash == draft.content_hash
            else None
        )
        active = control(session).active_version
        author = words(text(by_whom(draft.author)))
    summary = (
        said(
            summary_text(
                backtested, label=f"d{draft_id}", days=int(backtested.get("days", 30)), doc=doc
            )
        )
        if backtested
        else []
    )
    return page(
        request,
        viewer,
        "policy_draft.html",
        title=f"Draft d{draft_id}",
        section="policy",
        draft=draft,
        author=author,
        doc=doc,
        validity=said(validity),
        rules=rule_rows(doc) if doc else [],
        results=results,
        failed=sum(1 for r in results if not r.passed),
        backtest=summary,
        flips=flips(backtested) if backtested else [],
        active=active,
        state=_draft_state(draft),
    )


@dataclass(frozen=True)
class RegionRow:
    kind: str
    looser: bool
    where: str
    example: str
    confirmed: bool
    was: str
    now: str


def region_rows(
    report: ProofReport, old: PolicyDocument | None, new: PolicyDocument | None
) -> list[RegionRow]:
    currency = new.currency if new is not None else "USD"
    out = []
    for region in report.regions:
        facts = [b.fact for b in region.bounds]
        facts = facts if "request.amount" in facts else ["request.amount", *facts]
        where = [bound_words(b.fact, b.text) for b in region.bounds if b.text != "known (not null)"]
        out.append(
            RegionRow(
                KIND_WORDS.get(region.kind, region.kind),
                region.permissive,
                ", ".join(where) or "requests of every kind",
                example(region.witness, facts, currency),
                region.confirmed,
                words(side_words(old, region.old)),
                words(side_words(new, region.new)),
            )
        )
    return out


@router.get("/desk/policy/proof")
def proof_page(
    request: Request, old: str = "", new: str = "", viewer: Viewer = Depends(reader)
) -> Response:
    """What the prover finds between two texts: each kind of request decided differently with
    a checked example, and each changed setting (`governance/proof.proof_between`, the same
    cached proof the publish gate uses)."""
    problem, report = None, None
    docs: tuple[PolicyDocument | None, PolicyDocument | None] = (None, None)
    sources: tuple[str, str] | None = None
    with _runtime(request).db.read() as session:
        refs = _refs(session)
        if old and new:
            try:
                a, b = drafts.parse_ref(old), drafts.parse_ref(new)
                docs = (_doc(session, a), _doc(session, b))
                sources = (drafts.source_of(session, a), drafts.source_of(session, b))
            except CaseError as exc:
                problem = words(exc.text)
    if sources is not None:  # pure CPU, outside the transaction; cached per pair of texts
        report = proof_between(*sources)
    return page(
        request,
        viewer,
        "policy_proof.html",
        title="What the prover finds",
        section="policy",
        refs=refs,
        old=old,
        new=new,
        report=report,
        regions=region_rows(report, *docs) if report else [],
        settings=[words(setting_words(s)) for s in report.settings] if report else [],
        problem=problem,
        status=400 if problem else 200,
    )


@router.get("/desk/policy/shadow")
def shadow_page(request: Request, viewer: Viewer = Depends(reader)) -> Response:
    with _runtime(request).db.read() as session:
        tally = shadow.tally(session)
        doc = None
        if tally is not None:
            draft = session.get(PolicyDraft, tally.draft_id)
            doc = drafts.validate_text(draft.source)[0] if draft else None
        live = control(session).active_version
        live_doc = load_version(session, live).doc if live else None
    rows = []
    if tally is not None:
        rows = [
            (
                r.case_id,
                money.format_money(r.amount, r.currency),
                f"{OUTCOME_DONE.get(r.live_outcome, r.live_outcome)}, "
                + words(rule_name(live_doc, r.live_rule)),
                f"{OUTCOME_DONE.get(r.outcome, r.outcome)}, " + words(rule_name(doc, r.rule)),
            )
            for r in tally.disagreements
        ]
    return page(
        request,
        viewer,
        "policy_shadow.html",
        title="Shadow run",
        section="policy",
        tally=tally,
        rows=rows,
    )
