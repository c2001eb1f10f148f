"""A model-based search for the next broken promise (issue 13).

Hypothesis drives one desk through random interleavings of everything that can happen to it:
requests (duplicates, tier-4 customers, amounts over what is left), advisor failures,
processor faults (`down`, `timeout-after-success`, `decline`, `crash-after-success`), clicks
by random users (approve, partial with random amounts, deny, escalate, replays of used
buttons, stale buttons), publish, rollback, pause and resume, mode changes, the second-lead
rule, sweeps with time jumps past leases and SLAs, repeated and out-of-order webhooks,
reconciliation, and the customer's erasure (after which none of their words reads back).
After every step the invariants are checked against the processor's ledger:

- money out per payment is at most what was captured; each execution id has at most one
  refund at the processor;
- per case, money out is the amount of its last valid approval (or automatic decision), and
  only for a refunded case or one whose refund is still being resolved; a denied case has no
  money out unless the record says so (a reconciliation finding);
- every approval that paid was allowed by the policy version and group the case was decided
  under: live membership, within the limit, never the requester, two distinct approvers at
  tier 4; automatic refunds only where the policy decided so;
- the audit chain verifies;
- at the end, with the processor healthy and time run forward, every case rests where a
  person or the customer hears of it.

Bounded in the normal run (SQLite; a smaller run on PostgreSQL, marked `postgres`); a longer
run with `REFUND_DESK_DEEP=1` (or `-m deep`). Counterexamples it finds are kept as plain tests
at the end of this file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings, target
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import func, select
from sqlmodel import col

from refund_desk import clock, money
from refund_desk.cases import approvals, breaker, executor, tokens
from refund_desk.cases.errors import CaseError
from refund_desk.cases.ports import (
    ProcessorError,
    ProcessorTimeout,
)
from refund_desk.customers import erasure
from refund_desk.governance import admin
from refund_desk.governance.versions import load_version
from refund_desk.payments.reconcile import reconcile
from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.policy import approver_limit
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor, verify_chain
from refund_desk.storage.models import (
    Approval,
    AuditRecord,
    Case,
    Control,
    Execution,
    Job,
    ProcessorFinding,
    SandboxPayment,
    SandboxRefund,
)
from tests.conftest import (
    TEST_SECRET,
    PgDatabases,
    SimulatedCrash,
    _pg_test_url,
    fresh_sqlite,
    make_runtime,
)
from tests.helpers import ACME, CUSTOMER, FailingAdvisor, Harness
from tests.safety.test_barriers import creates

DEEP = os.environ.get("REFUND_DESK_DEEP", "").lower() in ("1", "true", "yes")
# REFUND_DESK_STATS=1 prints what the runs did (examples, cases by status, refunds, steps).
STATS: dict[str, int] | None = (
    {"examples": 0, "cases": 0, "refunds": 0, "steps": 0}
    if os.environ.get("REFUND_DESK_STATS")
    else None
)
USERS = ("U0LEAD1", "U0LEAD2", "U0FIN1", "U0FIN2", "U0MGR1", "U0OTHER")
LEADS = ("U0LEAD1", "U0LEAD2")
POLICY = ACME.read_text().replace("leads: [U0LEAD1]", "leads: [U0LEAD1, U0LEAD2]")
# A second version: smaller limits, another say; the cases keep the version they started with.
POLICY_B = POLICY.replace("limit: 500}", "limit: 300}").replace("limit: 5000,", "limit: 700,")
FAULTS = ("down", "timeout-after-success", "decline", "crash-after-success")


def _money_out(session: Any, *, case_id: str | None = None) -> dict[str, int]:
    """Succeeded refunds at the processor, by our case id (from the refund's metadata)."""
    out: dict[str, int] = {}
    for refund in session.scalars(select(SandboxRefund)).all():
        if refund.status != "succeeded":
            continue
        key = str((refund.meta or {}).get("case_id"))
        out[key] = out.get(key, 0) + refund.amount
    return out


class DeskMachine(RuleBasedStateMachine):
    make_url: Callable[[], str]  # set per test: a fresh, migrated database per example

    def __init__(self) -> None:
        super().__init__()
        self.runtime: Runtime = make_runtime(self.make_url())
        self.desk = Harness(self.runtime)
        sandbox = self.desk.sandbox
        self.real_advisor = self.runtime.desk.advisor
        self.then_down = False
        self.max_unresolved = 0
        create = sandbox.create_refund

        def create_refund(**kw: Any) -> Any:
            try:
                return create(**kw)
            except ProcessorTimeout:
                if self.then_down:
                    self.then_down = False
                    sandbox.set_fault("down")
                raise

        sandbox.create_refund = create_refund  # type: ignore[method-assign]
        self._between_the_steps(sandbox)
        self.payments: list[str] = []
        self.cases: list[str] = []
        self.used_tokens: list[str] = []
        self.stale_tokens: list[str] = []
        self.steps = 0

    def teardown(self) -> None:
        # Steer the search towards the rare states where two failure paths meet.
        if currently_in_test_context():
            target(float(self.max_unresolved), label="parked cases with an unresolved refund")
        try:
            self._everyone_hears()
        finally:
            executor._recheck = self.real_recheck  # type: ignore[assignment]
            if STATS is not None:
                with self.runtime.db.read() as session:
                    statuses = [c.status for c in session.scalars(select(Case)).all()]
                    refunds = session.scalar(select(func.count()).select_from(SandboxRefund))
                STATS["examples"] += 1
                STATS["unresolved_seen"] = STATS.get("unresolved_seen", 0) + bool(
                    self.max_unresolved
                )
                STATS["cases"] += len(statuses)
                STATS["refunds"] += refunds or 0
                for status in statuses:
                    STATS[status] = STATS.get(status, 0) + 1
            self.runtime.db.dispose()

    # ------------------------------------------------------------ between a refund's steps

    def _between_the_steps(self, sandbox: SandboxProcessor) -> None:
        """Hooks at the steps of one refund where another process may commit: right after the
        read of the payment at the processor (before the payment's lock), inside the
        reservation's transaction (its checks, before the switches' lock; PostgreSQL only: on
        SQLite that transaction holds the one writer) and right after the lookup that comes
        before the create. `meanwhile` arms
        one; every create checks that it was sent on the switches as committed."""
        self.armed: tuple[str, str] | None = None
        self.firing = False
        self.breaches: list[str] = []
        self.on_sqlite = self.runtime.db.is_sqlite
        read, lookup, create = sandbox.payment, sandbox.list_refunds, sandbox.create_refund
        self.real_recheck = executor._recheck

        def payment(payment_id: str, **kw: Any) -> Any:
            facts = read(payment_id, **kw)
            self._fire("payment-read")  # the facts are read; the payment is not locked yet
            return facts

        def list_refunds(payment_id: str) -> Any:
            found = lookup(payment_id)
            self._fire("lookup")  # the lookup is done; the create comes next
            return found

        def recheck(*args: Any, **kwargs: Any) -> Any:
            self._fire("reservation")
            return self.real_recheck(*args, **kwargs)

        def create_refund(**kw: Any) -> Any:
            self._sent_as_committed(kw["metadata"]["execution_id"], kw["payment_id"], kw["amount"])
            return create(**kw)

        sandbox.payment = payment  # type: ignore[method-assign]
        sandbox.list_refunds = list_refunds  # type: ignore[method-assign]
        sandbox.create_refund = create_refund  # type: ignore[method-assign]
        executor._recheck = recheck  # type: ignore[assignment]

    def _sent_as_committed(self, execution_id: str, payment_id: str, amount: int) -> None:
        """Each create, as it is sent, against what is committed: no create while a pause
        has committed, none for an automatic refund once the mode (or a breaker trip) stopped
        automatic refunds, and none for more than the processor has left on the payment (a
        processor that did not check would pay it). A breach is kept for `barrier_held`: the
        job that sent it would only retry."""
        with self.runtime.db.read() as session:
            switches = session.get(Control, 1)
            execution = session.get(Execution, execution_id)
            payment = session.get(SandboxPayment, payment_id)
            refunds = session.scalars(
                select(SandboxRefund).where(col(SandboxRefund.payment_id) == payment_id)
            ).all()
        assert switches is not None and execution is not None and payment is not None
        left = payment.amount - sum(r.amount for r in refunds if r.status == "succeeded")
        if switches.paused:
            self.breaches.append(f"{execution_id} sent to the processor while paused")
        if execution.automatic and switches.mode != "supervised":
            self.breaches.append(f"{execution_id}: automatic, sent in mode {switches.mode}")
        if amount > left and execution_id not in {r.meta.get("execution_id") for r in refunds}:
            self.breaches.append(f"{execution_id}: {amount} asked, {left} left at the processor")

    def _fire(self, at: str) -> None:
        if self.armed is None or self.armed[1] != at or self.firing:
            return
        change, _ = self.armed
        self.armed, self.firing = None, True
        try:
            if change == "pause":
                self._gov(admin.set_paused, "U0LEAD1", paused=True)
            elif change == "trip":
                with self.runtime.db.write() as session:
                    breaker.trip(self.runtime.desk, session, "another replica: over the limit")
            elif change == "approve-all":
                with self.runtime.db.write() as session:
                    admin.set_mode(
                        session, self.runtime.desk.audit, mode="approve-all", actor=Actor("cli")
                    )
            else:  # another case's refund, carried through by another worker
                with self.runtime.db.read() as session:
                    pending = session.scalars(  # the oldest: not the one running now
                        select(col(Job.id))
                        .where(col(Job.kind) == executor.EXECUTE, col(Job.status) == "pending")
                        .order_by(col(Job.id))
                    ).all()
                for job in pending[:1]:
                    self._guard(lambda job=job: self.runtime.desk.jobs.run_now(job))
        finally:
            self.firing = False

    @rule(
        change=st.sampled_from(["pause", "trip", "approve-all", "another-refund"]),
        at=st.sampled_from(["payment-read", "reservation", "lookup"]),
    )
    def meanwhile(self, change: str, at: str) -> None:
        """Another process commits `change` at the next refund step `at`: between the steps
        of one refund, not only between refunds."""
        if at == "reservation" and (self.on_sqlite or change == "another-refund"):
            at = "lookup"  # (another refund inside it would wait on the payment's lock)
        self.armed = (change, at)

    # ------------------------------------------------------------ helpers

    def _guard(self, fn: Callable[[], Any]) -> Any:
        """Run something that may run jobs; a simulated power cut leaves its lease behind."""
        try:
            return fn()
        except SimulatedCrash:
            return None

    def _gov(self, fn: Callable[..., Any], user: str, **kw: Any) -> None:
        try:
            with self.runtime.db.write() as session:
                fn(session, self.runtime.desk.audit, actor=Actor("human", user), **kw)
        except CaseError:
            pass

    # ------------------------------------------------------------ set-up

    @initialize()
    def publish_first(self) -> None:
        with self.runtime.db.write() as session:
            from refund_desk.governance.versions import publish

            publish(session, self.runtime.desk.audit, source=POLICY, actor=Actor("cli", "admin"))

    # ------------------------------------------------------------ customers

    @rule(
        pick=st.integers(0, 10**6),
        new=st.sampled_from([True, True, False]),
        captured=st.sampled_from(["30.00", "100.00", "900.00", "900.00"]),
        chargebacks=st.sampled_from([0, 0, 0, 1]),
        amount=st.sampled_from(["10.00", "20.00", "45.00", "250.00", "400.00", "600.00"]),
        reason=st.sampled_from([None, "damaged", "damaged"]),
    )
    def request(
        self,
        pick: int,
        new: bool,
        captured: str,
        chargebacks: int,
        amount: str,
        reason: str | None,
    ) -> None:
        """A customer asks: on a new payment, or again on one already asked about."""
        if new or not self.payments:
            self.payments.append(self.desk.payment(captured, chargebacks=chargebacks))
            payment = self.payments[-1]
        else:
            payment = self.payments[pick % len(self.payments)]
        extra = {"reason": reason} if reason else {}
        response = self._guard(lambda: self.desk.post(self.desk.request(payment, amount, **extra)))
        if response is not None and response.status_code in (200, 201):
            case_id = response.json()["id"]
            if case_id not in self.cases:
                self.cases.append(case_id)
        elif response is None:  # the power cut came after the case was written: find it
            with self.runtime.db.read() as session:
                for case_id in session.scalars(select(col(Case.id))).all():
                    if case_id not in self.cases:
                        self.cases.append(case_id)

    @rule(
        pick=st.integers(0, 10**6),
        new=st.booleans(),
        amount=st.sampled_from(["20.00", "45.00", "400.00"]),
    )
    def request_small_or_large(self, pick: int, new: bool, amount: str) -> None:
        self.request(pick, new, "900.00", 0, amount, "damaged")

    @rule()
    def erase(self) -> None:
        """The customer asks to be forgotten, between any two steps: their cases keep their
        record and their money, and none of their words stays readable."""
        vault = self.runtime.desk.vault
        try:
            self._guard(
                lambda: erasure.erase_customer(
                    self.runtime.desk, CUSTOMER, actor=Actor("cli", "privacy"), evidence=None
                )
            )
        except CaseError:  # nothing of theirs is held
            return
        with self.runtime.db.read() as session:
            for case in session.scalars(select(Case)).all():  # every case so far is theirs
                assert vault.decrypt(case.message_enc, session=session) is None, case.id

    @rule(
        what=st.sampled_from(
            [*FAULTS, *["timeout-then-down", "heal"] * 2, "advisor-fails", "advisor-works"]
        ),
        times=st.sampled_from([1, 2, 9, None]),
    )
    def trouble(self, what: str, times: int | None) -> None:
        """The processor fails (or heals); the advisor fails (or works again)."""
        self.then_down = what == "timeout-then-down"
        if what == "heal":
            self.desk.sandbox.set_fault("none")
        elif self.then_down:  # the refund is made, its answer lost, then the processor is down
            self.desk.sandbox.set_fault("timeout-after-success", times=1)
        elif what.startswith("advisor"):
            failing = what == "advisor-fails"
            self.runtime.desk.advisor = FailingAdvisor() if failing else self.real_advisor  # type: ignore[assignment]
        else:
            self.desk.sandbox.set_fault(what, times=times)

    # ------------------------------------------------------------ people

    @precondition(lambda self: self.cases)
    @rule(
        pick=st.integers(0, 10**6),
        waiting_first=st.booleans(),
        action=st.sampled_from(["approve", "approve", "approve_partial", "deny", "escalate"]),
        user=st.sampled_from([*USERS, "member", "member", "member"]),
        partial=st.sampled_from(["5.00", "19.99", "50.00", "300.00", "450.00"]),
        stale=st.sampled_from([False, False, False, True]),
    )
    def click(
        self, pick: int, waiting_first: bool, action: str, user: str, partial: str, stale: bool
    ) -> None:
        """A click on a card: mostly a waiting case, by anyone or by a member of its group."""
        with self.runtime.db.read() as session:
            waiting = session.scalars(
                select(col(Case.id)).where(col(Case.status).in_(["awaiting_approval", "parked"]))
            ).all()
        pool = [c for c in self.cases if c in set(waiting)] if waiting_first else []
        pool = pool or self.cases
        case_id = pool[pick % len(pool)]
        rt = self.runtime.desk
        with self.runtime.db.read() as session:
            case = session.get(Case, case_id)
            assert case is not None
            if user == "member":  # someone of the group the case was decided for
                policy = load_version(session, case.policy_version or 1)
                group = (case.decision or {}).get("approvers") or "support-leads"
                groups = policy.doc.approvers
                members = sorted(groups.get(group, groups["support-leads"]).members)
                user = members[pick % len(members)]
            value = tokens.issue(
                rt.secret,
                case_id=case.id,
                action=action,
                amount=case.amount,
                currency=case.currency,
                revision=case.revision - (1 if stale else 0),
                policy_version=case.policy_version,
                now=rt.now(),
            )
        self._use(value, user, partial if action == "approve_partial" else None)

    @precondition(lambda self: self.cases)
    @rule(pick=st.integers(0, 10**6), user=st.sampled_from([*USERS, "member", "member"]))
    def approve(self, pick: int, user: str) -> None:
        self.click(pick, True, "approve", user, "20.00", False)

    @precondition(lambda self: self.cases)
    @rule(
        pick=st.integers(0, 10**6),
        action=st.sampled_from(["approve", "approve_partial", "deny"]),
        partial=st.sampled_from(["5.00", "19.99", "50.00"]),
    )
    def decide_parked(self, pick: int, action: str, partial: str) -> None:
        """A person settles a parked case (where failure paths meet), as its group's member."""
        with self.runtime.db.read() as session:
            parked = set(
                session.scalars(select(col(Case.id)).where(col(Case.status) == "parked")).all()
            )
        pool = [c for c in self.cases if c in parked]
        if pool:
            self.cases.append(self.cases.pop(self.cases.index(pool[pick % len(pool)])))
            self.click(len(self.cases) - 1, False, action, "member", partial, False)

    @precondition(lambda self: self.used_tokens)
    @rule(pick=st.integers(0, 10**6), user=st.sampled_from(USERS))
    def replay(self, pick: int, user: str) -> None:
        value = self.used_tokens[pick % len(self.used_tokens)]
        self._use(value, user, "20.00")

    def _use(self, value: str, user: str, amount: str | None) -> None:
        rt = self.runtime.desk
        try:
            outcome = approvals.act(rt, token_value=value, user=user, amount=amount)
        except CaseError:
            return
        finally:
            self.used_tokens.append(value)
        for job in outcome.jobs:
            self._guard(lambda job=job: rt.jobs.run_now(job))

    # ------------------------------------------------------------ leads

    @rule(
        what=st.sampled_from(
            ["publish-a", "publish-b", "rollback", "pause", "resume", "mode", "second-lead"]
        ),
        user=st.sampled_from(LEADS),
        version=st.integers(1, 3),
        mode=st.sampled_from(["supervised", "approve-all", "shadow"]),
        on=st.booleans(),
    )
    def govern(self, what: str, user: str, version: int, mode: str, on: bool) -> None:
        from refund_desk.governance.versions import publish

        if what.startswith("publish"):  # as the CLI's admin would
            source = POLICY if what == "publish-a" else POLICY_B
            with contextlib.suppress(CaseError), self.runtime.db.write() as session:
                publish(session, self.runtime.desk.audit, source=source, actor=Actor("cli", "a"))
        elif what == "rollback":
            self._gov(admin.rollback, user, version=version)
        elif what in ("pause", "resume"):
            self._gov(admin.set_paused, user, paused=what == "pause")
        elif what == "mode":
            self._gov(admin.set_mode, user, mode=mode)
        else:
            self._gov(admin.set_second_lead, user, on=on)

    # ------------------------------------------------------------ time, webhooks, reconcile

    @rule(
        ahead=st.sampled_from([0, 30, 600, 3600, 6 * 3600, 3 * 86400]),
        rounds=st.sampled_from([1, 3, 10]),
    )
    def sweep(self, ahead: int, rounds: int) -> None:
        """Time runs forward: past backoffs, leases and SLAs; a sweep runs each job once."""
        for _ in range(rounds):
            self._guard(lambda: self.desk.sweep(seconds_ahead=ahead, batches=5))

    @precondition(lambda self: self.cases)
    @rule(pick=st.integers(0, 10**6))
    def webhook(self, pick: int) -> None:
        """A processor event for one of the refunds, again or late: any order, any number."""
        with self.runtime.db.read() as session:
            stmt = select(SandboxRefund).order_by(col(SandboxRefund.created_at))
            rows = session.scalars(stmt).all()
            refunds = [SandboxProcessor._to_refund(r) for r in rows]
        if not refunds:
            return
        refund = refunds[pick % len(refunds)]
        self._guard(lambda: executor.settle(self.runtime.desk, refund))

    @rule(ahead=st.sampled_from([0, 3600]))
    def reconcile(self, ahead: int) -> None:
        now = clock.now()
        with contextlib.suppress(ProcessorError):
            self._guard(
                lambda: reconcile(
                    self.runtime.desk,
                    since=now - timedelta(days=2),
                    until=now + timedelta(seconds=ahead),
                )
            )

    # ------------------------------------------------------------ invariants

    @invariant()
    def money_is_right(self) -> None:
        if not hasattr(self, "runtime"):
            return
        if STATS is not None:
            STATS["steps"] += 1
        with self.runtime.db.read() as session:
            self._check_money(session)

    def _check_money(self, session: Any) -> None:
        captured = {p.id: p.amount for p in session.scalars(select(SandboxPayment)).all()}
        refunds = session.scalars(select(SandboxRefund)).all()
        per_payment: dict[str, int] = {}
        per_execution: dict[str, int] = {}
        for refund in refunds:
            if refund.status == "succeeded":
                per_payment[refund.payment_id] = (
                    per_payment.get(refund.payment_id, 0) + refund.amount
                )
            ex = (refund.meta or {}).get("execution_id")
            assert ex, "every refund at the processor is ours"
            per_execution[ex] = per_execution.get(ex, 0) + 1
        for payment_id, out in per_payment.items():
            assert out <= captured[payment_id], f"{payment_id}: {out} out of {captured[payment_id]}"
        twice = {ex: n for ex, n in per_execution.items() if n > 1}
        assert not twice, f"executions refunded more than once: {twice}"

        out_by_case = _money_out(session)
        unresolved = 0
        for case in session.scalars(select(Case)).all():
            out = out_by_case.get(case.id, 0)
            execs = session.scalars(
                select(Execution).where(col(Execution.case_id) == case.id)
            ).all()
            open_ = [e for e in execs if e.status == "reserved"]
            unresolved += bool(open_) and case.status == "parked"
            done = [e for e in execs if e.status == "succeeded"]
            if case.status == "refunded":
                assert len(done) == 1, f"{case.id}: refunded with {len(done)} succeeded executions"
                assert out == done[0].amount == case.amount, (
                    f"{case.id}: refunded {case.amount}, execution {done[0].amount}, "
                    f"processor {out}"
                )
                self._check_basis(session, case, done[0])
            elif out:
                finding = session.scalar(
                    select(func.count())
                    .select_from(ProcessorFinding)
                    .where(col(ProcessorFinding.case_id) == case.id)
                )
                noted = session.scalar(
                    select(func.count())
                    .select_from(AuditRecord)
                    .where(
                        col(AuditRecord.case_id) == case.id,
                        col(AuditRecord.action) == "execution.settled_after_close",
                    )
                )
                # Money left and the record does not say refunded yet: only while a
                # reservation of exactly that amount is being resolved, or on the record.
                assert (open_ and out == open_[0].amount) or finding or noted, (
                    f"{case.id} is {case.status} with {out} out at the processor "
                    f"(open: {[e.amount for e in open_]})"
                )
                if open_:
                    self._check_basis(session, case, open_[0])
                assert case.status != "denied" or finding or noted, f"{case.id}: denied, paid"
        self.max_unresolved = max(getattr(self, "max_unresolved", 0), unresolved)

    def _check_basis(self, session: Any, case: Case, execution: Execution) -> None:
        """The refund was allowed: by the policy alone, or by people with the authority."""
        policy = load_version(session, case.policy_version) if case.policy_version else None
        assert policy is not None
        decision = case.decision or {}
        if execution.automatic:
            assert decision.get("outcome") == "approve" and decision.get("automatic"), case.id
            assert not case.possible_duplicate, f"{case.id}: a duplicate paid automatically"
            assert int(decision.get("tier") or 3) <= 2
            return
        rows = session.scalars(
            select(Approval)
            .where(col(Approval.case_id) == case.id, col(Approval.decision) == "approve")
            .order_by(col(Approval.id))
        ).all()
        assert rows, f"{case.id}: paid by a person without an approval on record"
        last_round = max(r.round for r in rows)
        round_ = [r for r in rows if r.round == last_round]
        people = {r.approver for r in round_}
        tier = int(decision.get("tier") or 3)
        assert len(people) >= (2 if tier >= 4 else 1), f"{case.id}: {people} at tier {tier}"
        assert case.requested_by not in people
        assert round_[-1].amount == execution.amount, (
            f"{case.id}: paid {execution.amount}, last approval {round_[-1].amount}"
        )
        group = decision.get("approvers") or policy.doc.approvers_for(policy.doc.default)
        members = policy.doc.approvers[group].members if group in policy.doc.approvers else []
        managers = policy.doc.managers.members if policy.doc.managers else []
        # A person's escalation hands the case to the managers alone: approvals after it are
        # theirs (an SLA escalation only adds the managers beside the group).
        handed_at = session.scalar(
            select(func.min(col(Approval.id))).where(
                col(Approval.case_id) == case.id, col(Approval.decision) == "escalate"
            )
        )
        for approval in round_:
            if handed_at is not None and approval.id is not None and approval.id > handed_at:
                assert approval.approver in managers, (
                    f"{case.id}: {approval.approver} approved after a person's escalation"
                )
            assert approval.approver in members or (
                approval.approver in managers and case.escalation_level > 0
            ), f"{case.id}: {approval.approver} is not in {group}"
            limits = []
            if approval.approver in members:
                limits.append(approver_limit(policy.doc, group))
            if approval.approver in managers and policy.doc.managers is not None:
                limits.append(money.to_minor(policy.doc.managers.limit, policy.doc.currency))
            assert execution.currency == policy.doc.currency
            assert approval.amount is not None and approval.amount <= max(limits), case.id

    @invariant()
    def barrier_held(self) -> None:
        assert not getattr(self, "breaches", []), self.breaches

    @invariant()
    def record_verifies(self) -> None:
        if not hasattr(self, "runtime"):
            return
        with self.runtime.db.read() as session:
            result = verify_chain(TEST_SECRET, session)
        assert result.ok, result.problem

    def _everyone_hears(self) -> None:
        """With the processor healthy and time run forward, every case rests where a person
        or the customer hears of it; and the money still adds up."""
        self.armed = None  # no other process's change is still to come
        self.desk.sandbox.set_fault("none")
        with self.runtime.db.write() as session:
            admin.set_paused(session, self.runtime.desk.audit, paused=False, actor=Actor("cli"))
        for ahead in (3600, 86400, 3 * 86400, 7 * 86400):
            self._guard(lambda ahead=ahead: self.desk.sweep(seconds_ahead=ahead, batches=20))
        now = clock.now()
        reconcile(self.runtime.desk, since=now - timedelta(days=2), until=now + timedelta(days=1))
        self._guard(lambda: self.desk.sweep(seconds_ahead=7 * 86400, batches=20))
        with self.runtime.db.read() as session:
            self._check_money(session)
            stuck = {
                c.id: c.status
                for c in session.scalars(select(Case)).all()
                if c.status not in ("refunded", "denied", "awaiting_approval", "parked")
            }
            why = {
                case_id: (
                    [
                        (e.status, e.automatic, e.sent_at, e.error_code)
                        for e in session.scalars(
                            select(Execution).where(col(Execution.case_id) == case_id)
                        ).all()
                    ],
                    [
                        (j.kind, j.status, j.due_at, j.lease_expires_at, j.last_error)
                        for j in session.scalars(select(Job)).all()
                        if (j.payload or {}).get("case_id") == case_id
                    ],
                )
                for case_id in stuck
            }
        assert not stuck, f"cases nobody hears of: {stuck}: {why}"


# ---------------------------------------------------------------- the runs


def run_machine(
    make_url: Callable[[], str],
    *,
    examples: int,
    steps: int,
    machine: type[DeskMachine] | None = None,
    derandomize: bool | None = None,
) -> None:
    """Run `machine` (the desk's, or a machine built on it) on databases from `make_url`;
    the same examples each run unless `derandomize` is False (by default: not in a deep
    run)."""
    run_state_machine_as_test(
        type("Machine", (machine or DeskMachine,), {"make_url": staticmethod(make_url)}),
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            derandomize=not DEEP if derandomize is None else derandomize,
        ),
    )


