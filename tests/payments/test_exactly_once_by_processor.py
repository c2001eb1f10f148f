"""Exactly once on every processor at the network edge (Stripe's fake with the real SDK, the
PayPal emulator with our httpx client), on SQLite and PostgreSQL: a crash, a timeout or a
5xx after the refund was made, a processor that ignores request ids, two replicas on one job,
fifty identical requests, a partial refund, and a refund over what is left."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import select

from refund_desk.cases import decide
from refund_desk.cases.ports import Processor, ProcessorRefund
from refund_desk.storage.audit import verify_chain
from refund_desk.storage.models import Case, Execution
from tests.cases.advance_common import advance_job, as_claimed, meet_after_the_processor, together
from tests.conftest import TEST_SECRET, SimulatedCrash
from tests.helpers import LiveServer
from tests.payments.remotes import Remote, RemoteHarness


@pytest.fixture()
def desk(any_db_url: str, remote: Remote) -> Iterator[RemoteHarness]:
    runtime = remote.runtime(any_db_url)
    harness = RemoteHarness(runtime, remote)
    harness.publish()
    yield harness
    runtime.db.dispose()


def _only_execution(desk: RemoteHarness) -> Execution:
    with desk.runtime.db.read() as session:
        [execution] = session.scalars(select(Execution)).all()
        return execution


def test_an_automatic_refund_is_made_once_and_names_our_execution(desk: RemoteHarness) -> None:
    payment = desk.payment("30.00")
    body = desk.post(desk.request(payment, "20.00")).json()
    assert body["status"] == "refunded", (body["park_reason"], body["decision"])
    assert desk.remote.refunds(payment) == [(2000, "succeeded")]
    execution = _only_execution(desk)
    [refund] = [
        r for r in desk.runtime.desk.processor.list_refunds(payment) if r.id
    ]  # as the lookup before a create sees it
    assert refund.metadata["execution_id"] == execution.id
    assert execution.processor_refund_id == refund.id
    desk.sweep()
    assert desk.remote.creates() == 1


@pytest.mark.parametrize("fault", ["timeout", "server_error"])
def test_an_unknown_outcome_after_success_ends_with_one_refund(
    desk: RemoteHarness, fault: str
) -> None:
    payment = desk.payment("30.00")
    if fault == "timeout":
        desk.remote.stall_after_refund(1.5)  # made, then answered after our 1 s timeout
    else:
        desk.remote.error_after_refund()  # made, then a 500
    body = desk.post(desk.request(payment, "20.00")).json()
    assert body["status"] == "executing", body
    assert len(desk.remote.refunds(payment)) == 1
    desk.sweep()
    assert desk.get(body["id"])["status"] == "refunded"
    assert desk.remote.refunds(payment) == [(2000, "succeeded")]
    assert desk.remote.creates() == 1, "the retry looked the refund up instead of sending it"


def test_a_processor_that_ignores_request_ids_still_refunds_once(desk: RemoteHarness) -> None:
    desk.remote.ignore_request_ids()
    desk.remote.stall_after_refund(1.5)
    payment = desk.payment("30.00")
    body = desk.post(desk.request(payment, "20.00")).json()
    assert body["status"] == "executing", body
    for _ in range(3):
        desk.sweep()
    assert desk.get(body["id"])["status"] == "refunded"
    assert desk.remote.refunds(payment) == [(2000, "succeeded")]


class AfterCreate:
    """The real processor, whose first create succeeds and then 'fails' on our side."""

    def __init__(self, real: Processor, failure: BaseException) -> None:
        self.real, self.failure, self.created = real, failure, 0
        self.name, self.timeout_seconds = real.name, real.timeout_seconds

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def create_refund(self, **kwargs: object) -> ProcessorRefund:
        refund = self.real.create_refund(**kwargs)  # type: ignore[arg-type]
        self.created += 1
        if self.created == 1:
            raise self.failure
        return refund


def test_a_crash_after_success_ends_with_one_refund(any_db_url: str, remote: Remote) -> None:
    processor = AfterCreate(remote.processor(timeout=5.0), SimulatedCrash())
    runtime = remote.runtime(any_db_url, processor)  # type: ignore[arg-type]
    desk = RemoteHarness(runtime, remote)
    desk.publish()
    payment = desk.payment("30.00")
    with pytest.raises(SimulatedCrash):
        desk.post(desk.request(payment, "20.00"))
    assert len(remote.refunds(payment)) == 1  # made; our record does not know it yet
    desk.sweep(seconds_ahead=3600)  # after the crashed run's lease ran out
    with runtime.db.read() as session:
        [case] = session.scalars(select(Case)).all()
    assert case.status == "refunded"
    assert remote.refunds(payment) == [(2000, "succeeded")]
    assert processor.created == 1, "the executor looked the refund up instead of re-creating it"
    runtime.db.dispose()


def test_a_partial_refund_then_the_rest_then_one_over_what_is_left(desk: RemoteHarness) -> None:
    payment = desk.payment("30.00")
    first = desk.post(desk.request(payment, "20.00")).json()
    second = desk.post(desk.request(payment, "10.00")).json()
    assert (first["status"], second["status"]) == ("refunded", "refunded"), (first, second)
    over = desk.post(desk.request(payment, "5.00")).json()
    assert over["status"] == "denied" and over["decision"]["rule"].endswith("exceeds-refundable")
    assert sorted(desk.remote.refunds(payment)) == [(1000, "succeeded"), (2000, "succeeded")]
    assert desk.remote.creates() == 2


def test_two_replicas_running_one_job_at_once_pay_once(any_db_url: str, remote: Remote) -> None:
    replicas = [RemoteHarness(remote.runtime(any_db_url), remote) for _ in range(2)]
    a = replicas[0]
    a.publish()
    a.runtime.desk.jobs_elsewhere = True  # the job waits in the table for the replicas
    payment = a.payment("30.00")
    case_id = a.post(a.request(payment, "20.00")).json()["id"]
    job = advance_job(a, case_id)
    meet_after_the_processor(replicas)
    errors = together(
        [lambda h=h: decide.advance(h.runtime.desk, as_claimed(job)) for h in replicas]
    )
    assert not errors, errors
    for h in replicas:
        del h.runtime.desk.processor.payment  # the meeting point goes
        h.sweep()
    assert a.get(case_id)["status"] == "refunded"
    assert remote.refunds(payment) == [(2000, "succeeded")]
    for h in replicas:
        h.runtime.db.dispose()


def test_fifty_identical_requests_give_one_refund(any_db_url: str, remote: Remote) -> None:
    # fifty at once keep a loopback processor busy for more than our tests' usual 1 s timeout
    desk = RemoteHarness(remote.runtime(any_db_url, remote.processor(timeout=15.0)), remote)
    desk.publish()
    payment = desk.payment("30.00")
    server = LiveServer(desk.runtime)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            headers = {"Authorization": f"Bearer {desk.key}"}
            body = desk.request(payment, "20.00")

            def one(_: int) -> httpx.Response:
                return client.post("/api/v1/refund-requests", json=body, headers=headers)

            with ThreadPoolExecutor(max_workers=50) as pool:
                responses = list(pool.map(one, range(50)))
    finally:
        server.stop()
    assert {r.status_code for r in responses} == {201}
    statuses = [r.json()["status"] for r in responses]
    assert statuses.count("refunded") == 1
    assert statuses.count("awaiting_approval") == 49
    assert desk.remote.refunds(payment) == [(2000, "succeeded")]
    with desk.runtime.db.read() as session:
        assert verify_chain(TEST_SECRET, session).ok
    desk.runtime.db.dispose()
