"""Personal data: erasure on request and retention, without breaking the record.

A customer's email, name, words (message, replies) and evidence are personal data; amounts,
decisions, approvals, executions and the audit chain are not, and the audit chain never held
any (its payloads carry ids, amounts, rules and counts). So erasing a customer:

* destroys their data key (`customer_keys`): every copy of their fields, in this database and
  in every backup, becomes unreadable;
* blanks those fields on their cases and their replies, and the advisor's quote of their
  words (`advice.summary`), and the links and file names they sent (all sealed under the key
  too, so a copy of an older row version is unreadable anyway);
* deletes their evidence files (sealed under that key) that no case of theirs keeping its
  personal data holds (`evidence.discard`, after the commit);
* records `customer.erased` (the case ids and how many files; never the email) in the audit
  chain, and re-renders their Slack cards, which then say "erased".

`audit verify` passes afterwards: no audit record changed. A retention period
(`REFUND_DESK_RETENTION_DAYS`, default 730) does the same, as a daily job, for cases closed
longer ago; a customer's key goes when none of their cases keeps personal data.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from refund_desk.cases import advisory
from refund_desk.cases.errors import NotFound
from refund_desk.cases.evidence import PERSONAL, EvidenceStore, discard, stored_name, unreferenced
from refund_desk.cases.lifecycle import FINAL
from refund_desk.cases.notify import notify
from refund_desk.crypto import (
    destroy_customer_key,
    lock_customer_key,
    purge_destroyed_keys,
)
from refund_desk.jobs.queue import ClaimedJob, RetryLater, backoff, enqueue
from refund_desk.storage.audit import SYSTEM, Actor
from refund_desk.storage.db import PurgeBusy
from refund_desk.storage.models import Case, CustomerMessage, Job, SlackMessage

if TYPE_CHECKING:
    from refund_desk.cases.desk import Desk

log = logging.getLogger(__name__)

ERASED = advisory.ERASED
WITHDRAWN = "withdrawn"  # an outcome message erased before it was delivered
RETENTION_JOB = "customer.retention"
DELETE_FILES_JOB = "evidence.delete"  # one customer's files, queued with the erasure's commit
PURGE_KEYS_JOB = "customer_keys.purge"  # destroyed keys' old row versions, physically gone
EVERY = timedelta(days=1)
BATCH = 200


@dataclass
class Erasure:
    cases: list[str] = field(default_factory=list)
    evidence_files: int = 0
    key_destroyed: bool = False
    already: bool = False  # nothing was left to erase


def scrub(session: Session, case: Case, now: datetime) -> set[str]:
    """Blank one case's personal fields; returns the stored names of its evidence files."""
    advice = dict(case.advice or {})
    summary = advice.get("summary")
    if summary:
        advice["summary"] = ERASED
        if isinstance(advice.get("explanation"), str):
            advice["explanation"] = advice["explanation"].replace(str(summary), ERASED)
    files: set[str] = set()
    evidence = []
    for item in case.evidence or []:
        kept = dict(item)
        name = stored_name(kept)
        if name:
            files.add(name)
        kept.pop("file", None)
        for key in PERSONAL:
            if key in kept:
                kept[key] = ERASED
        evidence.append(kept)
    case.email_enc, case.name_enc, case.message_enc, case.reply_enc = "", None, None, None
    case.earlier_enc = None
    case.advice = advice if case.advice is not None else None
    case.evidence = evidence if case.evidence is not None else None
    case.erased_at = case.erased_at or now
    session.add(case)
    for message in session.scalars(
        select(CustomerMessage).where(
            col(CustomerMessage.case_id) == case.id, col(CustomerMessage.direction) == "in"
        )
    ).all():
        message.body = ""
        session.add(message)
    return files


def _rerender(session: Session, case_ids: Sequence[str]) -> None:
    """Cases with a Slack card get it redrawn: it then says the customer was erased."""
    if not case_ids:
        return
    carded = session.scalars(
        select(col(SlackMessage.case_id))
        .where(col(SlackMessage.case_id).in_(case_ids), col(SlackMessage.kind) == "card")
        .distinct()
    ).all()
    for case_id in carded:
        notify(session, event="case.erased", case_id=case_id)