def _run(make_url: Callable[[], str], *, examples: int, steps: int) -> None:
    run_machine(make_url, examples=examples, steps=steps)
    if STATS is not None:
        print(f"stateful run: {STATS}")


@pytest.fixture()
def sqlite_factory(sqlite_template: Path, tmp_path: Path) -> Callable[[], str]:
    return lambda: fresh_sqlite(sqlite_template, tmp_path)


@pytest.fixture()
def pg_factory(pg_databases: PgDatabases) -> Iterator[Callable[[], str]]:
    made: list[str] = []

    def make() -> str:
        made.append(pg_databases.take())
        return _pg_test_url(made[-1])

    yield make
    for name in made:
        pg_databases.drop(name)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def either_factory(
    request: pytest.FixtureRequest, sqlite_factory: Callable[[], str]
) -> Callable[[], str]:
    if request.param == "sqlite":
        return sqlite_factory
    factory: Callable[[], str] = request.getfixturevalue("pg_factory")
    return factory


def test_stateful_desk_keeps_its_promise_sqlite(sqlite_factory: Callable[[], str]) -> None:
    _run(sqlite_factory, examples=25, steps=30)


@pytest.mark.postgres
def test_stateful_desk_keeps_its_promise_postgres(pg_factory: Callable[[], str]) -> None:
    _run(pg_factory, examples=8, steps=25)


