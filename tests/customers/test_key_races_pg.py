"""A customer's key on PostgreSQL (FOR SHARE SKIP LOCKED on a live key, else INSERT ... ON
CONFLICT DO NOTHING, else a waiting look in a savepoint and FOR UPDATE for an erased key).
Several `Database`/runtime objects (replicas) and real threads: concurrent first intakes of
one new customer, intakes racing an erasure (which once deadlocked all but one of them)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import func, select, text

from refund_desk.crypto import destroy_customer_key
from refund_desk.runtime import Runtime
from refund_desk.storage.models import CustomerKey
from tests.conftest import make_runtime

pytestmark = pytest.mark.postgres


@pytest.fixture()
def replicas(pg_url: str) -> Iterator[list[Runtime]]:
    runtimes = [make_runtime(pg_url) for _ in range(4)]
    yield runtimes
    for rt in runtimes:
        rt.db.dispose()


def _use_key(rt: Runtime, email_hash: str, value: str) -> tuple[int, str, str]:
    """An intake's key step: the key in the write transaction, a field sealed under it."""
    vault = rt.desk.vault
    with rt.db.write() as session:
        session.execute(text("SET LOCAL lock_timeout = '10s'"))
        cipher = vault.for_customer(session, email_hash)
        token = cipher.encrypt(value)
        assert token is not None
    return cipher.generation, cipher.wrapped, token


def test_concurrent_first_intakes_of_new_customers_end_with_one_key_each(
    replicas: list[Runtime],
) -> None:
    """24 threads across 4 replicas, each round a new customer all of them start with at
    once: no error, one key row, every token readable."""
    errors: list[BaseException] = []
    tokens: list[tuple[str, str]] = []
    lock = threading.Lock()
    rounds = 15
    barrier = threading.Barrier(24)

    def worker(n: int) -> None:
        rt = replicas[n % len(replicas)]
        for r in range(rounds):
            email_hash = rt.desk.vault.email_hash(f"new{r}@example.com")
            try:
                barrier.wait(30)
                _, _, token = _use_key(rt, email_hash, f"v{n}.{r}")
                with lock:
                    tokens.append((f"v{n}.{r}", token))
            except BaseException as exc:
                errors.append(exc)
                barrier.abort()
                return

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, [repr(e)[:300] for e in errors[:3]]
    db = replicas[0].db
    with db.read() as session:
        assert session.scalar(select(func.count()).select_from(CustomerKey)) == rounds
        assert set(session.scalars(select(CustomerKey.generation)).all()) == {1}
    vault = replicas[0].desk.vault
    for value, token in tokens:
        assert vault.decrypt(token) == value


def test_intakes_racing_erasures_of_one_customer(replicas: list[Runtime]) -> None:
    """Intakes of one returning customer on four replicas while the customer is erased
    again and again: the claim is no deadlock in ordinary use, a key erased never used
    again, and every token of the last generation readable."""
    erasing = replicas[0]
    email_hash = erasing.desk.vault.email_hash("ada@example.com")
    _use_key(erasing, email_hash, "first")
    stop = threading.Event()
    errors: list[BaseException] = []
    made: list[tuple[int, str, str, str]] = []  # generation, wrapped, value, token
    lock = threading.Lock()

    def intake(n: int) -> None:
        rt = replicas[n % len(replicas)]
        i = 0
        while not stop.is_set():
            i += 1
            try:
                gen, wrapped, token = _use_key(rt, email_hash, f"{n}.{i}")
            except BaseException as exc:
                errors.append(exc)
                continue
            with lock:
                made.append((gen, wrapped, f"{n}.{i}", token))

    destroyed: list[str] = []

    def erase() -> None:
        while not stop.is_set():
            time.sleep(0.01)
            try:
                with erasing.db.write() as session:
                    session.execute(text("SET LOCAL lock_timeout = '10s'"))
                    row = session.scalars(
                        select(CustomerKey).where(CustomerKey.email_hash == email_hash)
                    ).first()
                    wrapped = row.key_enc if row is not None else None
                    if destroy_customer_key(session, email_hash, erasing.desk.now()) and wrapped:
                        destroyed.append(wrapped)
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=intake, args=(n,)) for n in range(12)]
    threads.append(threading.Thread(target=erase))
    for t in threads:
        t.start()
    time.sleep(8)
    stop.set()
    for t in threads:
        t.join(60)
    kinds = sorted({type(e).__name__ + ": " + str(e).splitlines()[0][:120] for e in errors})
    assert not errors, (len(errors), kinds[:5], len(made), len(destroyed))
    assert len(destroyed) > 3


def test_intakes_waiting_on_an_erasure_all_go_through_when_it_commits(
    replicas: list[Runtime],
) -> None:
    """Five intakes of a returning customer (on four replicas) wait for an erasure that holds
    the key row; it commits. Each should then make or use the new key (generation 2). With
    the look that keeps its FOR SHARE on the row it then does not return, every one of them
    holds a shared lock and waits for the others' to lock for update: PostgreSQL breaks the
    cycle one deadlock_timeout (1 s) at a time, failing four of the five."""
    erasing = replicas[0]
    email_hash = erasing.desk.vault.email_hash("ada@example.com")
    _use_key(erasing, email_hash, "first")
    results: list[object] = []
    lock = threading.Lock()

    def intake(n: int) -> None:
        try:
            outcome: object = _use_key(replicas[n % len(replicas)], email_hash, f"v{n}")[0]
        except BaseException as exc:
            outcome = exc
        with lock:
            results.append(outcome)

    admin = erasing.db
    threads = [threading.Thread(target=intake, args=(n,)) for n in range(5)]
    with erasing.db.write() as session:
        assert destroy_customer_key(session, email_hash, erasing.desk.now())
        session.flush()
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until all five wait on the key row
            with admin.read() as look:
                waiting = look.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND wait_event_type = 'Lock'"
                    )
                )
            if waiting == 5:
                break
            time.sleep(0.02)
        assert waiting == 5
    started = time.monotonic()
    for t in threads:
        t.join(30)
    took = time.monotonic() - started
    failed = [repr(r)[:160] for r in results if isinstance(r, BaseException)]
    assert not failed, (len(failed), failed[:2], f"{took:.1f} s")
    assert results == [2] * 5