Freed = dict[str, list[str]]  # files to delete, by customer (email hash)


def _erase_cases(desk: Desk, session: Session, cases: Sequence[Case], now: datetime) -> Freed:
    """The one path of every erasure, in the caller's transaction: blank the cases, queue
    the deletion of the files no one else holds (returned) and redraw the Slack cards."""
    held: dict[str, set[str]] = {}
    for case in cases:
        held.setdefault(case.email_hash, set()).update(scrub(session, case, now))
    session.flush()
    free: Freed = {}
    for customer, names in sorted(held.items()):
        gone = unreferenced(session, names)  # files of earlier versions may be shared
        if gone:  # committed with the erasure: the files go even if the process dies next
            enqueue(session, kind=DELETE_FILES_JOB, payload={"customer": customer, "files": gone})
            free[customer] = gone
    ids = [c.id for c in cases]
    _withdraw_messages(session, ids)
    for forget in desk.jobs.on_erasure:  # Slack's waiting posts: redrawn when sent
        forget(session, ids)
    _rerender(session, ids)
    return free


def _withdraw_messages(session: Session, case_ids: Sequence[str]) -> None:
    """Outcome messages not yet delivered stay undelivered: their job finds them withdrawn
    (the customer asked to be forgotten; the webhook or helpdesk would still reach them)."""
    if not case_ids:
        return
    for message in session.scalars(
        select(CustomerMessage).where(
            col(CustomerMessage.case_id).in_(case_ids),
            col(CustomerMessage.direction) == "out",
            col(CustomerMessage.status) == "queued",
        )
    ).all():
        message.status, message.body = WITHDRAWN, ""
        session.add(message)


def _queue_purge(session: Session) -> None:
    """A destroyed key's old row version is removed by a job, committed with the erasure
    (one waiting job serves every erasure before it runs; one already running may have
    rewritten the table before this erasure, so it does not count)."""
    waiting = session.scalar(
        select(col(Job.id))
        .where(
            col(Job.kind) == PURGE_KEYS_JOB,
            col(Job.status) == "pending",
            col(Job.lease_owner).is_(None),
        )
        .limit(1)
    )
    if waiting is None:
        enqueue(session, kind=PURGE_KEYS_JOB, payload={})


def run_purge_keys(desk: Desk, job: ClaimedJob) -> None:
    try:
        purge_destroyed_keys(desk.db)
    except PurgeBusy as exc:
        # Waiting for older transactions is not a failure: the job never gives up on it, so
        # no destroyed key's old row version outlives a long reader.
        raise RetryLater(backoff(job.attempt, base=30, cap=3600), str(exc), failed=False) from exc


def _delete_now(desk: Desk, evidence: EvidenceStore | None, free: Freed) -> int:
    """After the commit (the queued jobs then find nothing left), one customer at a time,
    each holding their key row: a case filed since the erasure's commit under a key that
    lives on (retention keeps the key of a customer with newer cases) may have taken a file
    by the same name, and keeps it."""
    if evidence is None:
        return 0
    return sum(discard(desk, evidence, customer, names) for customer, names in free.items())


def run_delete_files(desk: Desk, job: ClaimedJob, *, evidence: EvidenceStore | None) -> None:
    if evidence is not None:
        customer = job.payload.get("customer")  # absent from jobs of earlier versions
        names = [str(s) for s in job.payload.get("files", [])]
        discard(desk, evidence, str(customer) if customer else None, names)


def _count(free: Freed) -> int:
    return sum(len(names) for names in free.values())