if DEEP:  # defined only for the long run: a skip would count as a failure in CI

    @pytest.mark.deep
    def test_stateful_desk_keeps_its_promise_deep(sqlite_factory: Callable[[], str]) -> None:
        _run(
            sqlite_factory,
            examples=int(os.environ.get("REFUND_DESK_DEEP_EXAMPLES", "400")),
            steps=int(os.environ.get("REFUND_DESK_DEEP_STEPS", "60")),
        )


# ---------------------------------------------------------------- kept examples


def _machine(make: Callable[[], str]) -> DeskMachine:
    machine = type("Machine", (DeskMachine,), {"make_url": staticmethod(make)})()
    machine.publish_first()
    return machine


def test_stateful_example_timeout_then_outage_then_deny(
    sqlite_factory: Callable[[], str],
) -> None:
    """Findings 2 and 3 as the machine expresses them: the refund is made, its answer lost,
    the processor goes down until the case parks, and a lead denies (or approves less)."""
    for action, amount in (("deny", "20.00"), ("approve_partial", "50.00")):
        m = _machine(sqlite_factory)
        m.request_small_or_large(0, True, "400.00")
        m.trouble("timeout-then-down", None)
        m.approve(0, "U0LEAD1")
        for _ in range(3):
            m.sweep(3600, 3)
            m.money_is_right()
        m.click(0, True, action, "U0LEAD2", amount, False)
        m.money_is_right()
        m.record_verifies()
        m.teardown()


