"""Every flow leaves the same rows, audit, jobs and messages with direct rows as with
the ORM. Each scenario runs start to end on two fresh databases, once with direct rows and once
with them off, and each case's state (ids and times put aside) must match."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlmodel import col

from refund_desk.cases import executor
from refund_desk.governance import admin
from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor, verify_chain
from refund_desk.storage.models import Control, Execution, SandboxRefund
from tests.direct_rows_helpers import (
    FOR_A_PERSON,
    LEAD,
    before_execution,
    click,
    control_state,
    pause,
    post_request,
    same,
    state_of,
    sweep_all,
    without_direct_rows,
)
from tests.helpers import ACME, Harness


def scenario_people(h: Harness) -> list[str]:
    n = [0]
    out = []
    c = post_request(h, "approve", n, message=FOR_A_PERSON)
    click(h, c, "approve")
    out.append(c)
    c = post_request(h, "partial", n, message=FOR_A_PERSON)
    click(h, c, "approve_partial", amount="7.50")
    out.append(c)
    c = post_request(h, "deny", n, message=FOR_A_PERSON)
    click(h, c, "deny")
    out.append(c)
    h.sandbox.set_fault("decline", times=1)
    c = post_request(h, "declined", n, message=FOR_A_PERSON)
    click(h, c, "approve")
    out.append(c)
    # the parked case approved again by a person, at a smaller amount
    click(h, c, "approve_partial", amount="5.00")
    out.append(c)
    sweep_all(h)
    return out


def scenario_faults(h: Harness) -> list[str]:
    n = [0]
    out = []
    for fault in ("timeout-after-success", "down", "crash-after-success", "decline"):
        with before_execution(h, lambda fault=fault: h.sandbox.set_fault(fault, times=1)):
            out.append(post_request(h, fault, n))
        h.sandbox.set_fault("none")
    sweep_all(h, 3600)
    sweep_all(h, 7200)
    return out


def scenario_pause_between(h: Harness) -> list[str]:
    n = [0]
    desk = h.runtime.desk
    original = desk.run_claimed

    def pause_then_run(job: Any) -> None:
        pause(h, True)
        original(job)

    desk.run_claimed = pause_then_run  # type: ignore[method-assign]
    try:
        c = post_request(h, "paused", n)
    finally:
        desk.run_claimed = original  # type: ignore[method-assign]
    out = [c]
    out.append(post_request(h, "while-paused", n))
    pause(h, False)
    sweep_all(h, 60)
    return out


def scenario_webhook(h: Harness) -> list[str]:
    n = [0]
    h.sandbox.set_fault("timeout-after-success", times=1)
    c = post_request(h, "webhook", n)
    with h.runtime.db.read() as session:
        rows = session.scalars(select(SandboxRefund)).all()
        refunds = [SandboxProcessor._to_refund(r) for r in rows]
    for refund in refunds:
        executor.settle(h.runtime.desk, refund)
        executor.settle(h.runtime.desk, refund)  # again
    sweep_all(h)
    return [c]


def scenario_sampled_and_shadow_modes(h: Harness) -> list[str]:
    n = [0]
    with h.runtime.db.write() as session:
        session.connection().execute(text("UPDATE control SET review_sample_rate = 1.0"))
    out = [post_request(h, "sampled", n)]
    with h.runtime.db.write() as session:
        admin.set_mode(
            session, h.runtime.desk.audit, mode="approve-all", actor=Actor("human", LEAD)
        )
    c = post_request(h, "approve-all", n)
    click(h, c, "approve")
    out.append(c)
    with h.runtime.db.write() as session:
        admin.set_mode(session, h.runtime.desk.audit, mode="shadow", actor=Actor("human", LEAD))
    out.append(post_request(h, "shadow", n))
    sweep_all(h)
    return out


def scenario_breaker(h: Harness) -> list[str]:
    n = [0]
    source = ACME.read_text().replace("max_refunds_per_hour: 200", "max_refunds_per_hour: 2")
    assert source != ACME.read_text()
    h.publish(source)
    out = [post_request(h, "b", n) for _ in range(4)]
    sweep_all(h)
    return out


def scenario_breaker_failures(h: Harness) -> list[str]:
    n = [0]
    source = ACME.read_text().replace("max_failures_in_row: 5", "max_failures_in_row: 2")
    h.publish(source)
    with before_execution(h, lambda: h.sandbox.set_fault("down", times=1)):
        out = [post_request(h, "f", n)]
        sweep_all(h, 60)
        out.append(post_request(h, "f", n))
    h.sandbox.set_fault("none")
    sweep_all(h, 3600)
    return out


def scenario_reapproved_while_open(h: Harness) -> list[str]:
    n = [0]
    out = []
    for first in ("down", "timeout-after-success"):
        c = post_request(h, "open", n, message=FOR_A_PERSON)

        def fail_on(first: str = first) -> None:
            if first == "down":
                h.sandbox.set_fault("down")
            else:
                h.sandbox.set_fault("timeout-after-success", times=1)

        fail_on()
        click(h, c, "approve")
        if first != "down":
            h.sandbox.set_fault("down")
        for _ in range(10):  # the processor keeps failing: the case is parked, the reservation open
            sweep_all(h, 600)
        click(h, c, "approve_partial", amount="5.00")  # re-approved while the reservation is open
        click(h, c, "approve")
        h.sandbox.set_fault("none")
        sweep_all(h, 600)
        click(h, c, "approve_partial", amount="5.00")
        sweep_all(h, 600)
        out.append(c)
    return out


def scenario_network_advisor(h: Harness) -> list[str]:
    from tests.cases.advance_common import NetworkLike
    from tests.safety.test_stateful import FailingAdvisor

    n = [0]
    out = []
    real = h.runtime.desk.advisor
    h.runtime.desk.advisor = NetworkLike()  # type: ignore[assignment]
    out.append(post_request(h, "net-auto", n))
    c = post_request(h, "net-review", n, message=FOR_A_PERSON)
    click(h, c, "approve")
    out.append(c)
    out.append(post_request(h, "net-deny", n, amount="40.00"))
    out.append(
        post_request(
            h,
            "net-words",
            n,
            amount=None,
            message="The vase arrived broken. Please refund 12.50 of it, I keep the rest.",
        )
    )
    h.runtime.desk.advisor = FailingAdvisor()  # type: ignore[assignment]
    c = post_request(h, "net-fail", n)
    click(h, c, "approve")
    out.append(c)
    h.runtime.desk.advisor = real
    c = post_request(h, "local-fail", n)
    out.append(c)
    sweep_all(h)
    return out


def scenario_shadow_draft(h: Harness) -> list[str]:
    from refund_desk.governance import drafts, shadow

    n = [0]
    source = ACME.read_text().replace(
        '  - id: damaged-small\n    when: request.reason == "damaged" and request.amount <= 50 '
        "and order.age_days <= 30\n    outcome: approve",
        '  - id: damaged-small\n    when: request.reason == "damaged" and request.amount <= 10 '
        "and order.age_days <= 30\n    outcome: approve",
    )
    assert source != ACME.read_text()
    actor = Actor("human", LEAD)
    with h.runtime.db.write() as session:
        draft, _ = drafts.save_draft(session, h.runtime.desk.audit, source=source, actor=actor)
        draft_id = draft.id
    with h.runtime.db.write() as session:
        shadow.start(session, h.runtime.desk.audit, draft_id=draft_id, actor=actor)
    out = [
        post_request(h, "shadow-auto", n),
        post_request(h, "shadow-review", n, message=FOR_A_PERSON),
        post_request(h, "shadow-deny", n, amount="40.00"),
    ]
    click(h, out[1], "approve")
    sweep_all(h)
    from sqlalchemy import func as _f

    from refund_desk.storage.models import ShadowDecision

    with h.runtime.db.read() as session:
        assert session.scalar(select(_f.count()).select_from(ShadowDecision)) == 3
    return out


def scenario_webhook_pending_and_canceled(h: Harness) -> list[str]:
    import dataclasses

    n = [0]
    out = []
    for final in ("succeeded", "canceled", "failed"):
        with before_execution(h, lambda: h.sandbox.set_fault("timeout-after-success", times=1)):
            c = post_request(h, f"pending-{final}", n)
        with h.runtime.db.read() as session:
            rows = session.scalars(
                select(SandboxRefund).order_by(col(SandboxRefund.created_at))
            ).all()
            refund = SandboxProcessor._to_refund(rows[-1])
        pending = dataclasses.replace(refund, status="pending")
        executor.settle(h.runtime.desk, pending)
        executor.settle(h.runtime.desk, pending)  # the same status again: on the record once
        executor.settle(h.runtime.desk, dataclasses.replace(refund, status="requires_action"))
        executor.settle(h.runtime.desk, dataclasses.replace(refund, status=final))
        executor.settle(h.runtime.desk, dataclasses.replace(refund, status=final))
        out.append(c)
    sweep_all(h)
    return out


SCENARIOS: dict[str, Callable[[Harness], list[str]]] = {
    "people": scenario_people,
    "faults": scenario_faults,
    "pause_between": scenario_pause_between,
    "webhook": scenario_webhook,
    "sampled_and_modes": scenario_sampled_and_shadow_modes,
    "breaker_per_hour": scenario_breaker,
    "breaker_failures": scenario_breaker_failures,
    "reapproved_while_open": scenario_reapproved_while_open,
    "network_advisor": scenario_network_advisor,
    "shadow_draft": scenario_shadow_draft,
    "webhook_pending_and_canceled": scenario_webhook_pending_and_canceled,
}


def _run(
    rt: Runtime, scenario: Callable[[Harness], list[str]]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    h = Harness(rt)
    h.publish()
    ids = scenario(h)
    sweep_all(h)
    states = [state_of(rt.db, c) for c in ids]
    from refund_desk.storage.models import ShadowDecision

    with rt.db.read() as session:
        for state, c in zip(states, ids, strict=True):
            found = session.get(ShadowDecision, c)
            state["shadow"] = (
                None
                if found is None
                else {
                    k: v
                    for k, v in found.model_dump().items()
                    if k not in ("case_id", "created_at")
                }
            )
    with rt.db.read() as session:
        control = session.get(Control, 1)
        assert control is not None
        ctl = control_state(control)
        ctl["tripped"] = control.breaker_tripped_at is not None
        refunds = session.scalar(select(func.count()).select_from(SandboxRefund))
        executions = session.scalar(select(func.count()).select_from(Execution))
        result = verify_chain(rt.desk.secret, session)
    assert result.ok, result
    return states, {"control": ctl, "refunds": refunds, "executions": executions}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_same_as_orm(
    fresh_runtimes: Any, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    scenario = SCENARIOS[name]
    direct = _run(fresh_runtimes(), scenario)
    with monkeypatch.context() as patched:
        without_direct_rows(patched)
        through_orm = _run(fresh_runtimes(), scenario)
    assert direct[1] == through_orm[1]
    assert len(direct[0]) == len(through_orm[0])
    for ours, theirs in zip(direct[0], through_orm[0], strict=True):
        same(ours, theirs)