def erase_customer(
    desk: Desk,
    email: str,
    *,
    actor: Actor,
    evidence: EvidenceStore | None,
    forget: Callable[[str], int] | None = None,
) -> Erasure:
    """Erase one customer's personal data everywhere we hold it; raises NotFound if we hold
    none. `forget` also removes them from the processor's ledger where that is ours (the
    sandbox); a real processor keeps its own records under its own rules."""
    email_hash = desk.vault.email_hash(email)
    now = desk.now()
    with desk.db.write() as session:
        # The key row's lock first (as retention takes it): an intake filing a case for this
        # customer holds it until it commits, so the cases read next include that case.
        destroyed = destroy_customer_key(session, email_hash, now)
        cases = list(
            session.scalars(
                select(Case).where(col(Case.email_hash) == email_hash).order_by(col(Case.id))
            ).all()
        )
        if not cases and not destroyed:
            raise NotFound("customer_not_found", "No case of this customer is on record.")
        pending = [c for c in cases if c.erased_at is None]
        result = Erasure(cases=[c.id for c in cases], key_destroyed=destroyed)
        if not pending and not destroyed:
            result.already = True
            return result
        free = _erase_cases(desk, session, pending, now)
        if destroyed:
            _queue_purge(session)
        desk.audit.append(
            session,
            action="customer.erased",
            actor=actor,
            payload={
                "cases": [c.id for c in pending],
                "evidence_files": _count(free),
                "key_destroyed": destroyed,
            },
        )
    result.evidence_files = _delete_now(desk, evidence, free)
    if forget is not None:
        forget(email)
    compact(desk)
    log.info("customer erased: %d cases, %d evidence files", len(pending), _count(free))
    return result


def retention(desk: Desk, *, days: int, evidence: EvidenceStore | None) -> int:
    """Erase the personal data of cases closed more than `days` ago; returns how many."""
    cutoff = desk.now() - timedelta(days=days)
    total = 0
    free: Freed = {}
    while True:
        now = desk.now()
        with desk.db.write() as session:
            cases = list(
                session.scalars(
                    select(Case)
                    .where(
                        col(Case.erased_at).is_(None),
                        col(Case.status).in_([str(s) for s in FINAL]),
                        col(Case.updated_at) < cutoff,
                    )
                    .order_by(col(Case.updated_at), col(Case.id))
                    .limit(BATCH)
                ).all()
            )
            if not cases:
                break
            batch = _erase_cases(desk, session, cases, now)
            keys = 0
            for email_hash in sorted({c.email_hash for c in cases}):
                # The key's lock first: a case an intake is committing under it is then seen.
                lock_customer_key(session, email_hash)
                live = session.scalar(
                    select(col(Case.id))
                    .where(col(Case.email_hash) == email_hash, col(Case.erased_at).is_(None))
                    .limit(1)
                )
                if live is None and destroy_customer_key(session, email_hash, now):
                    keys += 1
            if keys:
                _queue_purge(session)
            desk.audit.append(
                session,
                action="retention.erased",
                actor=SYSTEM,
                payload={
                    "cases": [c.id for c in cases],
                    "closed_before": cutoff.isoformat(),
                    "keys_destroyed": keys,
                    "evidence_files": _count(batch),
                },
            )
        for customer, names in batch.items():
            free.setdefault(customer, []).extend(names)
        total += len(cases)
    if total:
        _delete_now(desk, evidence, free)
        compact(desk)
        log.info("retention: erased the personal data of %d cases closed before %s", total,
                 cutoff.date().isoformat())  # fmt: skip
    return total


def compact(desk: Desk) -> None:
    """Erased values gone from the database's files too (`Database.checkpoint`)."""
    try:
        desk.db.checkpoint()
    except Exception:  # busy readers: the next checkpoint folds it in
        log.warning("could not checkpoint the write-ahead log after an erasure", exc_info=True)


def run_retention(desk: Desk, job: ClaimedJob, *, days: int, evidence: EvidenceStore | None) -> Any:
    retention(desk, days=days, evidence=evidence)
    raise RetryLater(EVERY.total_seconds(), "next retention sweep", failed=False)


def ensure_scheduled(desk: Desk) -> None:
    """The daily retention job, put in the jobs table once (replicas race harmlessly)."""
    try:
        with desk.db.write() as session:
            enqueue(session, kind=RETENTION_JOB, payload={}, dedupe_key="retention:scheduled")
    except IntegrityError:
        pass
