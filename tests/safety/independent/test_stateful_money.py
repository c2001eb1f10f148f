"""All five promises at once, as a Hypothesis state machine on SQLite (one process, steps in
any order): requests (automatic and for a person, several on one payment), pauses, mode
changes, breaker trips, processor faults (with idempotency keys ignored), sweeps at any
distance in time (taking over leases of "crashed" runs), and people approving, approving
part, or denying whatever waits for them.

After every step: no create started while paused or (automatic) outside `supervised`
(promise 1); none asked for more than was left (2); no execution id has two refunds (3); no
denied case has money out and every refunded case has exactly its amount out (5); no payment
has more out than was captured.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from refund_desk.cases.errors import CaseError
from refund_desk.runtime import Runtime
from tests.conftest import SimulatedCrash, fresh_sqlite, make_runtime
from tests.helpers import published
from tests.safety.independent.support import (
    CHANGES,
    FINANCE,
    LEAD,
    CreateWatch,
    case_money_breaks,
    click,
    exactly_once_breaks,
    ledger,
    live,
    mode,
    pause,
)

EMAILS = ("ada@example.com", "bob@example.com")


class RefundDesk(RuleBasedStateMachine):
    template: Path
    directory: Path

    def __init__(self) -> None:
        super().__init__()
        self.rt: Runtime = make_runtime(fresh_sqlite(self.template, self.directory))
        self.desk = published(self.rt)
        self.watch = CreateWatch().watch(self.rt)
        self.payments: list[tuple[str, str]] = []  # (payment id, customer email)
        self.cases: list[str] = []
        self.armed: dict[str, str] = {}  # processor call -> the change committed at its next call
        sandbox = self.desk.sandbox
        for name in ("payment", "list_refunds"):
            original = getattr(sandbox, name)

            def hooked(*args, _name=name, _original=original, **kw):
                change = self.armed.pop(_name, None)
                if change is not None:  # between transactions: the other process's commit
                    self._apply(change)
                return _original(*args, **kw)

            setattr(sandbox, name, hooked)

    def _apply(self, change: str) -> None:
        if change == "resume":
            pause(self.rt, False)
        elif change == "pause":
            pause(self.rt)
        elif change == "supervised":
            mode(self.rt, "supervised")
        else:
            CHANGES[change](self.rt)

    def _quietly(self, fn) -> None:
        # a power cut: the lease is left to run out, a later sweep takes over
        with contextlib.suppress(SimulatedCrash):
            fn()

    @rule(amount=st.sampled_from(["10.00", "20.00", "600.00", "900.00"]), new=st.booleans(),
          who=st.sampled_from(EMAILS))  # fmt: skip
    def request(self, amount: str, new: bool, who: str) -> None:
        if new or not self.payments:
            self.payments.append((self.desk.payment("1000.00", email=who), who))
        payment, email = self.payments[-1]

        def post() -> None:
            response = self.desk.post({**self.desk.request(payment, amount), "email": email})
            if response.status_code == 201:
                self.cases.append(response.json()["id"])

        self._quietly(post)

    # Back to running more often than away from it: refunds that can pay are where it matters.
    @rule(change=st.sampled_from(["resume", "resume", "supervised", "supervised", "pause",
                                  "approve-all", "shadow", "breaker"]))  # fmt: skip
    def switch(self, change: str) -> None:
        self._apply(change)

    @rule(change=st.sampled_from(["pause", "pause", "approve-all", "shadow", "breaker"]),
          at=st.sampled_from(["payment", "list_refunds"]))  # fmt: skip
    def switch_at_the_next_call(self, change: str, at: str) -> None:
        """The change commits at the next such processor call, in the middle of a refund."""
        self.armed[at] = change

    @rule(change=st.sampled_from(["pause", "approve-all", "breaker"]),
          at=st.sampled_from(["payment", "list_refunds"]), who=st.sampled_from(EMAILS))  # fmt: skip
    def automatic_request_with_a_change_midway(self, change: str, at: str, who: str) -> None:
        """A fresh automatic request whose refund meets the change at the chosen call."""
        self.switch_at_the_next_call(change, at)
        self.request("20.00", True, who)

    @rule(fault=st.sampled_from(["timeout-after-success", "crash-after-success", "decline",
                                 "down"]))  # fmt: skip
    def fault(self, fault: str) -> None:
        self.desk.sandbox.set_fault(fault, times=1)

    @rule(ahead=st.sampled_from([0, 30, 400, 3600]))
    def sweep(self, ahead: float) -> None:
        self._quietly(lambda: self.desk.sweep(seconds_ahead=ahead, batches=3))

    @rule(data=st.data(), action=st.sampled_from(["approve", "approve", "approve_partial",
                                                  "deny"]))  # fmt: skip
    def decide(self, data: st.DataObject, action: str) -> None:
        from refund_desk.storage.models import Case

        with self.rt.db.read() as session:
            waiting = [
                (c.id, c.amount)
                for c in (session.get(Case, i) for i in self.cases)
                if c is not None and c.status in ("awaiting_approval", "parked")
            ]
        if not waiting:
            return
        case_id, amount = data.draw(st.sampled_from(waiting))
        user = FINANCE if amount > 50000 else LEAD
        extra = {}
        if action == "approve_partial":
            part = data.draw(st.integers(min_value=1, max_value=amount))
            extra["amount"] = f"{part // 100}.{part % 100:02d}"
        try:
            jobs = click(self.rt, case_id, action, user, **extra)
        except CaseError:
            return  # refused (stale, over the limit, unresolved, too much): nothing moved
        for job in jobs:
            self._quietly(lambda job=job: self.rt.desk.jobs.run_now(job))

    @invariant()
    def promises_hold(self) -> None:
        assert self.watch.against_the_switches() == [], "promise 1"
        assert self.watch.over_asks() == [], "promise 2"
        assert exactly_once_breaks(self.rt) == {}, "promise 3"
        assert case_money_breaks(self.rt) == [], "promise 5"
        out: dict[str, int] = {}
        for refund in live(ledger(self.rt)):
            out[refund.payment_id] = out.get(refund.payment_id, 0) + refund.amount
        assert all(v <= 100000 for v in out.values()), out

    def teardown(self) -> None:
        self.rt.db.dispose()


def test_the_promises_hold_in_any_order(sqlite_template: Path, tmp_path: Path) -> None:
    RefundDesk.template, RefundDesk.directory = sqlite_template, tmp_path
    run_state_machine_as_test(
        RefundDesk,
        settings=settings(
            max_examples=40,
            stateful_step_count=25,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        ),
    )
