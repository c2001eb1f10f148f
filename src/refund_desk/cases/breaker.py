"""The circuit breaker: automatic refunds stop themselves when something looks wrong.

Too many processor failures in a row, or automatic refunds or money per hour over the
policy's `breaker` limits, switch the mode to `approve-all` and tell the leads; the switch,
its reason and its audit record commit together.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, func, or_, select, update
from sqlmodel import Session, col

from refund_desk import clock, money
from refund_desk.cases.notify import notify
from refund_desk.governance.versions import LoadedPolicy, control, load_version
from refund_desk.storage.audit import SYSTEM
from refund_desk.storage.models import Control, Execution
from refund_desk.text import Code, Mark, Person, join, text

if TYPE_CHECKING:
    from refund_desk.cases.desk import Desk

WINDOW = timedelta(hours=1)


def _active(session: Session) -> LoadedPolicy | None:
    version = control(session).active_version
    return load_version(session, version) if version else None


def trip(desk: Desk, session: Session, reason: str) -> None:
    switches = control(session)
    if switches.mode != "supervised":
        return  # already stopped (or never automatic): nothing to switch
    switches.mode = "approve-all"
    switches.breaker_tripped_at = clock.now()
    switches.breaker_reason = reason
    switches.consecutive_failures = 0
    switches.updated_at = clock.now()
    session.add(switches)
    policy = _active(session)
    leads = list(policy.doc.leads) if policy and policy.doc.leads else []
    desk.audit.append(
        session,
        action="breaker.tripped",
        actor=SYSTEM,
        policy_version=switches.active_version,
        payload={"reason": reason, "mode": "approve-all"},
    )
    mentions = join(" ", [Person(u) for u in leads]) or text("Leads")
    notify(
        session,
        event="policy.notice",
        channel="policy",
        text=text(
            Mark("alert"),
            " ",
            mentions,
            f": automatic refunds stopped ({reason}). Every refund now needs a person; ",
            Code("/refund-policy mode supervised"),
            " turns them back on.",
        ),
    )


def record_failure(desk: Desk, reason: str) -> None:
    """One more processor failure in a row; trips the breaker at the policy's limit."""
    with desk.db.write() as session:
        failures = session.scalar(
            update(Control)
            .where(col(Control.id) == 1)
            .values(consecutive_failures=col(Control.consecutive_failures) + 1)
            .returning(col(Control.consecutive_failures))
        )
        policy = _active(session)
        limit = policy.doc.breaker.max_failures_in_row if policy and policy.doc.breaker else None
        if limit is not None and failures is not None and failures >= limit:
            trip(desk, session, f"the processor failed {failures} times in a row ({reason})")


def record_success(session: Session) -> None:
    switches = control(session)
    if switches.consecutive_failures:
        switches.consecutive_failures = 0
        session.add(switches)


# Built once (SQLAlchemy reuses their compiled form).
_LOCK_CONTROL = (
    select(Control)
    .where(col(Control.id) == 1)
    .with_for_update()
    .execution_options(populate_existing=True)
)
_AUTOMATIC_IN_WINDOW = select(
    func.count(), func.coalesce(func.sum(col(Execution.amount)), 0)
).where(
    col(Execution.automatic).is_(True),
    or_(col(Execution.status) == "reserved", col(Execution.status) == "succeeded"),
    col(Execution.currency) == bindparam("currency"),
    col(Execution.created_at) >= bindparam("since"),
)


def lock_switches(session: Session) -> Control:
    """The control row read afresh and locked until the transaction ends (`FOR UPDATE`; on
    SQLite the one writer): a pause, a mode change or a trip committed while this waited is in
    what this returns, and `control(session)` gives the same row for the rest of it."""
    row: Control = session.scalars(_LOCK_CONTROL).one()  # the migration seeds it
    return row


_SWITCHES_SHARED = (
    select(col(Control.paused), col(Control.mode)).where(col(Control.id) == 1)
).with_for_update(read=True)


def switches_shared(session: Session) -> Any:
    """The pause and the mode as committed now, the control row held shared until the
    transaction ends (`FOR SHARE`: creates do not wait for each other, and a pause, a mode
    change or a trip, which write the row, wait for them): the pay step's barrier."""
    return session.execute(_SWITCHES_SHARED).one()


def over_limit(
    session: Session, policy: LoadedPolicy | None, amount: int, currency: str
) -> str | None:
    """Would one more automatic refund of `amount` break the hourly limits? Says why. The
    switches are locked first, limits or not: replicas count and reserve one at a time."""
    lock_switches(session)
    breaker = policy.doc.breaker if policy else None
    if breaker is None or policy is None:
        return None
    session.flush()
    window = {"currency": currency, "since": clock.now() - WINDOW}
    count, total = session.connection().execute(_AUTOMATIC_IN_WINDOW, window).one()
    if breaker.max_refunds_per_hour is not None and count + 1 > breaker.max_refunds_per_hour:
        return f"more than {breaker.max_refunds_per_hour} automatic refunds in an hour"
    if breaker.max_amount_per_hour is not None and currency == policy.doc.currency:
        limit = money.to_minor(breaker.max_amount_per_hour, currency)
        if total + amount > limit:
            return (
                f"more than {money.format_money(limit, currency)} refunded automatically in an hour"
            )
    return None
