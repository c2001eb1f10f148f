"""PostgreSQL: transactions using a customer's live key do not wait for each other; an
erasure waits for all of them, and they wait for an erasure.

Before, every intake (and every advice sealed for the customer) locked the key row for
update, so one customer's requests were captured one at a time across every replica. Now a
live key is held with a shared lock; only a row to write (a new or an erased customer) is
locked for update, and an erasure locks it for update first, as before.
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy.exc import OperationalError

from refund_desk.crypto import lock_customer_key
from refund_desk.runtime import Runtime
from refund_desk.storage.models import CustomerKey
from tests.customers.conftest import open_write
from tests.helpers import CUSTOMER, Harness


def test_two_transactions_use_one_customers_key_at_once(pg_runtime: Runtime) -> None:
    desk = Harness(pg_runtime)
    desk.publish()
    assert desk.post(desk.request(desk.payment())).status_code == 201  # the key exists
    vault = pg_runtime.desk.vault
    email_hash = vault.email_hash(CUSTOMER)
    with open_write(pg_runtime) as first:
        held = vault.for_customer(first, email_hash)
        with open_write(pg_runtime) as second:  # would wait 2 s and fail with a lock for update
            again = vault.for_customer(second, email_hash)
        assert again.generation == held.generation


def test_an_erasure_waits_for_a_transaction_using_the_key(pg_runtime: Runtime) -> None:
    desk = Harness(pg_runtime)
    desk.publish()
    assert desk.post(desk.request(desk.payment())).status_code == 201
    vault = pg_runtime.desk.vault
    email_hash = vault.email_hash(CUSTOMER)
    with open_write(pg_runtime) as using:
        vault.for_customer(using, email_hash)
        with (
            pytest.raises(OperationalError, match="lock timeout"),
            open_write(pg_runtime, "300ms") as erasing,
        ):
            lock_customer_key(erasing, email_hash)


def test_a_transaction_waits_for_an_erasure_and_then_makes_a_new_key(
    pg_runtime: Runtime,
) -> None:
    desk = Harness(pg_runtime)
    desk.publish()
    assert desk.post(desk.request(desk.payment())).status_code == 201
    vault = pg_runtime.desk.vault
    email_hash = vault.email_hash(CUSTOMER)
    erasing_started, erased = threading.Event(), threading.Event()
    generations: list[int] = []
    used_before_erasure_ended: list[bool] = []

    def intake() -> None:
        erasing_started.wait(5)
        with open_write(pg_runtime, "10s") as session:
            generations.append(vault.for_customer(session, email_hash).generation)
            used_before_erasure_ended.append(not erased.is_set())

    worker = threading.Thread(target=intake)
    worker.start()
    with open_write(pg_runtime) as erasing:
        row = lock_customer_key(erasing, email_hash)
        assert isinstance(row, CustomerKey)
        erasing_started.set()
        worker.join(0.5)
        assert worker.is_alive(), "an intake used the key while an erasure held it"
        row.key_enc, row.erased_at = None, row.created_at  # the key destroyed
        erasing.add(row)
        erased.set()
    worker.join(10)
    assert generations == [2]  # a new key, a new generation
    assert used_before_erasure_ended == [False]


def test_a_live_key_is_used_and_held_shared(pg_runtime: Runtime) -> None:
    """A returning customer's live key is used, never replaced, and held shared: an erasure
    waits, a second user does not."""
    desk = Harness(pg_runtime)
    desk.publish()
    assert desk.post(desk.request(desk.payment())).status_code == 201
    vault = pg_runtime.desk.vault
    email_hash = vault.email_hash(CUSTOMER)
    with pg_runtime.db.read() as session:
        stored = session.get(CustomerKey, email_hash)
        assert stored is not None
    with open_write(pg_runtime) as using:
        used = vault.for_customer(using, email_hash)
        assert used.generation == stored.generation
        assert using.get(CustomerKey, email_hash).key_enc == stored.key_enc
        with open_write(pg_runtime) as second:  # a lock for update would make it wait
            assert vault.for_customer(second, email_hash).generation == stored.generation
        with (
            pytest.raises(OperationalError, match="lock timeout"),
            open_write(pg_runtime, "300ms") as erasing,
        ):
            lock_customer_key(erasing, email_hash)
