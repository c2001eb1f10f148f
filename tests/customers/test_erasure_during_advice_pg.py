"""PostgreSQL: an erasure that arrives while the offline advisor answers inside `advance`'s
transaction is not aborted as a deadlock.

An erasure locks the customer's key row, then their cases. `advance` holds the customer's key
under a shared lock before it locks the case (`crypto.hold_key_of_case`), as the erasure
orders them: the erasure waits for the advice's commit, or the advice for the erasure's (and
finds the case erased). Without that order, the advisor's whole run inside the transaction
was a window for a lock cycle (PostgreSQL aborted the erasure). The control test: the same
timing with an advisor that calls out, asked with no transaction open.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from refund_desk.advisor.offline import OfflineAdvisor
from refund_desk.customers import erasure
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor
from tests.cases.advance_common import case_row
from tests.conftest import make_runtime
from tests.helpers import CUSTOMER, Harness

pytestmark = pytest.mark.postgres


@pytest.fixture()
def replicas(pg_url: str) -> Iterator[list[Harness]]:
    runtimes = [make_runtime(pg_url) for _ in range(2)]
    harnesses = [Harness(rt) for rt in runtimes]
    harnesses[0].publish()
    yield harnesses
    for rt in runtimes:
        rt.db.dispose()


class _ErasureArrives:
    """Answers as the offline advisor; while it answers, another replica starts erasing the
    customer (as an integrator's DELETE /customers would) and is given time to get going."""

    name = "offline"

    def __init__(self, other: Runtime, *, local: bool) -> None:
        if local:
            self.local = True
        self.other = other
        self.inner = OfflineAdvisor()
        self.thread: threading.Thread | None = None
        self.outcome: list[Any] = []

    def advise(self, request: Any) -> Any:
        def erase() -> None:
            try:
                self.outcome.append(
                    erasure.erase_customer(
                        self.other.desk, CUSTOMER, actor=Actor("cli", "tests"), evidence=None
                    )
                )
            except BaseException as exc:
                self.outcome.append(exc)

        if self.thread is None:
            self.thread = threading.Thread(target=erase, daemon=True)
            self.thread.start()
            time.sleep(0.5)  # the erasure has the key's lock and waits for what it needs next
        return self.inner.advise(request)


def _run(replicas: list[Harness], *, local: bool) -> tuple[_ErasureArrives, str]:
    a, b = replicas
    a.runtime.desk.jobs_elsewhere = True  # the advance job waits for the sweep below
    payment = a.payment("30.00")
    body = a.post(a.request(payment, "20.00", message="The blue vase arrived shattered")).json()
    advisor = _ErasureArrives(b.runtime, local=local)
    a.runtime.desk.advisor = advisor
    a.runtime.desk.jobs_elsewhere = False
    a.sweep()
    assert advisor.thread is not None
    advisor.thread.join(30)
    a.sweep()  # an advance that lost the race is retried
    return advisor, body["id"]


def test_an_erasure_during_a_local_advice_is_not_aborted(replicas: list[Harness]) -> None:
    advisor, case_id = _run(replicas, local=True)
    errors = [o for o in advisor.outcome if isinstance(o, BaseException)]
    assert not errors, errors  # not a DeadlockDetected while updating "cases"
    case = case_row(replicas[0], case_id)
    assert case.erased_at is not None
    assert "shattered" not in str(case.advice)


def test_control_an_erasure_during_a_network_advice_goes_through(
    replicas: list[Harness],
) -> None:
    """Same timing, an advisor without `local`: asked with no transaction open (passes)."""
    advisor, case_id = _run(replicas, local=False)
    errors = [o for o in advisor.outcome if isinstance(o, BaseException)]
    assert not errors, errors
    case = case_row(replicas[0], case_id)
    assert case.erased_at is not None
    assert (case.advice or {}).get("summary") == erasure.ERASED
