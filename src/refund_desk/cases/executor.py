"""The exactly-once executor, in DESIGN.md's three atomic phases.

1. reserve: under the payment's lock, re-check the case against fresh processor facts and
   write the execution record with its idempotency key (derived from the execution id);
2. pay: outside any transaction, look the refund up at the processor by our execution id and
   create it only if it is not there;
3. record: store the processor's answer and move the case.

A timeout or crash between 2 and 3 leaves the job, whose retry starts again at 2 and finds the
refund. Correctness never depends on the processor honouring idempotency keys.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import bindparam, or_, select, update
from sqlmodel import col

from refund_desk import clock, logs, money
from refund_desk.cases import breaker
from refund_desk.cases import facts as case_facts
from refund_desk.cases.intake import new_id
from refund_desk.cases.lifecycle import Status, move
from refund_desk.cases.notify import notify
from refund_desk.cases.ports import (
    PaymentFacts,
    ProcessorError,
    ProcessorRefund,
    ProcessorTimeout,
    Provenance,
    RefundNotFound,
)
from refund_desk.cases.quorum import approval_count, approvals_needed
from refund_desk.cases.rows import load_for_update, new_revision, on_record
from refund_desk.governance.review import maybe_sample as sample_for_review
from refund_desk.governance.versions import (
    control,
    evaluate,
    load_version,
)
from refund_desk.jobs.queue import ClaimedJob, RetryLater, backoff, enqueue, queue
from refund_desk.storage.audit import SYSTEM
from refund_desk.storage.db import lock_payment
from refund_desk.storage.models import Case, Execution

if TYPE_CHECKING:
    from sqlmodel import Session

    from refund_desk.cases.desk import Desk

PROCESSOR_PATIENCE = 8  # transient failures in a row before the case is parked for a person
PAUSED_RECHECK_SECONDS = 30.0
PENDING_RECHECK_SECONDS = 60.0
RESOLVE_AFTER_SECONDS = 60.0  # a parked case's open reservation is looked up after this
FINAL_REFUND_STATES = ("succeeded", "failed", "canceled")


class BackToPerson(Exception):
    """Automatic execution stopped (mode or breaker): the case waits for a person instead."""


class Parked(Exception):
    """The case cannot be paid as it stands; the reason is the park reason."""


EXECUTE = "execute"  # job kind: reserve, pay, record
DEFAULT_REFUNDED = "Your refund of {amount} has been issued."


def enqueue_execution(session: Session, case: Case, due_at: datetime | None = None) -> int:
    """Queue the refund of an approved case, once per approval (the revision it was approved at):
    the dedupe key makes a second queueing of the same approval fail instead of running two
    executors side by side for one case."""
    return queue(
        session,
        kind=EXECUTE,
        payload={"case_id": case.id, "revision": case.revision},
        dedupe_key=f"execute:{case.id}:{case.revision}",
        due_at=due_at or clock.now(),
    )


def pay_reserved(desk: Desk, job: ClaimedJob, execution: Execution, correlation_id: str) -> None:
    """The execute job of `execution`, run right after the commit that reserved it and claimed
    the job, so it does not read the case again; the barrier (`_send`) still reads the kill
    switch and the mode afresh before the create. A retry is an ordinary `execute`."""
    logs.case_loaded(execution.case_id, correlation_id)
    _pay_and_record(desk, job, execution.case_id, execution)


def execute(desk: Desk, job: ClaimedJob) -> None:
    case_id = job.payload["case_id"]
    if job.payload.get("resolve"):  # a reservation whose outcome nobody knows: look it up
        try:
            with desk.jobs.held(job):
                resolve(desk, job.payload["resolve"])
        except ProcessorError as exc:
            raise RetryLater(
                backoff(job.attempt, cap=600.0), f"{exc.code}: {exc.message}", failed=False
            ) from None
        return
    with desk.db.read() as session:
        case = session.get(Case, case_id)
        execution = _open_execution(session, case_id)
        paused = control(session).paused
    if case is None or case.status not in (Status.approved, Status.executing):
        return
    if execution is not None and execution.amount != case.amount:
        # Approved again at another amount while an earlier refund is unresolved: never pay
        # the old amount on the new approval; resolve the old one first.
        _park_waiting(
            desk,
            case_id,
            f"An earlier refund of {money.format_money(execution.amount, execution.currency)} "
            "is not resolved yet; it is being looked up at the processor.",
        )
        return
    if paused:  # the kill switch: nothing executes, not even a reserved refund; work waits
        raise RetryLater(PAUSED_RECHECK_SECONDS, "paused: the kill switch is on", failed=False)
    if execution is None:
        try:
            payment = desk.processor.payment(case.payment_id)
        except ProcessorError as exc:
            _processor_failed(desk, job, case_id, None, exc)
            return
        execution = _reserve(desk, case_id, job.payload.get("revision"), payment)
        if execution is None:
            return
    _pay_and_record(desk, job, case_id, execution)


def _pay_and_record(desk: Desk, job: ClaimedJob, case_id: str, execution: Execution) -> None:
    """Phases 2 and 3 of a reserved execution."""
    try:
        with desk.jobs.held(job):  # no other replica takes the job over while the call runs
            refund = _pay(desk, execution)
    except ProcessorError as exc:
        _processor_failed(desk, job, case_id, execution, exc)
        return
    if refund is None:  # not sent: the barrier gave the case back to a person
        return
    _record(desk, execution, refund, job=job)
    if refund.status not in FINAL_REFUND_STATES:
        raise RetryLater(
            PENDING_RECHECK_SECONDS, f"refund {refund.id} is {refund.status}", failed=False
        )


def _processor_failed(
    desk: Desk, job: ClaimedJob, case_id: str, execution: Execution | None, exc: ProcessorError
) -> None:
    """The processor refused or failed a call of this job: fail, park or retry."""
    breaker.record_failure(desk, exc.code)
    if not exc.transient:
        _fail(desk, case_id, execution, exc.code, exc.message)
        return
    if job.failures + 1 >= PROCESSOR_PATIENCE:
        _park_waiting(
            desk,
            case_id,
            f"The processor has been failing ({exc.code}); "
            "the refund was not confirmed. A person must retry or resolve it.",
        )
        return
    raise RetryLater(backoff(job.failures + 1), f"{exc.code}: {exc.message}") from None


_OPEN_EXECUTION = select(Execution).where(  # built once: its compiled form is reused
    col(Execution.case_id) == bindparam("case_id"),
    col(Execution.status) == case_facts.OPEN_EXECUTION,
)


def _open_execution(session: Session, case_id: str) -> Execution | None:
    return session.scalars(_OPEN_EXECUTION, {"case_id": case_id}).first()


# ---------------------------------------------------------------- phase 1: reserve


def _reserve(
    desk: Desk, case_id: str, revision: int | None, payment: PaymentFacts
) -> Execution | None:
    try:
        with desk.db.write() as session:
            lock_payment(session, payment.id)
            return reserve_in(desk, session, case_id, revision, payment)
    except Parked as parked:
        _park_waiting(desk, case_id, str(parked))
        return None


def reserve_early(
    desk: Desk, session: Session, case: Case, payment: PaymentFacts, money: case_facts.Refundable
) -> Execution | None:
    """Reserve in the transaction that approved the case (locked, as the payment's row,
    `payment` just read from the processor, `money` the remainder it was decided on). If the
    case cannot be reserved as it stands (parked, paused), nothing is written here and the
    execute job reserves it, or parks it, itself."""
    try:
        return reserve_in(desk, session, case.id, case.revision, payment, decided_on=money,
                          locked=case)  # fmt: skip
    except (Parked, RetryLater):  # raised before anything is written
        return None


def reserve_in(
    desk: Desk,
    session: Session,
    case_id: str,
    revision: int | None,
    payment: PaymentFacts,
    *,
    decided_on: case_facts.Refundable | None = None,
    locked: Case | None = None,
) -> Execution | None:
    """Phase 1 in the caller's transaction, which holds the payment's lock. `decided_on`: this
    transaction decided the case on `payment` with this remainder (nothing written between),
    so neither the policy nor the remainder is read again. `locked`: the case, locked here."""
    case = locked if locked is not None else load_for_update(session, case_id)
    if case.status == Status.executing:
        return _open_execution(session, case_id)  # another worker reserved first
    if case.status != Status.approved:
        return None
    if revision is not None and case.revision != revision:
        raise Parked(
            f"The case changed after it was approved (revision {revision}, now {case.revision})."
        )
    automatic = (case.decision or {}).get("automatic", False) and not _human_basis(session, case)
    if not automatic:
        _check_approvals(session, case)
    try:
        _recheck(desk, session, case, payment, automatic=automatic, decided_on=decided_on)
        # The switches as committed now, locked until this reservation commits: a pause or a
        # mode change committed while the checks above ran is seen here (`breaker.lock_switches`).
        switches = breaker.lock_switches(session)
        if switches.paused:
            raise RetryLater(PAUSED_RECHECK_SECONDS, "paused: the kill switch is on", failed=False)
        if automatic and switches.mode != "supervised":
            raise BackToPerson("Automatic execution is off (mode changed); a person must approve.")
    except BackToPerson as back:
        # In this transaction: a breaker that tripped stays tripped with its record.
        move(
            session,
            desk.audit,
            case,
            Status.awaiting_approval,
            actor=SYSTEM,
            action="case.awaiting_approval",
            payload={"note": str(back)},
        )
        return None
    execution_id = new_id("ex")
    execution = Execution(
        id=execution_id,
        idempotency_key=f"refund-desk-{execution_id}",
        case_id=case.id,
        payment_id=case.payment_id,
        amount=case.amount,
        currency=case.currency,
        status=case_facts.OPEN_EXECUTION,
        automatic=automatic,
        basis=f"policy v{case.policy_version} rule {case.decision.get('rule')}"
        if automatic and case.decision
        else "approval",
        created_at=desk.now(),
    )
    session.add(execution)
    move(
        session,
        desk.audit,
        case,
        Status.executing,
        actor=SYSTEM,
        action="execution.reserved",
        payload={
            "execution_id": execution.id,
            "amount": execution.amount,
            "currency": execution.currency,
            "idempotency_key": execution.idempotency_key,
            "automatic": automatic,
        },
    )
    return execution


def _check_approvals(session: Session, case: Case) -> None:
    """Defence in depth: a case a person must approve pays only with those approvals on record."""
    have, needed = approval_count(session, case), approvals_needed(case)
    if have < needed:
        raise Parked(f"Only {have} of {needed} required approvals are on record.")


def _human_basis(session: Session, case: Case) -> bool:
    """A person approved it (in any mode), or the policy did not approve it by itself."""
    return (case.decision or {}).get("outcome") != "approve" or approval_count(session, case) > 0


def _recheck(
    desk: Desk,
    session: Session,
    case: Case,
    payment: PaymentFacts,
    *,
    automatic: bool,
    decided_on: case_facts.Refundable | None = None,
) -> None:
    """Re-validate against the processor's current facts; anything off parks the case.
    `decided_on`: the policy approved the case in this transaction on these very facts, so its
    decision is not evaluated again; every other check still runs."""
    if payment.currency.upper() != case.currency:
        raise Parked("The payment's currency no longer matches the case.")
    refundable = decided_on or case_facts.refundable(session, payment)
    money_left = refundable.left
    if case.amount > money_left:
        raise Parked(
            f"Only {money.format_money(money_left, case.currency)} is still refundable; "
            f"the case asks for {money.format_money(case.amount, case.currency)}."
        )
    if case.amount_source == Provenance.model_inference:
        raise Parked("The amount came only from the model; a person must confirm it.")
    if not automatic:
        return
    if case.possible_duplicate:
        raise Parked("Possible duplicate: never executed automatically.")
    policy = load_version(session, case.policy_version) if case.policy_version else None
    if decided_on is None:
        context = case_facts.policy_context(session, case, payment, refundable, desk.now())
        decision = evaluate(policy, context)
        if not (decision.outcome == "approve" and decision.automatic):
            detail = f"{decision.rule}: {decision.outcome}"
            if decision.error:
                detail += f"; {decision.error}"
            raise Parked(f"On fresh facts the policy no longer approves automatically ({detail}).")
    limit = breaker.over_limit(session, policy, case.amount, case.currency)  # locks the switches
    if limit:
        breaker.trip(desk, session, limit)
        raise BackToPerson(f"Automatic refunds stopped: {limit}.")


# ---------------------------------------------------------------- phase 2: pay


def _pay(desk: Desk, execution: Execution) -> ProcessorRefund | None:
    """Lookup before create: after an unknown outcome the refund may already exist. Then the
    barrier (`_send`), then the create. None: not sent (the case went back to a person)."""
    looked_at = desk.now()
    try:
        found = _lookup(desk, execution)
    except ProcessorError as exc:
        raise _lookup_failed(execution, exc) from None
    if found is not None:
        return found
    try:
        sent_at = _send(desk, execution, looked_at)
    except _ModeChanged as changed:
        _back_to_person(desk, execution.id, looked_at, str(changed))
        return None
    if sent_at is None:
        return None  # settled or released meanwhile: nothing to send
    try:
        return desk.processor.create_refund(
            payment_id=execution.payment_id,
            amount=execution.amount,
            currency=execution.currency.lower(),
            idempotency_key=execution.idempotency_key,
            metadata={
                "case_id": execution.case_id,
                "execution_id": execution.id,
                **_correlation(execution),
            },
        )
    except ProcessorError:
        _answered(desk, execution.id, sent_at)  # the call is over: in flight no more
        raise


def _lookup_failed(execution: Execution, exc: ProcessorError) -> ProcessorError:
    """A look-up never declines a refund. Once a create of this execution may have been sent
    (or the processor named its refund), any failure to look it up, a 404 or a 400 included, is
    an unknown outcome: retried, and the reservation kept, never recorded as failed."""
    if exc.transient or (execution.sent_at is None and execution.processor_refund_id is None):
        return exc
    return ProcessorTimeout(
        "lookup_failed",
        f"Looking the refund up failed ({exc.code}: {exc.message}); it may have been made, "
        "so it is looked up again.",
    )


# Beyond the processor's timeout, how long a create sent by another process may still be
# answered (clocks of replicas a little apart, a reply on its way).
SEND_MARGIN_SECONDS = 5.0


class _ModeChanged(Exception):
    """An automatic refund whose mode is no longer `supervised`, caught before its create."""


def _in_flight_since(desk: Desk, looked_at: datetime) -> datetime:
    """A create sent after this may still be in flight when the lookup at `looked_at` ran
    (the processor lists a refund once its create has answered or timed out)."""
    return looked_at - timedelta(seconds=desk.processor.timeout_seconds + SEND_MARGIN_SECONDS)


def _send(desk: Desk, execution: Execution, looked_at: datetime) -> datetime | None:
    """The barrier before a create, one short write transaction on every path (inline, the
    execute job, a retry after a lease ran out):

    - the execution is marked sent (`sent_at`), only while it is still reserved and no create
      of it sent before the lookup at `looked_at` can still be in flight (another replica that
      took the job over waits: `RetryLater`); so at most one create per execution is ever in
      flight, whatever the leases did, and the lookup before it saw every earlier one;
    - then the pause and the mode are read afresh with the control row locked (`FOR SHARE`;
      SQLite's one writer): a pause, a mode change or a breaker trip writes that row, so it
      committed before this read, and stops the create, or commits after this transaction,
      and the create was under way before it. A reservation the policy made alone pays only
      in `supervised` mode; once a person approved the case it pays in every mode.

    Returns the mark (`sent_at`), or None if the execution is no longer reserved. Raises
    RetryLater (paused, or an earlier create may be in flight) or `_ModeChanged`, writing
    nothing."""
    sent_at = desk.now()
    with desk.db.write() as session:
        marked = session.connection().execute(
            update(Execution)
            .where(
                col(Execution.id) == execution.id,
                col(Execution.status) == case_facts.OPEN_EXECUTION,
                or_(
                    col(Execution.sent_at).is_(None),
                    col(Execution.sent_at) <= _in_flight_since(desk, looked_at),
                ),
            )
            .values(sent_at=sent_at)
        )
        if not marked.rowcount:
            row = session.get(Execution, execution.id)
            if row is None or row.status != case_facts.OPEN_EXECUTION or row.sent_at is None:
                return None
            wait = (row.sent_at - _in_flight_since(desk, looked_at)).total_seconds()
            raise RetryLater(
                max(1.0, wait), "a create of this refund may still be in flight", failed=False
            )
        switches = breaker.switches_shared(session)
        if switches.paused:
            raise RetryLater(PAUSED_RECHECK_SECONDS, "paused: the kill switch is on", failed=False)
        if execution.automatic and switches.mode != "supervised":
            case = session.get(Case, execution.case_id)
            if case is None or not _human_basis(session, case):
                raise _ModeChanged(
                    f"Automatic execution is off (mode {switches.mode}); a person must "
                    "approve. Nothing was sent to the processor."
                )
    return sent_at


def _answered(desk: Desk, execution_id: str, sent_at: datetime) -> None:
    """The create marked at `sent_at` came back with an error or a timeout, so it is in flight
    no more: its own mark moves back to end now. A lookup from now on sees it; one made before
    this answer (a replica that took the job over) still waits and looks again."""
    ended = _in_flight_since(desk, desk.now())
    with desk.db.write() as session:
        session.execute(
            update(Execution)
            .where(
                col(Execution.id) == execution_id,
                col(Execution.status) == case_facts.OPEN_EXECUTION,
                col(Execution.sent_at) == sent_at,
            )
            .values(sent_at=ended)
        )


def _back_to_person(desk: Desk, execution_id: str, looked_at: datetime, reason: str) -> None:
    """An automatic refund reserved before the mode changed, never sent: the reservation is
    released and the case parked for a person, who may approve it (a person's approval pays
    in every mode)."""
    with desk.db.write() as session:
        row = session.get(Execution, execution_id)
        if row is None:
            return
        case = load_for_update(session, row.case_id)
        session.refresh(row)
        if (
            row.status != case_facts.OPEN_EXECUTION
            or _may_be_in_flight(desk, row, looked_at)
            or case.status != Status.executing
        ):
            return  # settled meanwhile, or sent by another process: the job looks again
        _mark_released(desk, session, case, row, reason)
        case.park_reason = reason
        move(session, desk.audit, case, Status.parked, actor=SYSTEM, payload={"reason": reason})


def _correlation(execution: Execution) -> dict[str, str]:
    """The case's correlation id, as the job running it has it (the processor shows it too)."""
    case_id, correlation_id = logs.current()
    return (
        {"correlation_id": correlation_id}
        if correlation_id and case_id == execution.case_id
        else {}
    )


# ---------------------------------------------------------------- phase 3: record


def _record(
    desk: Desk, execution: Execution, refund: ProcessorRefund, *, job: ClaimedJob | None = None
) -> None:
    """Phase 3; a final answer also ends `job` (the execute job) in this commit."""
    with desk.db.write() as session:
        # The case row first: a webhook and the execute job may record the same refund at once.
        case = load_for_update(session, execution.case_id)
        if job is not None and refund.status in FINAL_REFUND_STATES:
            desk.jobs.finish_in(session, job)
        row = session.get(Execution, execution.id)
        if row is None or row.status != case_facts.OPEN_EXECUTION:
            return
        changed = (row.processor_refund_id, row.processor_status) != (refund.id, refund.status)
        row.processor_refund_id, row.processor_status = refund.id, refund.status
        if case.status in (Status.denied, Status.refunded):
            _record_on_closed_case(desk, session, case, row, refund)
            return
        if case.status in (Status.approved, Status.parked):
            # A reservation made before the case was parked (or re-approved) has an answer now:
            # the case follows its execution again, whatever that answer is.
            move(
                session,
                desk.audit,
                case,
                Status.executing,
                actor=SYSTEM,
                action="execution.resumed",
                payload={"execution_id": row.id},
            )
        if refund.status == "succeeded":
            row.status, row.finished_at = "succeeded", desk.now()
            breaker.record_success(session)
            say = (case.decision or {}).get("say") if row.automatic else None
            case.customer_message = say or DEFAULT_REFUNDED.format(
                amount=money.format_money(row.amount, row.currency)
            )
            session.add(row)
            move(
                session,
                desk.audit,
                case,
                Status.refunded,
                actor=SYSTEM,
                action="execution.succeeded",
                payload={
                    "execution_id": row.id,
                    "refund_id": refund.id,
                    "amount": row.amount,
                    "currency": row.currency,
                },
            )
            if row.automatic:  # a share of automatic refunds goes to a person afterwards
                sample_for_review(desk, session, case)
            _refresh_waiting_cards(session, case)
        elif refund.status in ("failed", "canceled"):
            _mark_failed(
                desk,
                session,
                case,
                row,
                f"refund_{refund.status}",
                f"The processor reports the refund {refund.status}.",
            )
        elif changed:  # pending / requires_action: on the record once per status, not per poll
            session.add(row)
            on_record(
                session,
                desk.audit,
                case,
                "execution.pending",
                SYSTEM,
                {"execution_id": row.id, "refund_id": refund.id, "status": refund.status},
            )


def _record_on_closed_case(
    desk: Desk, session: Session, case: Case, row: Execution, refund: ProcessorRefund
) -> None:
    """A reservation of a case already closed otherwise (records made before resolve-first):
    the execution takes the processor's answer, and money out on a closed case is a finding
    for finance, never a silent `denied`."""
    if refund.status not in FINAL_REFUND_STATES:
        session.add(row)
        return
    row.status = "succeeded" if refund.status == "succeeded" else "failed"
    row.finished_at = desk.now()
    session.add(row)
    payload = {
        "execution_id": row.id,
        "refund_id": refund.id,
        "amount": row.amount,
        "currency": row.currency,
        "status": refund.status,
        "case_status": case.status,
    }
    on_record(session, desk.audit, case, "execution.settled_after_close", SYSTEM, payload)
    if refund.status == "succeeded" and case.status == Status.denied:
        notify(
            session,
            event="finance.finding",
            case_id=case.id,
            kind="refund_on_denied_case",
            detail=f"Refund {refund.id} of {money.format_money(row.amount, row.currency)} "
            "left for a case that is denied.",
        )


def _fail(desk: Desk, case_id: str, execution: Execution | None, code: str, message: str) -> None:
    with desk.db.write() as session:
        case = load_for_update(session, case_id)
        row = session.get(Execution, execution.id) if execution else None
        if case.status == Status.approved and row is None:
            case.park_reason = f"The refund could not be started: {message} ({code})"
            move(
                session,
                desk.audit,
                case,
                Status.parked,
                actor=SYSTEM,
                action="execution.refused",
                payload={"code": code},
            )
            return
        if row is not None and row.status == case_facts.OPEN_EXECUTION:
            _mark_failed(desk, session, case, row, code, message)


_WAITING_ON_PAYMENT = select(col(Case.id)).where(
    col(Case.payment_id) == bindparam("payment_id"),
    col(Case.id) != bindparam("case_id"),
    or_(col(Case.status) == Status.awaiting_approval, col(Case.status) == Status.parked),
)


def _refresh_waiting_cards(session: Session, case: Case) -> None:
    """Money left the payment: the other cases waiting on it show what is still refundable."""
    # other cases: none of them is changed in this transaction
    others = {"payment_id": case.payment_id, "case_id": case.id}
    for other in session.connection().execute(_WAITING_ON_PAYMENT, others).scalars():
        notify(session, event="case.payment_changed", case_id=other)


def _mark_failed(
    desk: Desk, session: Session, case: Case, row: Execution, code: str, message: str
) -> None:
    row.status, row.finished_at = "failed", desk.now()
    row.error_code, row.error_message = code, message
    session.add(row)
    move(
        session,
        desk.audit,
        case,
        Status.failed,
        actor=SYSTEM,
        action="execution.failed",
        payload={"execution_id": row.id, "code": code},
    )
    case.park_reason = f"The refund failed: {message} ({code}). A person must decide what next."
    move(session, desk.audit, case, Status.parked, actor=SYSTEM, payload={"code": code})


def _park_waiting(desk: Desk, case_id: str, reason: str) -> None:
    """Park a case that has not reached the processor, or whose outcome a person must settle.
    An open reservation is looked up (a `resolve` job): money may have left already."""
    with desk.db.write() as session:
        case = load_for_update(session, case_id)
        if case.status not in (Status.approved, Status.executing):
            return
        case.park_reason = reason
        move(session, desk.audit, case, Status.parked, actor=SYSTEM, payload={"reason": reason})
        execution = _open_execution(session, case_id)
        if execution is not None:
            enqueue(
                session,
                kind=EXECUTE,
                payload={"case_id": case.id, "resolve": execution.id},
                dedupe_key=f"resolve:{execution.id}:{case.revision}",
                due_at=clock.now() + timedelta(seconds=RESOLVE_AFTER_SECONDS),
            )


# ---------------------------------------------------------------- resolving a reservation


def resolve(desk: Desk, execution_id: str) -> str:
    """Settle by lookup an open reservation of a case no executor is working on: a refund the
    processor has is recorded; with none, a parked case's reservation is released. Returns
    `settled` (nothing open), `recorded`, `released` or `open` (the executor owns it)."""
    with desk.db.read() as session:
        row = session.get(Execution, execution_id)
    if row is None or row.status != case_facts.OPEN_EXECUTION:
        return "settled"
    looked_at = desk.now()
    refund = _lookup(desk, row)
    if refund is not None:
        _record(desk, row, refund)
        return "recorded"
    return "released" if _release(desk, row.id, looked_at) else "open"


def _lookup(desk: Desk, execution: Execution) -> ProcessorRefund | None:
    """The processor's refund for this execution, or None when it holds none: by its id once
    known (pending), else by our execution id among the payment's refunds. A refund the
    processor answered once is never "none": not found now is an unknown outcome."""
    if execution.processor_refund_id:
        try:
            return desk.processor.retrieve_refund(execution.processor_refund_id)
        except RefundNotFound:
            raise ProcessorTimeout(
                "refund_not_found_now",
                f"The processor answered refund {execution.processor_refund_id} before and "
                "cannot find it now; it is looked up again.",
            ) from None
    for refund in desk.processor.list_refunds(execution.payment_id):
        if refund.metadata.get("execution_id") == execution.id:
            return refund
    return None


def _release(desk: Desk, execution_id: str, looked_at: datetime) -> bool:
    with desk.db.write() as session:
        row = session.get(Execution, execution_id)
        if row is None:
            return False
        case = load_for_update(session, row.case_id)
        session.refresh(row)
        # Only a parked case: an approved or executing one belongs to its executor. Never a
        # reservation whose create may still have been in flight when the lookup ran.
        if (
            row.status != case_facts.OPEN_EXECUTION
            or case.status != Status.parked
            or _may_be_in_flight(desk, row, looked_at)
        ):
            return False
        _mark_released(
            desk, session, case, row, "The processor has no refund for this execution; released."
        )
        case.park_reason = (
            f"The processor has no refund of {money.format_money(row.amount, row.currency)} "
            "for this case: nothing was paid and the reservation is released. "
            "A person may decide again."
        )
        case.approval_round += 1  # approvals start afresh
        new_revision(session, case)
        notify(session, event="case.parked", case_id=case.id)
        return True


def _may_be_in_flight(desk: Desk, row: Execution, looked_at: datetime) -> bool:
    """A create of `row` may still have been in flight when the lookup at `looked_at` ran."""
    return row.sent_at is not None and row.sent_at > _in_flight_since(desk, looked_at)


def _mark_released(desk: Desk, session: Session, case: Case, row: Execution, why: str) -> None:
    """The reservation ends with nothing paid (the processor holds no refund of it)."""
    row.status, row.finished_at = "failed", desk.now()
    row.error_code, row.error_message = "released", why
    session.add(row)
    on_record(
        session,
        desk.audit,
        case,
        "execution.released",
        SYSTEM,
        {"execution_id": row.id, "amount": row.amount, "currency": row.currency},
    )


# ---------------------------------------------------------------- later news from the processor


def settle(desk: Desk, refund: ProcessorRefund) -> str:
    """Apply what the processor now says about one of our refunds (a webhook, reconciliation):
    an open execution is recorded; a success now failed or canceled reopens its case for a
    person (nothing is re-sent). Returns `recorded`, `reversed`, `unchanged` or `not_ours`."""
    execution_id = refund.metadata.get("execution_id")
    with desk.db.read() as session:
        row = session.get(Execution, execution_id) if execution_id else None
        if row is None:
            row = session.scalars(
                select(Execution).where(col(Execution.processor_refund_id) == refund.id)
            ).first()
    if row is None:
        return "not_ours"
    if row.status == case_facts.OPEN_EXECUTION:
        _record(desk, row, refund)
        return "recorded"
    if row.status == "succeeded" and refund.status in ("failed", "canceled"):
        return "reversed" if _reverse(desk, row.id, refund) else "unchanged"
    return "unchanged"


def _reverse(desk: Desk, execution_id: str, refund: ProcessorRefund) -> bool:
    with desk.db.write() as session:
        row = session.get(Execution, execution_id)
        if row is None:
            return False
        case = load_for_update(session, row.case_id)
        session.refresh(row)
        if row.status != "succeeded":
            return False
        code = f"refund_{refund.status}"
        row.status, row.processor_status = "failed", refund.status
        row.error_code = code
        row.error_message = f"The processor reported the refund {refund.status} after it succeeded."
        session.add(row)
        payload = {"execution_id": row.id, "refund_id": refund.id, "status": refund.status}
        if case.status != Status.refunded:
            on_record(session, desk.audit, case, "execution.reversed", SYSTEM, payload)
            return True
        case.park_reason = (
            f"The processor reports refund {refund.id} of "
            f"{money.format_money(row.amount, row.currency)} {refund.status} after it had "
            "succeeded: the customer did not get the money. Nothing is re-sent automatically; "
            "a person must decide what next."
        )
        move(
            session,
            desk.audit,
            case,
            Status.parked,
            actor=SYSTEM,
            action="execution.reversed",
            payload={**payload, "code": code},
        )
        return True
