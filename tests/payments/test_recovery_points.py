"""A power cut at each of the executor's recovery points, on each processor: one refund, always.

record written -> refund requested -> refund known -> finished. After each cut the lease
expires, the next sweep resumes from the database, and the processor holds exactly one refund.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select

from refund_desk.cases import executor
from refund_desk.cases.ports import Processor
from refund_desk.jobs.queue import ClaimedJob
from refund_desk.storage.models import Execution, Job
from tests.conftest import SimulatedCrash
from tests.fakes.stripe_fake import FakeStripeServer
from tests.payments.conftest import StripeHarness
from tests.payments.remotes import Remote, RemoteHarness


class CutOnce:
    """The real adapter; the process 'dies' once, at the chosen call."""

    def __init__(self, real: Processor, method: str, after: bool) -> None:
        self.real, self.method, self.after, self.cut = real, method, after, False
        self.name, self.timeout_seconds = real.name, real.timeout_seconds

    def __getattr__(self, name: str) -> Any:
        call: Callable[..., Any] = getattr(self.real, name)
        if name != self.method or self.cut:
            return call

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.cut = True
            if not self.after:
                raise SimulatedCrash()
            call(*args, **kwargs)
            raise SimulatedCrash()

        return wrapped


@pytest.mark.parametrize(
    ("method", "after", "point"),
    [
        ("list_refunds", False, "record written"),
        ("create_refund", True, "refund requested"),
        ("retrieve_refund", False, "refund known"),
    ],
)
def test_power_cut_at_each_recovery_point(
    any_db_url: str, remote: Remote, method: str, after: bool, point: str
) -> None:
    processor = CutOnce(remote.processor(), method, after)
    runtime = remote.runtime(any_db_url, processor)  # type: ignore[arg-type]
    desk = RemoteHarness(runtime, remote)
    desk.publish()
    payment = remote.pay("30.00")
    if point == "refund known":
        remote.next_refund_pending()
        body = desk.post(desk.request(payment, "20.00")).json()
        assert body["status"] == "executing"
        remote.complete_pending(payment)
        with pytest.raises(SimulatedCrash):
            desk.sweep(seconds_ahead=120)  # the pending re-check dies asking for the refund
    else:
        with pytest.raises(SimulatedCrash):
            desk.post(desk.request(payment, "20.00"))
    with runtime.db.read() as session:
        [execution] = session.scalars(select(Execution)).all()
    assert execution.status == "reserved", f"the record was written before the cut ({point})"
    desk.sweep(seconds_ahead=3600)
    assert desk.get(execution.case_id)["status"] == "refunded"
    assert remote.refunds(payment) == [(2000, "succeeded")]
    runtime.db.dispose()


def test_a_finished_execution_run_again_does_nothing(
    on_fake: StripeHarness, fake_stripe: FakeStripeServer
) -> None:
    """The cut after the last commit: the job is re-run and finds the case finished."""
    payment = fake_stripe.fake.pay(3000)
    body = on_fake.post(on_fake.request(payment, "20.00")).json()
    assert body["status"] == "refunded"
    with on_fake.runtime.db.read() as session:
        [job] = session.scalars(select(Job).where(Job.kind == "execute")).all()
    assert job.id is not None
    claimed = ClaimedJob(job.id, job.kind, job.payload, job.attempt + 1, 0, job.max_attempts)
    executor.execute(on_fake.runtime.desk, claimed)
    assert len(fake_stripe.fake.refunds) == 1
    assert on_fake.get(body["id"])["status"] == "refunded"
