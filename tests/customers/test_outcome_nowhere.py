"""An API outcome with nowhere to go is on the record with the change that made it.

An API request without a `callback_url`, where no `REFUND_DESK_WEBHOOK_URL` is configured, is
answered through `GET /api/v1/cases/{id}` only: its outcome message is recorded as told in the
transition's own transaction, with no `customer.tell` job. With somewhere to send it, the job
sends it as before. Either way each outcome is told exactly once.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlmodel import col

from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.runtime import Runtime, build
from refund_desk.storage.db import Database
from refund_desk.storage.models import AuditRecord, CustomerMessage, Job
from tests.conftest import make_settings
from tests.fakes.receiver import Receiver
from tests.helpers import Harness


def _runtime(url: str, **settings: object) -> Runtime:
    db = Database.from_url(url)
    sandbox = SandboxProcessor(db)
    return build(make_settings(url, **settings), db=db, processor=sandbox)


def _told(runtime: Runtime, case_id: str) -> tuple[list[CustomerMessage], list[AuditRecord]]:
    with runtime.db.read() as session:
        messages = list(
            session.scalars(select(CustomerMessage).where(col(CustomerMessage.case_id) == case_id))
        )
        records = list(
            session.scalars(
                select(AuditRecord).where(
                    col(AuditRecord.case_id) == case_id, col(AuditRecord.action) == "customer.told"
                )
            )
        )
    return messages, records


def _tell_jobs(runtime: Runtime) -> list[Job]:
    with runtime.db.read() as session:
        return list(session.scalars(select(Job).where(col(Job.kind) == "customer.tell")))


def test_a_refund_with_nowhere_to_go_is_told_in_its_own_transaction(sqlite_url: str) -> None:
    runtime = _runtime(sqlite_url)
    desk = Harness(runtime)
    desk.publish()
    body = desk.post(desk.request(desk.payment("30.00"), "20.00")).json()
    assert body["status"] == "refunded"

    [message], [record] = _told(runtime, body["id"])
    assert (message.status, message.channel, message.kind) == ("recorded", "none", "refunded")
    assert message.sent_at is not None
    assert record.payload == {
        "message_id": message.id,
        "kind": "refunded",
        "channel": "none",
        "delivered": False,
        "appeal_link": False,
    }
    assert _tell_jobs(runtime) == []
    # The refund's record and the customer's are one transaction: nothing between them.
    actions = [r["action"] for r in desk.get(body["id"])["audit"]]
    assert actions[-2:] == ["execution.succeeded", "customer.told"]

    desk.sweep()  # nothing is told twice
    assert [len(found) for found in _told(runtime, body["id"])] == [1, 1]
    runtime.db.dispose()


def test_a_denial_with_nowhere_to_go_still_goes_through_its_job(sqlite_url: str) -> None:
    """A denial's message carries an appeal link, which the job makes: unchanged."""
    runtime = _runtime(sqlite_url)
    desk = Harness(runtime)
    desk.publish()
    body = desk.post(desk.request(desk.payment("30.00"), "40.00")).json()  # more than is left
    assert body["status"] == "denied"
    [message], records = _told(runtime, body["id"])
    assert message.status == "queued" and records == []
    assert len(_tell_jobs(runtime)) == 1
    desk.sweep()
    [message], [record] = _told(runtime, body["id"])
    assert message.status == "recorded" and record.payload["channel"] == "none"
    runtime.db.dispose()


def test_with_a_webhook_configured_the_job_sends_it(sqlite_url: str, receiver: Receiver) -> None:
    assert receiver.server is not None
    runtime = _runtime(
        sqlite_url,
        REFUND_DESK_WEBHOOK_URL=f"http://127.0.0.1:{receiver.server.server_address[1]}",
        REFUND_DESK_WEBHOOK_SECRET="whsec_outbound_0123456789abcdef",
        REFUND_DESK_ALLOW_PRIVATE_CALLBACKS=True,
    )
    desk = Harness(runtime)
    desk.publish()
    body = desk.post(desk.request(desk.payment("30.00"), "20.00")).json()
    assert body["status"] == "refunded"
    [message], records = _told(runtime, body["id"])
    assert message.status == "queued" and records == []
    assert len(_tell_jobs(runtime)) == 1

    desk.sweep()
    [message], [record] = _told(runtime, body["id"])
    assert (message.status, message.channel) == ("sent", "webhook")
    assert record.payload["delivered"] is True
    assert len(receiver.requests) == 1
    runtime.db.dispose()
