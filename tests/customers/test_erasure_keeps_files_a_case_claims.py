"""Found in review: a file a committed case refers to was deleted by an erasure's
`evidence.delete` job.

Retention erases one long-closed case of a customer who still has a live case (so their key,
and the names it makes, stay). Its photo is unreferenced then, so the erasure queues
`evidence.delete` for it. Before that job runs, the same customer sends the same photo with a
new request: `put` writes the same name again and the new, committed case refers to it. The job
then deletes the file by name without looking again: the new case's photo is gone."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlmodel import col

from refund_desk import clock
from refund_desk.cases import evidence
from refund_desk.customers import erasure
from refund_desk.storage.models import Job
from tests.customers.conftest import PHOTO, Channels


def _mail(channels: Channels, payment: str, amount: str, n: int, photo: bool) -> str:
    return channels.mailed_case(payment, amount, [PHOTO] if photo else [], n)


def test_a_photo_sent_again_after_a_retention_erasure_survives_the_erasures_delete_job(
    channels: Channels,
) -> None:
    old = _mail(channels, channels.payment("30.00"), "20.00", 1, photo=True)
    channels.sweep()
    assert channels.get(old)["status"] == "refunded"
    store = evidence.EvidenceStore(channels.runtime.settings.evidence_path())
    with clock.travel(timedelta(days=800)):
        # A live case keeps the customer's key (and so the names it makes) through retention.
        live = _mail(channels, channels.payment("900.00"), "600.00", 2, photo=False)
        assert channels.get(live)["status"] == "awaiting_approval"
        assert erasure.retention(channels.runtime.desk, days=730, evidence=store) == 1
        # The same photo again, with a new request, before the sweep runs evidence.delete.
        new = _mail(channels, channels.payment("30.00"), "20.00", 3, photo=True)
        assert channels.evidence_file(new) == PHOTO
        [name] = [i["file"] for i in channels.case(new).evidence or [] if i["kind"] == "file"]
        with channels.runtime.db.read() as session:
            waiting = session.scalars(
                select(Job).where(
                    col(Job.kind) == erasure.DELETE_FILES_JOB, col(Job.status) == "pending"
                )
            ).all()
        assert [j.payload["files"] for j in waiting] == [[name]]  # the same name, queued
        channels.sweep(seconds_ahead=0)
        assert channels.evidence_file(new) == PHOTO  # the committed case's file is still there
