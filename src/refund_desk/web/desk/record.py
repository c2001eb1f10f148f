"""One case as an auditor follows it: `GET /desk/cases/{case_id}`.

Everything on the page is read in one read transaction (`read_record`) from the rows the rest of
the system writes: the case, its evidence (opened with the vault for a reader), the advice and
its provenance, the decision the pinned policy version made (`cases/views.py`'s decision, the
card's `why`), approvals and refusals, executions and the processor's refunds, reconciliation
findings, customer messages, the SLA clock and the audit records, each written as a sentence
(`sentences.py`) with its raw record a click away.

The chain is checked as far as is cheap for one request: every record of the case is
recomputed with the chain's key and linked to its neighbours in the chain. The whole chain is
checked on `/desk/audit/verify`, as `refund-desk audit verify` does, when a reader asks.
`render_record` gives the page's HTML for a case id without a request (the bench calls it).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from sqlalchemy import or_, select
from sqlmodel import Session, col

from refund_desk.bot.blocks.cards import likelihood
from refund_desk.cases.advisory import ERASED, summary_text, why
from refund_desk.cases.approvals import may_decide
from refund_desk.cases.evidence import shown, view_path
from refund_desk.cases.sla import ESCALATE, REMIND
from refund_desk.cases.views import slack_delivery
from refund_desk.governance.versions import LoadedPolicy, load_version
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import canonical, record_hash, record_json, verify_chain
from refund_desk.storage.models import (
    Approval,
    AuditHead,
    AuditRecord,
    Case,
    CustomerMessage,
    Execution,
    Job,
    Payment,
    ProcessorFinding,
)
from refund_desk.web import pages
from refund_desk.web.desk.access import reader
from refund_desk.web.desk.queue import record_mark
from refund_desk.web.desk.render import amount, page, stamp, words
from refund_desk.web.desk.session import Viewer

router = APIRouter(include_in_schema=False)

NAME_LOOKUPS_PER_PAGE = 8  # Slack `users.info` calls one page may make (the rest: cached or ids)


# ---------------------------------------------------------------- names of people


class Names(Protocol):
    def lookup(self, ids: list[str]) -> dict[str, str]:
        """Names for the Slack user ids it knows or can learn cheaply."""


@dataclass
class SlackNames:
    """People's names from Slack's `users.info` (the emulator answers it in the demo), kept
    for an hour; a page asks for at most `NAME_LOOKUPS_PER_PAGE` it does not know yet, with a
    short timeout, and shows the id for the others."""

    client: Any  # slack_sdk WebClient
    ttl: float = 3600.0
    _known: dict[str, tuple[float, str | None]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def lookup(self, ids: list[str]) -> dict[str, str]:
        now = time.monotonic()
        out: dict[str, str] = {}
        asked = 0
        for user in dict.fromkeys(ids):
            with self._lock:
                cached = self._known.get(user)
            if cached is not None and now - cached[0] < self.ttl:
                if cached[1]:
                    out[user] = cached[1]
                continue
            if asked >= NAME_LOOKUPS_PER_PAGE or not user.startswith(("U", "W")):
                continue
            asked += 1
            name = self._ask(user)
            with self._lock:
                self._known[user] = (now, name)
            if name:
                out[user] = name
        return out

    def _ask(self, user: str) -> str | None:
        try:
            answer = self.client.api_call("users.info", http_verb="GET", params={"user": user})
        except Exception:  # a name is a nicety: the id stands in
            return None
        found = answer.get("user") or {}
        profile = found.get("profile") or {}
        name = found.get("real_name") or profile.get("real_name") or found.get("name")
        return str(name) if name else None


def names_source(request: Request) -> Names | None:
    """The app's source of people's names: Slack's directory when Slack is connected."""
    state = request.app.state
    known: Names | None = getattr(state, "desk_names", None)
    if known is not None:
        return known
    surface = getattr(state, "slack", None)
    client = getattr(getattr(surface, "outbox", None), "client", None)
    if client is None:
        return None
    from slack_sdk import WebClient

    quick = WebClient(token=client.token, base_url=client.base_url, timeout=2)
    state.desk_names = SlackNames(quick)
    return state.desk_names