def test_stateful_example_a_pause_between_the_reservation_and_the_create(
    either_factory: Callable[[], str],
) -> None:
    """Break 1: a lead's pause commits after the refund was reserved, before its create."""
    m = _machine(either_factory)
    sent = creates(m.desk)
    m.meanwhile("pause", "lookup")
    m.request_small_or_large(0, True, "20.00")  # a damaged order the policy refunds itself
    m.barrier_held()
    assert sent == []
    m.money_is_right()
    m.teardown()  # resumed there: it is paid once
    assert [kw["amount"] for kw in sent] == [2000]


@pytest.mark.postgres
@pytest.mark.parametrize("change", ["approve-all", "trip"])
def test_stateful_example_a_mode_change_inside_the_reservation(
    pg_factory: Callable[[], str], change: str
) -> None:
    """Break 2: the mode changes (or another replica trips the breaker) while an automatic
    refund's reservation runs its checks."""
    m = _machine(pg_factory)
    sent = creates(m.desk)
    m.meanwhile(change, "reservation")
    m.request_small_or_large(0, True, "20.00")
    m.barrier_held()
    assert sent == []
    m.money_is_right()
    m.teardown()


def test_stateful_example_another_refund_before_the_reservation(
    either_factory: Callable[[], str],
) -> None:
    """Break 3: another case's refund on the same payment lands after this one read the
    payment at the processor and before it reserved: never more is asked than is left."""
    m = _machine(either_factory)
    sent = creates(m.desk)
    m.request(0, True, "900.00", 0, "400.00", None)  # a person's case (tier 3)
    m.request(0, False, "900.00", 0, "600.00", None)  # another on the same payment
    m.trouble("down", None)
    m.click(1, False, "approve", "U0FIN1", "20.00", False)  # its refund waits for the processor
    m.trouble("heal", None)
    m.meanwhile("another-refund", "payment-read")
    m.click(0, False, "approve", "U0LEAD1", "20.00", False)
    m.barrier_held()
    assert [kw["amount"] for kw in sent] == [60000], (
        sent
    )  # the 600.00 only: 300.00 was left for the 400.00
    m.money_is_right()
    m.teardown()
