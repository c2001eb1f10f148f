"""Promise 5: no refund is ever paid on a case whose status is `denied`, and a case refunded
has exactly its approved amount out. (The concurrent ways found to break it are in
test_exactly_once_across_takeovers.py; these are the single-process paths.)"""

from __future__ import annotations

from typing import Any

import pytest

from refund_desk.cases.errors import Refused
from refund_desk.cases.ports import ProcessorUnavailable
from refund_desk.payments import reconcile
from tests.helpers import Harness
from tests.safety.independent.support import (
    FINANCE,
    LEAD,
    CreateWatch,
    case_money_breaks,
    case_row,
    click,
    executions,
    ledger,
    live,
)


def test_a_case_with_an_unresolved_refund_cannot_be_denied_and_a_denied_one_never_pays(
    desk: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches: a denial while a reservation may still be paid, or a refund after a denial
    from the jobs and passes still around (the execute job's retries, resolve, reconciliation)."""
    rt = desk.runtime
    down = {"on": True}
    original = desk.sandbox.list_refunds

    def list_refunds(payment_id: str) -> Any:
        if down["on"]:
            raise ProcessorUnavailable("processor_unavailable", "down")
        return original(payment_id)

    monkeypatch.setattr(desk.sandbox, "list_refunds", list_refunds)
    body = desk.post(desk.request(desk.payment("30.00"), "20.00")).json()
    for _ in range(12):
        if case_row(rt, body["id"]).status == "parked":
            break
        desk.sweep(seconds_ahead=400, batches=1)
    assert case_row(rt, body["id"]).status == "parked"
    with pytest.raises(Refused) as refused:
        click(rt, body["id"], "deny", LEAD, reason="no")
    assert refused.value.code == "execution_unresolved"
    down["on"] = False
    desk.sweep(seconds_ahead=3600)  # resolve: nothing at the processor, released
    assert [e.status for e in executions(rt, body["id"])] == ["failed"]
    click(rt, body["id"], "deny", LEAD, reason="no")
    assert case_row(rt, body["id"]).status == "denied"
    for ahead in (3600, 7200, 86400):
        desk.sweep(seconds_ahead=ahead)
    reconcile.reconcile(rt.desk, since=rt.desk.now().replace(year=2000))
    assert live(ledger(rt)) == []
    assert case_money_breaks(rt) == []


@pytest.mark.parametrize("part", ["450.00", "600.00"])
def test_a_refunded_case_has_exactly_its_approved_amount_out(desk: Harness, part: str) -> None:
    """Catches: the amount paid differing from the one approved (a partial approval's, or the
    case's) or a second refund for the case after faults and retries."""
    rt = desk.runtime
    watch = CreateWatch().watch(rt)
    body = desk.post(desk.request(desk.payment("900.00"), "600.00")).json()
    desk.sandbox.set_fault("timeout-after-success", times=1)
    jobs = click(rt, body["id"], "approve_partial", FINANCE, amount=part)
    for job in jobs:
        rt.desk.jobs.run_now(job)
    desk.sweep()
    desk.sweep()
    case = case_row(rt, body["id"])
    assert case.status == "refunded"
    assert case.amount == int(part.replace(".", ""))
    assert [r.amount for r in live(ledger(rt))] == [case.amount]
    assert case_money_breaks(rt) == []
    assert watch.over_asks() == []