# ---------------------------------------------------------------- what the page shows


@dataclass
class ChainCheck:
    scope: str  # "case" | "full"
    ok: bool
    checked: int  # records recomputed
    chain_length: int
    problem: str | None = None


@dataclass
class AuditLine:
    seq: int
    at: datetime
    sentence: str
    raw: str  # the record as JSON, indented
    ok: bool = True


@dataclass
class RecordPage:
    case: Case
    policy: LoadedPolicy | None
    processor: str | None
    payment: Payment | None
    email: str | None
    name: str | None
    message: str | None
    reply_channel: str | None
    summary: str
    evidence: list[dict[str, Any]]
    approvals: list[Approval]
    refusals: list[AuditRecord]
    executions: list[Execution]
    findings: list[ProcessorFinding]
    messages: list[CustomerMessage]
    sla_events: list[AuditRecord]
    sla_pending: list[Job]
    records: list[AuditRecord]
    chain: ChainCheck
    slack: dict[str, Any] | None
    appeals: list[str]
    may_decide: bool
    people: list[str]  # every Slack user id the page names


def read_record(runtime: Runtime, case_id: str, viewer: Viewer | None) -> RecordPage | None:
    """Everything the page shows, in one read transaction; None: no such case."""
    desk = runtime.desk
    personal = viewer is None or viewer.may_read
    with runtime.db.read() as session:
        case = session.get(Case, case_id)
        if case is None:
            return None
        payment = session.get(Payment, case.payment_id)
        policy = load_version(session, case.policy_version) if case.policy_version else None
        vault = desk.vault if personal else None
        email = name = message = reply_channel = None
        summary = ""
        if vault is not None:
            erased = case.erased_at is not None
            email = ERASED if erased else vault.decrypt(case.email_enc, session=session) or ERASED
            name = (
                ERASED
                if erased
                else (vault.decrypt(case.name_enc, session=session) if case.name_enc else None)
            )
            message = (
                ERASED
                if erased
                else (
                    vault.decrypt(case.message_enc, session=session) if case.message_enc else None
                )
            )
            summary = summary_text(vault, case.advice or {}, session=session)
            reply_channel = _reply_channel(
                vault.decrypt(case.reply_enc, session=session) if case.reply_enc else None
            )
        evidence = _evidence(runtime, case, shown(vault, case.evidence, session=session))
        approvals = list(
            session.scalars(
                select(Approval)
                .where(col(Approval.case_id) == case.id)
                .order_by(col(Approval.created_at), col(Approval.id))
            ).all()
        )
        executions = list(
            session.scalars(
                select(Execution)
                .where(col(Execution.case_id) == case.id)
                .order_by(col(Execution.created_at))
            ).all()
        )
        findings = list(
            session.scalars(
                select(ProcessorFinding)
                .where(col(ProcessorFinding.case_id) == case.id)
                .order_by(col(ProcessorFinding.found_at))
            ).all()
        )
        messages = list(
            session.scalars(
                select(CustomerMessage)
                .where(col(CustomerMessage.case_id) == case.id)
                .order_by(col(CustomerMessage.created_at), col(CustomerMessage.id))
            ).all()
        )
        if vault is not None:  # what the customer wrote back is sealed under their key
            for m in messages:
                if m.direction == "in":
                    session.expunge(m)
                    m.body = (
                        ERASED if not m.body else (vault.decrypt(m.body, session=session) or ERASED)
                    )
        records = list(
            session.scalars(
                select(AuditRecord)
                .where(col(AuditRecord.case_id) == case.id)
                .order_by(col(AuditRecord.seq))
            ).all()
        )
        sla_pending = list(
            session.scalars(
                select(Job)
                .where(
                    col(Job.status) == "pending",
                    or_(
                        col(Job.dedupe_key).like(f"{REMIND}:{case.id}:%"),
                        col(Job.dedupe_key).like(f"{ESCALATE}:{case.id}:%"),
                    ),
                )
                .order_by(col(Job.due_at))
            ).all()
        )
        appeals = list(
            session.scalars(select(col(Case.id)).where(col(Case.appeal_of) == case.id)).all()
        )
        chain = check_chain(runtime.settings.secret_value(), session, records)
        decides = viewer is not None and may_decide(session, case, viewer.user, desk.directory)
        slack = slack_delivery(session, case.id)
    refusals = [r for r in records if r.action == "approval.refused"]
    sla_events = [
        r
        for r in records
        if r.action in ("case.awaiting_approval", "case.parked", "sla.reminder", "case.escalated")
    ]
    people = [a.approver for a in approvals]
    people += [r.actor_id for r in records if r.actor_kind == "human" and r.actor_id]
    people += [str(i["checked_by"]) for i in evidence if i.get("checked_by")]
    if case.requested_by:
        people.append(case.requested_by)
    return RecordPage(
        case=case,
        policy=policy,
        processor=payment.processor if payment is not None else None,
        payment=payment,
        email=email,
        name=name,
        message=message,
        reply_channel=reply_channel,
        summary=summary,
        evidence=evidence,
        approvals=approvals,
        refusals=refusals,
        executions=executions,
        findings=findings,
        messages=messages,
        sla_events=sla_events,
        sla_pending=sla_pending,
        records=records,
        chain=chain,
        slack=slack,
        appeals=appeals,
        may_decide=decides,
        people=list(dict.fromkeys(people)),
    )


