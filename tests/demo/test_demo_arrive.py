"""The demo's sample stream files each sample once, under a key only its job writes: a case an
API key planted with the sample's external id is never taken for the sample's own."""

from __future__ import annotations

from functools import partial

from sqlalchemy import select
from sqlmodel import col

from refund_desk.demo.runner import ARRIVE, arrive
from refund_desk.jobs.queue import enqueue
from refund_desk.runtime import Runtime
from refund_desk.storage.models import Case
from tests.helpers import CUSTOMER, Harness


def _sample_job(rt: Runtime, payment: str) -> int:
    with rt.db.write() as session:
        job = enqueue(
            session,
            kind=ARRIVE,
            payload={
                "n": 0,
                "request": {
                    "payment": payment,
                    "email": CUSTOMER,
                    "currency": "USD",
                    "amount": "20.00",
                    "message": "The vase arrived broken.",
                    "source": "api",
                },
                "filed_by": None,
            },
        )
        session.flush()
        assert job.id is not None
        return job.id


def test_a_planted_case_with_the_samples_id_is_not_taken_for_it(runtime: Runtime) -> None:
    desk = Harness(runtime)
    desk.publish()
    runtime.desk.jobs.register(ARRIVE, partial(arrive, runtime.desk))
    planted = desk.post({**desk.request(desk.payment("30.00")), "external_id": "demo-0"})
    assert planted.status_code == 201, planted.text
    job = _sample_job(runtime, desk.payment("30.00"))
    assert runtime.desk.jobs.run_now(job)
    with runtime.db.read() as session:
        ids = session.scalars(select(col(Case.id)).where(col(Case.external_id) == "demo-0")).all()
    assert len(ids) == 2 and planted.json()["id"] in ids  # the sample filed its own


def test_a_retried_sample_files_once(runtime: Runtime) -> None:
    desk = Harness(runtime)
    desk.publish()
    runtime.desk.jobs.register(ARRIVE, partial(arrive, runtime.desk))
    payment = desk.payment("30.00")
    first, again = _sample_job(runtime, payment), _sample_job(runtime, payment)
    for job in (first, again):  # the same sample twice: a retry of its job
        assert runtime.desk.jobs.run_now(job)
    with runtime.db.read() as session:
        ids = session.scalars(select(col(Case.id)).where(col(Case.external_id) == "demo-0")).all()
    assert len(ids) == 1
