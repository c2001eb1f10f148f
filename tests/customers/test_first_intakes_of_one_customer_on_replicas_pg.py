"""Concurrent first intakes of one new customer through the HTTP API of several
runtimes (replicas) on one PostgreSQL database: every request a case, one key, every
case's personal fields readable; then the erase API racing intakes of that customer."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import func, select

from refund_desk.runtime import Runtime
from refund_desk.storage.audit import verify_chain
from refund_desk.storage.models import Case, CustomerKey
from tests.conftest import TEST_SECRET, make_runtime
from tests.helpers import Harness

pytestmark = pytest.mark.postgres


@pytest.fixture()
def desks(pg_url: str) -> Iterator[list[Harness]]:
    runtimes: list[Runtime] = [make_runtime(pg_url) for _ in range(4)]
    harnesses = [Harness(rt) for rt in runtimes]
    harnesses[0].publish()
    yield harnesses
    for rt in runtimes:
        rt.db.dispose()


def test_first_intakes_of_one_new_customer_on_four_replicas(desks: list[Harness]) -> None:
    errors: list[str] = []
    made: list[str] = []
    lock = threading.Lock()
    for r in range(4):
        email = f"new{r}@example.com"
        payments = [desks[0].payment("30.00", email=email) for _ in range(8)]
        barrier = threading.Barrier(8)

        def one(
            n: int,
            email: str = email,
            payments: list[str] = payments,
            barrier: threading.Barrier = barrier,
        ) -> None:
            desk = desks[n % len(desks)]
            barrier.wait(30)
            body = desk.request(payments[n], "20.00") | {"email": email}
            response = desk.post(body)
            with lock:
                if response.status_code != 201:
                    errors.append(f"{response.status_code} {response.text[:200]}")
                else:
                    made.append(response.json()["id"])

        ts = [threading.Thread(target=one, args=(n,)) for n in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
    assert not errors, errors[:3]
    runtime = desks[0].runtime
    with runtime.db.read() as session:
        assert session.scalar(select(func.count()).select_from(CustomerKey)) == 4
        cases = session.scalars(select(Case)).all()
        assert len(cases) == 32
        for case in cases:
            email = runtime.desk.vault.decrypt(case.email_enc, session=session)
            assert email is not None and email.startswith("new"), case.id
        assert verify_chain(TEST_SECRET, session).ok


def test_intakes_waiting_for_an_erasure_through_the_api(
    desks: list[Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A returning customer is erased (erase_customer, as the API and CLI run it) while five
    intakes of theirs arrive on four replicas: they wait for the erasure, then each files its
    case under the customer's new key. A client should not see a 500 for it."""
    import time

    from refund_desk.customers import erasure
    from refund_desk.storage.audit import Actor

    first = desks[0]
    payments = [first.payment("30.00") for _ in range(6)]
    assert first.post(first.request(payments[0], "20.00")).status_code == 201
    real = erasure._erase_cases

    def slow(*args, **kwargs):  # type: ignore[no-untyped-def]
        out = real(*args, **kwargs)
        time.sleep(1.0)  # the key row held for update, as a longer erasure holds it
        return out

    monkeypatch.setattr(erasure, "_erase_cases", slow)
    statuses: list[str] = []
    lock = threading.Lock()

    def one(n: int) -> None:
        desk = desks[n % len(desks)]
        try:  # the test client raises what the app raised (a 500 to a real client)
            response = desk.post(desk.request(payments[n + 1], "20.00"))
            status = f"{response.status_code} {response.text[:160]}"
        except BaseException as exc:
            status = f"500 {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        with lock:
            statuses.append(status)

    eraser = threading.Thread(
        target=erasure.erase_customer,
        args=(first.runtime.desk, "ada@example.com"),
        kwargs={"actor": Actor("cli", "review"), "evidence": None},
    )
    eraser.start()
    time.sleep(0.3)  # the erasure holds the key row now
    ts = [threading.Thread(target=one, args=(n,)) for n in range(5)]
    for t in ts:
        t.start()
    eraser.join(30)
    for t in ts:
        t.join(30)
    bad = [s for s in statuses if not s.startswith("201")]
    assert not bad, (len(bad), bad[:2])