def _reply_channel(reply: str | None) -> str | None:
    """Where answers go, in words, from the sealed reply details (no addresses shown)."""
    if not reply:
        return None
    try:
        data = json.loads(reply)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    if data.get("ticket_id"):
        return f"helpdesk ticket {data['ticket_id']}"
    if data.get("message_id"):
        return "a reply in the customer's email thread"
    return None


def _evidence(runtime: Runtime, case: Case, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each item with the signed path the file route serves it from (the card's link)."""
    out = []
    for item in items:
        item = dict(item)
        item.pop("view_url", None)
        if item.get("kind") == "file" and item.get("sha256") and case.erased_at is None:
            item["src"] = view_path(runtime.desk.secret, case.id, str(item["sha256"]))
            item["image"] = str(item.get("content_type", "")).startswith("image/")
        out.append(item)
    return out


def check_chain(secret: str, session: Session, records: list[AuditRecord]) -> ChainCheck:
    """The case's records recomputed with the chain's key and linked to their neighbours
    (the record before each, and the one after, links to it). The whole chain, as `refund-desk
    audit verify` checks it, is a page of its own (`/desk/audit/verify`): its cost grows with
    every case the desk ever had."""
    head = session.get(AuditHead, 1)
    length = head.seq if head is not None else 0
    wanted = {r.seq - 1 for r in records} | {r.seq + 1 for r in records}
    wanted -= {r.seq for r in records}
    neighbours = {
        n.seq: n
        for n in session.scalars(
            select(AuditRecord).where(col(AuditRecord.seq).in_(sorted(wanted)))
        ).all()
    }
    by_seq = {**neighbours, **{r.seq: r for r in records}}
    for record in records:
        if record_hash(secret, record) != record.hash:
            return ChainCheck(
                "case", False, len(records), length, f"record {record.seq} was altered"
            )
        before = by_seq.get(record.seq - 1)
        if record.seq > 1 and (before is None or before.hash != record.prev_hash):
            problem = f"record {record.seq} does not link to its predecessor"
            return ChainCheck("case", False, len(records), length, problem)
        after = by_seq.get(record.seq + 1)
        if after is not None and after.prev_hash != record.hash:
            problem = f"record {after.seq} does not link to record {record.seq}"
            return ChainCheck("case", False, len(records), length, problem)
    for seq, neighbour in neighbours.items():
        if record_hash(secret, neighbour) != neighbour.hash:
            return ChainCheck("case", False, len(records), length, f"record {seq} was altered")
    return ChainCheck("case", True, len(records) + len(neighbours), length)


# ---------------------------------------------------------------- the Slack thread


def slack_link(runtime: Runtime, channel: str, ts: str) -> str:
    """A permalink to a message in the form Slack's `chat.getPermalink` answers
    (`…/archives/C…/p<ts without the dot>`), on slack.com or on the Slack the app talks to
    (the demo's emulator)."""
    api = runtime.settings.slack_api_url
    host = urlsplit(api).hostname or ""
    base = "https://slack.com/" if host.endswith("slack.com") else api.removesuffix("api/")
    if not base.endswith("/"):
        base += "/"
    return f"{base}archives/{quote(channel, safe='')}/p{quote(ts.replace('.', ''), safe='')}"


# ---------------------------------------------------------------- the page


def _context(runtime: Runtime, record: RecordPage, names: dict[str, str]) -> dict[str, Any]:
    from refund_desk.web.desk.sentences import Sentences

    case = record.case
    decision = case.decision or {}
    rule = decision.get("rule")
    advice = dict(case.advice or {})
    confidence = advice.get("confidence")
    say = Sentences(case, record.policy, names)
    guardrails = [(g, why(str(g), record.policy)) for g in decision.get("guardrails") or []]
    return {
        "case": case,
        "r": record,
        "decision": decision,
        "rule_why": why(str(rule), record.policy) if rule else None,
        "guardrails": guardrails,
        "advice": advice,
        "band": likelihood(float(confidence)) if confidence is not None else None,
        "facts": _flat(case.facts or {}),
        "provenance": sorted((case.provenance or {}).items()),
        "lines": [
            AuditLine(r.seq, r.at, say.of(r), json.dumps(record_json(r), indent=2, sort_keys=True))
            for r in record.records
        ],
        "slack_url": (
            slack_link(runtime, record.slack["channel"], record.slack["ts"])
            if record.slack and record.slack.get("ts") and record.slack["status"] == "delivered"
            else None
        ),
        "person": say.person,
        "refunded": sum(e.amount for e in record.executions if e.status == "succeeded"),
        "unnamed": [p for p in record.people if p not in names],
    }


def _flat(facts: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for key, value in facts.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out += _flat(value, name + ".")
        else:
            out.append((name, "unknown" if value is None else canonical(value).strip('"')))
    return out


def _names(request: Request | None, viewer: Viewer | None, ids: list[str]) -> dict[str, str]:
    names = {viewer.user: viewer.name} if viewer is not None else {}
    source = names_source(request) if request is not None else None
    if source is not None:
        names.update(source.lookup([i for i in ids if i not in names]))
    return names


@router.get("/desk/cases/{case_id}")
def case_record(request: Request, case_id: str, viewer: Viewer = Depends(reader)) -> Response:
    runtime: Runtime = request.app.state.runtime
    record = read_record(runtime, case_id, viewer)
    if record is None:
        return page(
            request,
            viewer,
            "record_missing.html",
            title="No such case",
            section="cases",
            status=404,
            case_id=case_id,
        )
    names = _names(request, viewer, record.people)
    return page(
        request,
        viewer,
        "record.html",
        title=f"Case {case_id}",
        section="cases",
        mark=record_mark(runtime),  # `desk.js` asks `/desk/changes` whether the record moved
        **_context(runtime, record, names),
    )


def render_record(runtime: Runtime, case_id: str, viewer: Viewer | None = None) -> str | None:
    """The record page's HTML for `case_id` (None: no such case), without a request or a
    session: what the bench measures beside the route. `viewer` None reads as a reader."""
    record = read_record(runtime, case_id, viewer)
    if record is None:
        return None
    names = _names(None, viewer, record.people)
    response = pages.render(
        "desk/record.html",
        title=f"Case {case_id}",
        viewer=viewer,
        sections=(),
        section="cases",
        csrf=lambda: "",
        amount=amount,
        stamp=stamp,
        words=words,
        mark=record_mark(runtime),
        **_context(runtime, record, names),
    )
    return bytes(response.body).decode()


@router.get("/desk/audit/verify")
def verify_whole_chain(request: Request, viewer: Viewer = Depends(reader)) -> Response:
    """Every audit record recomputed in order with the chain's key: `refund-desk audit verify`."""
    runtime: Runtime = request.app.state.runtime
    with runtime.db.read() as session:
        result = verify_chain(runtime.settings.secret_value(), session)
    return page(request, viewer, "audit_verify.html", title="The audit chain", result=result)
