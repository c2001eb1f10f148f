"""A customer's key row held FOR UPDATE by something that is not an
erasure (evidence `discard` / an unclaimed-files sweep, retention that keeps the key). The
shared look (FOR SHARE SKIP LOCKED) skips the row, the intake goes to INSERT ... ON CONFLICT
DO NOTHING and then SELECT ... FOR UPDATE: once the holder commits, the intake holds the
live key's row FOR UPDATE until it commits, and every other intake of that customer skips
it too and queues behind it (before, all of them took FOR SHARE and ran side by side)."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import OperationalError

from refund_desk.crypto import lock_customer_key
from refund_desk.runtime import Runtime
from refund_desk.storage.models import CustomerKey
from tests.conftest import make_runtime
from tests.customers.conftest import open_write
from tests.helpers import CUSTOMER, Harness

pytestmark = pytest.mark.postgres


def _customer(pg_runtime: Runtime) -> str:
    desk = Harness(pg_runtime)
    desk.publish()
    assert desk.post(desk.request(desk.payment())).status_code == 201  # the key exists
    return pg_runtime.desk.vault.email_hash(CUSTOMER)


def _intake_after_a_discard(
    pg_runtime: Runtime,
    email_hash: str,
    *,
    by: Runtime | None = None,
) -> tuple[threading.Thread, threading.Event, threading.Event, list[object]]:
    """A discard-like transaction holds the key row FOR UPDATE; an intake (on `by`, another
    replica, if given) starts meanwhile, waits, gets the key once
    the discard commits and keeps its transaction open until `finish` is set."""
    intake_runtime = by or pg_runtime
    vault = intake_runtime.desk.vault
    got_key, finish = threading.Event(), threading.Event()
    out: list[object] = []
    holding = threading.Event()
    release = threading.Event()

    def discard() -> None:
        with open_write(pg_runtime, "5s") as session:
            assert lock_customer_key(session, email_hash) is not None
            holding.set()
            release.wait(10)

    def intake() -> None:
        try:
            with open_write(intake_runtime, "10s") as session:
                cipher = vault.for_customer(session, email_hash)
                out.append(cipher)
                got_key.set()
                finish.wait(10)
        except BaseException as exc:  # pragma: no cover - reported by the test
            out.append(exc)
            got_key.set()

    holder = threading.Thread(target=discard)
    holder.start()
    assert holding.wait(5)
    worker = threading.Thread(target=intake)
    worker.start()
    worker.join(0.3)  # it waits for the discard (as it should)
    release.set()
    holder.join(5)
    assert got_key.wait(5)
    return worker, got_key, finish, out


def test_intakes_do_not_wait_on_each_other_after_a_discard_held_the_key(
    pg_runtime: Runtime,
) -> None:
    """The claim: intakes of one customer do not wait on each other. After a discard held
    the row, the intake that waited for it holds the row FOR UPDATE, and a second intake of
    the same customer (live key, nothing being erased) waits for its whole transaction."""
    email_hash = _customer(pg_runtime)
    vault = pg_runtime.desk.vault
    worker, _, finish, out = _intake_after_a_discard(pg_runtime, email_hash)
    try:
        assert not isinstance(out[0], BaseException), out
        try:
            with open_write(pg_runtime, "500ms") as second:
                again = vault.for_customer(second, email_hash)
        except OperationalError as exc:
            pytest.fail(
                "a second intake of a customer with a live key waited on the first intake "
                f"(it holds the key row FOR UPDATE since a discard held it): {exc.orig}"
            )
        assert again.generation == out[0].generation  # type: ignore[attr-defined]
    finally:
        finish.set()
        worker.join(10)


def test_after_a_discard_the_intake_holds_no_lock_for_update_on_a_live_key(
    pg_runtime: Runtime,
) -> None:
    """The same, seen in pg_locks terms: the intake's lock on the live key row should be a
    shared one (FOR SHARE), as every other intake's, not FOR UPDATE."""
    email_hash = _customer(pg_runtime)
    worker, _, finish, _ = _intake_after_a_discard(pg_runtime, email_hash)
    try:
        with pg_runtime.db.engine.connect() as conn:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS pgrowlocks"))
            conn.commit()
            modes = (
                conn.execute(text("SELECT unnest(modes) FROM pgrowlocks('customer_keys')"))
                .scalars()
                .all()
            )
        assert modes and all(m == "For Share" for m in modes), modes
    finally:
        finish.set()
        worker.join(10)


def test_after_a_discard_the_intake_uses_the_one_live_key(pg_runtime: Runtime, pg_url: str) -> None:
    """No second key, no new generation: another replica's intake gets the key as it is."""
    email_hash = _customer(pg_runtime)
    vault = pg_runtime.desk.vault
    with pg_runtime.db.read() as session:
        before = session.get(CustomerKey, email_hash)
        assert before is not None
        wrapped, generation = before.key_enc, before.generation
    other = make_runtime(pg_url)  # another replica
    try:
        worker, _, finish, got = _intake_after_a_discard(pg_runtime, email_hash, by=other)
        finish.set()  # the intake commits
        worker.join(10)
        assert not worker.is_alive()
        cipher = got[0]
        assert cipher.generation == generation  # type: ignore[attr-defined]
        assert cipher.wrapped == wrapped  # type: ignore[attr-defined]
        with pg_runtime.db.read() as session:
            assert session.scalar(select(func.count()).select_from(CustomerKey)) == 1
            row = session.get(CustomerKey, email_hash)
            assert row is not None and row.key_enc == wrapped and row.generation == generation
        token = cipher.encrypt("still readable")  # type: ignore[attr-defined]
        assert vault.decrypt(token) == "still readable"
    finally:
        other.db.dispose()
