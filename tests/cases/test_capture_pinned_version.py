"""The case's policy version (pinned in its INSERT), the payment refreshed on a second
sighting, the control row missing, channels with `prepare` (SQLite and PostgreSQL)."""

from __future__ import annotations

from sqlalchemy import delete, select

from refund_desk.governance.admin import rollback
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import AuditRecord, Case, Control, Payment
from tests.helpers import ACME, Harness


def _received(rt: Runtime, case_id: str) -> AuditRecord:
    with rt.db.read() as session:
        return session.scalars(
            select(AuditRecord).where(
                AuditRecord.case_id == case_id, AuditRecord.action == "request.received"
            )
        ).one()


def _case(rt: Runtime, case_id: str) -> Case:
    with rt.db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None
        return case


def test_pinned_version_everywhere(any_runtime: Runtime) -> None:
    desk = Harness(any_runtime)
    payment = desk.payment("90.00")
    r0 = desk.post(desk.request(payment, "10.00"))
    assert r0.status_code == 201, r0.text
    assert r0.json()["decision"]["policy_version"] is None
    assert _case(any_runtime, r0.json()["id"]).policy_version is None
    assert _received(any_runtime, r0.json()["id"]).policy_version is None

    v1 = desk.publish()
    r1 = desk.post(desk.request(payment, "10.00"))
    assert r1.status_code == 201, r1.text
    v2 = desk.publish(ACME.read_text().replace("4: 24h", "4: 2d"))
    r2 = desk.post(desk.request(payment, "10.00"))
    with any_runtime.db.write() as session:
        rollback(session, any_runtime.desk.audit, version=v1, actor=Actor("cli", "tests"))
    r3 = desk.post(desk.request(payment, "10.00"))
    for resp, want in ((r1, v1), (r2, v2), (r3, v2 + 1)):
        assert resp.status_code == 201, resp.text
        cid = resp.json()["id"]
        assert resp.json()["decision"]["policy_version"] == want
        assert _case(any_runtime, cid).policy_version == want
        assert _received(any_runtime, cid).policy_version == want
        assert desk.get(cid)["decision"]["policy_version"] == want


def test_control_row_missing(any_runtime: Runtime) -> None:
    desk = Harness(any_runtime)
    desk.publish()
    payment = desk.payment("30.00")
    with any_runtime.db.write() as session:
        session.execute(delete(Control))
    before = desk.counts()
    r = desk.post(desk.request(payment, "10.00"))
    assert r.status_code == 500 or r.status_code >= 400
    assert r.json()["error"]["code"] == "control_missing", r.text
    assert desk.counts() == before
    with any_runtime.db.read() as session:
        assert session.get(Payment, payment) is None  # nothing written


def test_second_sighting_sees_refund_elsewhere(any_runtime: Runtime) -> None:
    desk = Harness(any_runtime)
    desk.publish()
    payment = desk.payment("30.00")
    r1 = desk.post(desk.request(payment, "5.00"))
    assert r1.status_code == 201, r1.text
    with any_runtime.db.read() as session:
        row = session.get(Payment, payment)
        assert row is not None and row.refunded == 0
        seen1 = row.seen_at
    desk.sandbox.create_refund(
        payment_id=payment,
        amount=2000,
        currency="USD",
        idempotency_key="elsewhere-1",
        metadata={},
    )
    r2 = desk.post(desk.request(payment, None))
    assert r2.status_code == 201, r2.text
    ours = sum(int(float(x["amount"]) * 100) for x in desk.get(r1.json()["id"])["refunds"])
    assert r2.json()["amount"] == f"{(3000 - 2000 - ours) / 100:.2f}", (r2.json()["amount"], ours)
    with any_runtime.db.read() as session:
        row = session.get(Payment, payment)
        assert row is not None and row.refunded == 2000  # ours are not counted here
        assert row.seen_at > seen1
    left = (
        3000
        - 2000
        - sum(
            int(float(x["amount"]) * 100)
            for cid in (r1.json()["id"], r2.json()["id"])
            for x in desk.get(cid)["refunds"]
        )
    )
    if left:
        desk.sandbox.create_refund(
            payment_id=payment,
            amount=left,
            currency="USD",
            idempotency_key="elsewhere-2",
            metadata={},
        )
    r3 = desk.post(desk.request(payment, None))
    assert r3.status_code == 422, r3.text
    assert r3.json()["error"]["code"] == "nothing_refundable"


def test_idempotency_replay_first_sighting(any_runtime: Runtime) -> None:
    desk = Harness(any_runtime)
    desk.publish()
    payment = desk.payment("30.00")
    body = desk.request(payment, "10.00")
    r1 = desk.post(body, idempotency_key="k-1")
    r2 = desk.post(body, idempotency_key="k-1")
    assert (r1.status_code, r2.status_code) == (201, 200), (r1.text, r2.text)
    assert r1.json()["id"] == r2.json()["id"]
    assert r2.json()["decision"]["policy_version"] == r1.json()["decision"]["policy_version"] == 1
    r3 = desk.post(desk.request(payment, "11.00"), idempotency_key="k-1")
    assert r3.status_code == 409
