"""A Slack click's transaction on the driver's cursor (`approvals.act`, `_act`,
`_record`, `_approve`, `_check_resolved`), on SQLite and on PostgreSQL.

Attacks: concurrent clicks of one token (same and different users, across several
runtimes standing for processes): exactly one decision, the others `already_decided`, one
refund; a two-approver tier counts the second approver and refuses one person twice (also
concurrently); another amount while a refund has an unknown outcome is refused
(`execution_unresolved`) and the same amount resumes the one refund; deny, escalate and
approve-partially; segregation of duties (the requester, the first decider of an appealed
case, the requester of the appealed case). The same script is run on both databases.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select, update

from refund_desk.cases import approvals
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import verify_chain
from refund_desk.storage.models import Approval, Case, Execution
from tests.conftest import TEST_SECRET, make_runtime
from tests.helpers import Harness, button_token


@pytest.fixture()
def desks(any_db_url: str) -> Iterator[list[Harness]]:
    rts: list[Runtime] = [make_runtime(any_db_url) for _ in range(3)]
    hs = [Harness(rt) for rt in rts]
    hs[0].publish()
    yield hs
    for rt in rts:
        rt.db.dispose()


def _token(desk: Harness, case_id: str, action: str) -> str:
    rt = desk.runtime.desk
    with rt.db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None
        return button_token(rt, case, action)


def _click(desk: Harness, token: str, user: str, **kw: str) -> approvals.Outcome:
    rt = desk.runtime.desk
    outcome = approvals.act(rt, token_value=token, user=user, **kw)
    for job in outcome.jobs:
        rt.jobs.run_now(job)
    return outcome


def _case(desk: Harness, case_id: str) -> Case:
    with desk.runtime.db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None
        return case


def _approvals(desk: Harness, case_id: str) -> list[tuple[int, str, str]]:
    with desk.runtime.db.read() as session:
        rows = session.scalars(
            select(Approval).where(Approval.case_id == case_id).order_by(Approval.id)
        ).all()
        return [(a.round, a.approver, a.decision) for a in rows]


def _awaiting(desk: Harness, amount: str = "100.00", **payment: Any) -> tuple[str, str]:
    pay = desk.payment("900.00", **payment)
    body = desk.post(desk.request(pay, amount)).json()
    assert body["status"] == "awaiting_approval", body
    return body["id"], pay


def _together(fns: list[Any]) -> list[Any]:
    barrier = threading.Barrier(len(fns))
    out: list[Any] = [None] * len(fns)

    def run(i: int) -> None:
        barrier.wait(30)
        try:
            out[i] = fns[i]()
        except BaseException as exc:
            out[i] = exc

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    return out


def _codes(results: list[Any]) -> list[str]:
    return sorted(r.code if isinstance(r, approvals.Refused) else type(r).__name__ for r in results)


@pytest.mark.parametrize("users", [["U0LEAD1"] * 6, ["U0LEAD1", "U0LEAD2"] * 3])
def test_concurrent_clicks_of_one_token_make_one_decision(
    desks: list[Harness], users: list[str]
) -> None:
    case_id, pay = _awaiting(desks[0])
    token = _token(desks[0], case_id, "approve")
    results = _together(
        [lambda i=i, u=u: _click(desks[i % 3], token, u) for i, u in enumerate(users)]
    )
    assert _codes(results) == sorted(["Outcome"] + ["already_decided"] * (len(users) - 1)), [
        repr(r)[:200] for r in results
    ]
    assert len(_approvals(desks[0], case_id)) == 1
    desks[0].sweep()
    assert _case(desks[0], case_id).status == "refunded"
    assert [r["amount"] for r in desks[0].refunds_at_processor(pay)] == [10000]
    with desks[0].runtime.db.read() as session:
        assert verify_chain(TEST_SECRET, session).ok


def test_concurrent_deny_and_approve_of_one_card_make_one_decision(desks: list[Harness]) -> None:
    case_id, pay = _awaiting(desks[0])
    approve = _token(desks[0], case_id, "approve")
    deny = _token(desks[0], case_id, "deny")
    results = _together(
        [lambda: _click(desks[0], approve, "U0LEAD1"), lambda: _click(desks[1], deny, "U0LEAD2")]
    )
    outcomes = [r for r in results if isinstance(r, approvals.Outcome)]
    refused = [r for r in results if isinstance(r, approvals.Refused)]
    assert len(outcomes) == 1 and len(refused) == 1, [repr(r)[:200] for r in results]
    assert refused[0].code in ("already_decided", "stale")
    status = _case(desks[0], case_id).status
    assert status in ("approved", "refunded", "denied")
    assert len([a for a in _approvals(desks[0], case_id) if a[2] in ("approve", "deny")]) == 1
    desks[0].sweep()
    refunds = desks[0].refunds_at_processor(pay)
    assert len(refunds) == (0 if status == "denied" else 1)


def test_a_second_approver_is_counted_and_one_person_cannot_approve_twice(
    desks: list[Harness],
) -> None:
    case_id, pay = _awaiting(desks[0], chargebacks=1)  # tier 4, finance, two approvers
    assert _case(desks[0], case_id).decision["tier"] == 4
    first = _click(desks[0], _token(desks[0], case_id, "approve"), "U0FIN1")
    assert "1 of 2" in first.message
    with pytest.raises(approvals.Refused) as twice:
        _click(desks[1], _token(desks[1], case_id, "approve"), "U0FIN1")
    assert twice.value.code == "already_approved"
    assert _case(desks[0], case_id).status == "awaiting_approval"
    done = _click(desks[2], _token(desks[2], case_id, "approve"), "U0FIN2")
    assert done.message.startswith("Approved")
    assert sorted(a[1] for a in _approvals(desks[0], case_id)) == ["U0FIN1", "U0FIN2"]
    desks[0].sweep()
    assert _case(desks[0], case_id).status == "refunded"
    assert len(desks[0].refunds_at_processor(pay)) == 1


def test_two_approvers_clicking_one_revision_at_once_do_not_both_count_as_the_quorum(
    desks: list[Harness],
) -> None:
    """Two finance approvers click their own fresh tokens of one revision at once: one is
    recorded; the other is refused (the card is stale), never approving with one person's
    approval counted twice, never two approvals of one revision."""
    case_id, _pay = _awaiting(desks[0], chargebacks=1)
    t1 = _token(desks[0], case_id, "approve")
    t2 = _token(desks[0], case_id, "approve")
    results = _together(
        [lambda: _click(desks[0], t1, "U0FIN1"), lambda: _click(desks[1], t2, "U0FIN2")]
    )
    assert _codes(results) == ["Outcome", "stale"], [repr(r)[:200] for r in results]
    assert _case(desks[0], case_id).status == "awaiting_approval"
    assert len(_approvals(desks[0], case_id)) == 1


def test_one_person_two_tokens_at_once_is_one_approval(desks: list[Harness]) -> None:
    case_id, _ = _awaiting(desks[0], chargebacks=1)
    t1 = _token(desks[0], case_id, "approve")
    t2 = _token(desks[0], case_id, "approve")
    results = _together(
        [lambda: _click(desks[0], t1, "U0FIN1"), lambda: _click(desks[1], t2, "U0FIN1")]
    )
    assert sum(isinstance(r, approvals.Outcome) for r in results) == 1, results
    assert all(isinstance(r, (approvals.Outcome, approvals.Refused)) for r in results), [
        repr(r)[:200] for r in results
    ]
    assert (
        _approvals(desks[0], case_id) == [(0, "U0FIN1", "approve")]
        or len(_approvals(desks[0], case_id)) == 1
    )
    assert _case(desks[0], case_id).status == "awaiting_approval"


def _parked_with_money_out(desk: Harness) -> tuple[str, str]:
    """As tests/safety/test_findings: a 400.00 refund made, its answer lost, then the
    processor down until the case parks with its execution still reserved."""
    payment = desk.payment("900.00")
    body = desk.post(desk.request(payment, "400.00")).json()
    assert body["status"] == "awaiting_approval", body
    desk.sandbox.set_fault("timeout-after-success", times=1)
    _click(desk, _token(desk, body["id"], "approve"), "U0LEAD1")
    desk.sandbox.set_fault("down")
    for _ in range(12):
        desk.sweep(seconds_ahead=3600, batches=1)
    assert desk.get(body["id"])["status"] == "parked"
    return body["id"], payment


def test_another_amount_is_refused_while_a_refund_is_unresolved_the_same_resumes_it(
    desks: list[Harness],
) -> None:
    desk = desks[0]
    case_id, payment = _parked_with_money_out(desk)
    with pytest.raises(approvals.Refused) as partial:
        _click(desk, _token(desk, case_id, "approve_partial"), "U0LEAD2", amount="50.00")
    assert partial.value.code == "execution_unresolved"
    with pytest.raises(approvals.Refused) as deny:
        _click(desk, _token(desk, case_id, "deny"), "U0LEAD2")
    assert deny.value.code == "execution_unresolved"
    # the same amount, as a partial too: resumes
    outcome = _click(desks[1], _token(desk, case_id, "approve_partial"), "U0LEAD2", amount="400.00")
    assert outcome.message.startswith("Approved"), outcome.message
    desk.sandbox.set_fault("none")
    desk.sweep(seconds_ahead=3600)
    assert desk.get(case_id)["status"] == "refunded"
    assert [r["amount"] for r in desk.refunds_at_processor(payment)] == [40000]
    with desk.runtime.db.read() as session:
        rows = session.scalars(select(Execution).where(Execution.case_id == case_id)).all()
        assert [(e.status, e.amount) for e in rows] == [("succeeded", 40000)]


def test_deny_escalate_and_approve_partially_still_work(desks: list[Harness]) -> None:
    desk = desks[0]
    denied, _ = _awaiting(desk)
    assert _click(desk, _token(desk, denied, "deny"), "U0LEAD1", reason="No.").message.startswith(
        "Denied"
    )
    assert _case(desk, denied).status == "denied"
    assert _case(desk, denied).customer_message == "No."

    escalated, pay = _awaiting(desk)
    assert "Escalated" in _click(desk, _token(desk, escalated, "escalate"), "U0LEAD1").message
    case = _case(desk, escalated)
    assert case.escalation_level == 1 and case.status == "awaiting_approval"
    with pytest.raises(approvals.Refused) as handed:  # the group no longer acts on it
        _click(desk, _token(desk, escalated, "escalate"), "U0LEAD2")
    assert handed.value.code == "not_an_approver"
    with pytest.raises(approvals.Refused) as top:
        _click(desk, _token(desk, escalated, "escalate"), "U0MGR1")
    assert top.value.code == "top_of_chain"
    _click(desk, _token(desk, escalated, "approve"), "U0MGR1")
    desk.sweep()
    assert _case(desk, escalated).status == "refunded"
    assert [r["amount"] for r in desk.refunds_at_processor(pay)] == [10000]

    partial, pay2 = _awaiting(desk)
    _click(desk, _token(desk, partial, "approve_partial"), "U0LEAD2", amount="12.34")
    desk.sweep()
    case = _case(desk, partial)
    assert case.status == "refunded" and case.amount == 1234
    assert [r["amount"] for r in desk.refunds_at_processor(pay2)] == [1234]
    assert [a[1:] for a in _approvals(desk, partial)] == [("U0LEAD2", "approve")]
    with desk.runtime.db.read() as session:
        amounts = session.scalars(select(Approval.amount).where(Approval.case_id == partial)).all()
        assert amounts == [1234]
        assert verify_chain(TEST_SECRET, session).ok


def test_segregation_of_duties(desks: list[Harness]) -> None:
    desk = desks[0]
    own, _ = _awaiting(desk)
    with desk.runtime.db.write() as session:
        session.execute(update(Case).where(Case.id == own).values(requested_by="U0LEAD1"))
    with pytest.raises(approvals.Refused) as mine:
        _click(desk, _token(desk, own, "approve"), "U0LEAD1")
    assert mine.value.code == "own_request"
    with pytest.raises(approvals.Refused) as mine_deny:
        _click(desk, _token(desk, own, "deny"), "U0LEAD1")
    assert mine_deny.value.code == "own_request"

    # an appeal of a case U0LEAD2 denied: U0LEAD2 may not decide it
    first, _ = _awaiting(desk)
    _click(desk, _token(desk, first, "deny"), "U0LEAD2")
    appeal, _ = _awaiting(desk)
    with desk.runtime.db.write() as session:
        session.execute(update(Case).where(Case.id == appeal).values(appeal_of=first))
    with pytest.raises(approvals.Refused) as decider:
        _click(desk, _token(desk, appeal, "approve"), "U0LEAD2")
    assert decider.value.code == "first_decider"
    # the appealed case's requester may not decide it either
    with desk.runtime.db.write() as session:
        session.execute(update(Case).where(Case.id == first).values(requested_by="U0LEAD1"))
    with pytest.raises(approvals.Refused) as filed:
        _click(desk, _token(desk, appeal, "approve"), "U0LEAD1")
    assert filed.value.code == "own_request"
    assert _approvals(desk, appeal) == []
    with desk.runtime.db.read() as session:
        refusals = session.scalar(select(func.count()).select_from(Case).where(Case.id == appeal))
        assert refusals == 1
        assert verify_chain(TEST_SECRET, session).ok


def test_a_used_token_names_who_used_it(desks: list[Harness]) -> None:
    desk = desks[0]
    case_id, _ = _awaiting(desk, chargebacks=1)
    token = _token(desk, case_id, "approve")
    _click(desk, token, "U0FIN1")
    with pytest.raises(approvals.Refused) as again:
        _click(desk, token, "U0FIN2")
    assert again.value.code == "already_decided"
    assert "U0FIN1" in str(again.value.message) or "U0FIN1" in repr(again.value.text)


def _script(desk: Harness) -> tuple[list[str], list[str]]:
    """The same clicks on a fresh desk: the refusal codes and outcome messages in order, and
    the cases' ids in order."""
    said: list[str] = []
    cases: list[str] = []

    def click(case_id: str, action: str, user: str, **kw: str) -> None:
        try:
            said.append(_click(desk, _token(desk, case_id, action), user, **kw).message)
        except approvals.Refused as exc:
            said.append("refused:" + exc.code)

    two, _ = _awaiting(desk, chargebacks=1)
    click(two, "approve", "U0FIN1")
    click(two, "approve", "U0FIN1")
    click(two, "deny", "U0LEAD1")
    click(two, "approve", "U0FIN2")
    esc, _ = _awaiting(desk)
    click(esc, "approve", "U0FIN1")
    click(esc, "escalate", "U0LEAD2")
    click(esc, "approve_partial", "U0MGR1", amount="33.33")
    part, _ = _awaiting(desk)
    click(part, "approve_partial", "U0LEAD1", amount="1000.00")
    click(part, "approve_partial", "U0LEAD1", amount="0")
    click(part, "deny", "U0LEAD1", reason="Used.")
    click(part, "approve", "U0LEAD2")
    desk.sweep()
    cases += [two, esc, part]
    return said, cases


@pytest.mark.postgres
def test_the_same_clicks_end_the_same_on_sqlite_and_postgresql(
    sqlite_url: str, pg_url: str
) -> None:
    from tests.direct_rows_helpers import same, state_of

    states = []
    for url in (sqlite_url, pg_url):
        rt = make_runtime(url)
        try:
            desk = Harness(rt)
            desk.publish()
            said, cases = _script(desk)
            states.append((said, [state_of(rt.db, c) for c in cases]))
        finally:
            rt.db.dispose()
    (said_a, cases_a), (said_b, cases_b) = states
    assert said_a == said_b
    assert said_a[:4] == [
        "Approval recorded (1 of 2).",
        "refused:already_approved",
        "refused:not_an_approver",
        "Approved: the refund is on its way.",
    ], said_a
    for a, b in zip(cases_a, cases_b, strict=True):
        same(a, b)
