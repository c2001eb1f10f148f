"""A customer's key on PostgreSQL, the insert first when this process knows no key of
theirs (`Vault.for_customer` with a fresh `ready_cipher`, `_made_live`, `forget`).

Several `Runtime`s on one database stand for several processes, each with its own Vault
memory. Attacks: a live key found by the insert-first path is used, never replaced, and held
with a shared lock (an erasure waits for the transaction; another transaction using the key
does not); an erased key gets a new generation; concurrent first intakes of one new customer
in several processes end with one key; an erasure between a capture's encryption and its
transaction is never defeated (the erased key is never used again, the case is sealed under
the live key).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import OperationalError
from sqlmodel import Session

from refund_desk.customers import erasure
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor, verify_chain
from refund_desk.storage.crypto import destroy_customer_key, lock_customer_key
from refund_desk.storage.models import Case, CustomerKey
from tests.conftest import TEST_SECRET, make_runtime
from tests.helpers import CUSTOMER, Harness

pytestmark = pytest.mark.postgres


@pytest.fixture()
def procs(pg_url: str) -> Iterator[list[Runtime]]:
    rts = [make_runtime(pg_url) for _ in range(4)]
    yield rts
    for rt in rts:
        rt.db.dispose()


@contextmanager
def open_write(rt: Runtime, lock_timeout: str = "2s") -> Iterator[Session]:
    with rt.db.write() as session:
        session.execute(text(f"SET LOCAL lock_timeout = '{lock_timeout}'"))
        yield session


def _key_row(rt: Runtime, email_hash: str) -> CustomerKey | None:
    with rt.db.read() as session:
        return session.get(CustomerKey, email_hash)


def _make_key(rt: Runtime, email_hash: str) -> tuple[int, str]:
    vault = rt.desk.vault
    with rt.db.write() as session:
        cipher = vault.for_customer(session, email_hash, ready=vault.ready_cipher(email_hash))
    vault.remember(cipher)
    return cipher.generation, cipher.wrapped


def test_a_process_that_knows_no_key_uses_the_live_one_and_never_replaces_it(
    procs: list[Runtime],
) -> None:
    a, b = procs[0], procs[1]
    email_hash = a.desk.vault.email_hash(CUSTOMER)
    gen, wrapped = _make_key(a, email_hash)
    ready = b.desk.vault.ready_cipher(email_hash)
    assert ready.fresh and ready.wrapped != wrapped
    with b.db.write() as session:
        cipher = b.desk.vault.for_customer(session, email_hash, ready=ready)
        token = cipher.encrypt("hello")
    assert cipher is not ready and cipher.wrapped == wrapped and cipher.generation == gen
    row = _key_row(a, email_hash)
    assert row is not None and row.key_enc == wrapped and row.generation == gen
    assert a.desk.vault.decrypt(token) == "hello"


def test_the_insert_first_path_holds_the_live_key_shared(procs: list[Runtime]) -> None:
    """B (knowing no key) uses A's live key in an open transaction: another transaction
    using the key does not wait for it, and an erasure does."""
    a, b, c = procs[0], procs[1], procs[2]
    email_hash = a.desk.vault.email_hash(CUSTOMER)
    _make_key(a, email_hash)
    with open_write(b) as using:
        b.desk.vault.for_customer(using, email_hash, ready=b.desk.vault.ready_cipher(email_hash))
        # another process knowing the key, and one knowing none: neither waits
        with open_write(a, "500ms") as other:
            a.desk.vault.for_customer(
                other, email_hash, ready=a.desk.vault.ready_cipher(email_hash)
            )
        with open_write(c, "500ms") as other:
            c.desk.vault.for_customer(
                other, email_hash, ready=c.desk.vault.ready_cipher(email_hash)
            )
        # an erasure waits for `using`
        with (
            pytest.raises(OperationalError, match="lock timeout"),
            open_write(procs[3], "300ms") as erasing,
        ):
            lock_customer_key(erasing, email_hash)
    row = _key_row(a, email_hash)
    assert row is not None and row.key_enc is not None and row.generation == 1


def test_an_erased_key_gets_a_new_generation_in_a_process_that_knows_none(
    procs: list[Runtime],
) -> None:
    a, b = procs[0], procs[1]
    email_hash = a.desk.vault.email_hash(CUSTOMER)
    _, old = _make_key(a, email_hash)
    with a.db.write() as session:
        assert destroy_customer_key(session, email_hash, a.desk.now())
    a.desk.vault.forget(email_hash)
    ready = b.desk.vault.ready_cipher(email_hash)
    assert ready.fresh and ready.generation == 1
    with b.db.write() as session:
        cipher = b.desk.vault.for_customer(session, email_hash, ready=ready)
    assert cipher.generation == 2 and cipher.wrapped != old
    row = _key_row(a, email_hash)
    assert row is not None and row.generation == 2 and row.key_enc == cipher.wrapped


def test_a_stale_remembered_key_after_an_erasure_elsewhere_is_never_used(
    procs: list[Runtime],
) -> None:
    """A remembers generation 1; C erases (A's memory is not told); A's next capture gets
    generation 2, and B (knowing none) then uses that same generation-2 key."""
    a, b, c = procs[0], procs[1], procs[2]
    email_hash = a.desk.vault.email_hash(CUSTOMER)
    _, old = _make_key(a, email_hash)
    ready = a.desk.vault.ready_cipher(email_hash)  # encrypted before the transaction
    assert not ready.fresh and ready.wrapped == old
    with c.db.write() as session:
        assert destroy_customer_key(session, email_hash, c.desk.now())
    with a.db.write() as session:
        cipher = a.desk.vault.for_customer(session, email_hash, ready=ready)
    assert cipher is not ready and cipher.generation == 2 and cipher.wrapped != old
    with b.db.write() as session:
        other = b.desk.vault.for_customer(
            session, email_hash, ready=b.desk.vault.ready_cipher(email_hash)
        )
    assert other.generation == 2 and other.wrapped == cipher.wrapped


def test_concurrent_first_intakes_of_one_new_customer_in_four_processes(
    procs: list[Runtime],
) -> None:
    for r in range(10):
        email_hash = procs[0].desk.vault.email_hash(f"n{r}@example.com")
        barrier = threading.Barrier(8)
        got: list[object] = []
        lock = threading.Lock()

        def one(
            n: int,
            email_hash: str = email_hash,
            barrier: threading.Barrier = barrier,
            got: list[object] = got,
            lock: threading.Lock = lock,
        ) -> None:
            rt = procs[n % 4]
            try:
                ready = rt.desk.vault.ready_cipher(email_hash)
                barrier.wait(30)
                with open_write(rt, "10s") as session:
                    cipher = rt.desk.vault.for_customer(session, email_hash, ready=ready)
                    token = cipher.encrypt(f"v{n}")
                out: object = (cipher.generation, cipher.wrapped, token, f"v{n}")
            except BaseException as exc:
                out = exc
            with lock:
                got.append(out)

        ts = [threading.Thread(target=one, args=(n,)) for n in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        errors = [g for g in got if isinstance(g, BaseException)]
        assert not errors, errors[:2]
        assert len({g[1] for g in got}) == 1, "two keys for one new customer"  # type: ignore[index]
        row = _key_row(procs[0], email_hash)
        assert row is not None and row.generation == 1 and row.key_enc == got[0][1]  # type: ignore[index]
        for g in got:
            assert procs[1].desk.vault.decrypt(g[2]) == g[3]  # type: ignore[index]
    with procs[0].db.read() as session:
        assert session.scalar(select(func.count()).select_from(CustomerKey)) == 10


def test_an_erasure_between_encryption_and_capture_over_http(
    procs: list[Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Process A files a case (its Vault remembers the key), then its next intake is held
    after the fields are encrypted and before its transaction; process B erases the customer
    meanwhile. The case must end sealed under the new, live key, readable, and the old key
    generation never reappears."""
    a, b = procs[0], procs[1]
    desk_a, desk_b = Harness(a), Harness(b)
    desk_a.publish()
    p1, p2 = desk_a.payment(), desk_a.payment()
    assert desk_a.post(desk_a.request(p1)).status_code == 201
    email_hash = a.desk.vault.email_hash(CUSTOMER)
    old = _key_row(a, email_hash)
    assert old is not None and old.generation == 1
    vault = a.desk.vault
    real_ready = vault.ready_cipher
    erased = threading.Event()

    def ready_then_erase(h: str):  # type: ignore[no-untyped-def]
        cipher = real_ready(h)
        if not erased.is_set():
            erasure.erase_customer(b.desk, CUSTOMER, actor=Actor("cli", "ops"), evidence=None)
            erased.set()
        return cipher

    monkeypatch.setattr(vault, "ready_cipher", ready_then_erase)
    response = desk_a.post(desk_a.request(p2))
    assert erased.is_set()
    assert response.status_code == 201, response.text
    case_id = response.json()["id"]
    with a.db.read() as session:
        row = session.get(CustomerKey, email_hash)
        assert row is not None and row.generation == 2 and row.key_enc is not None
        case = session.get(Case, case_id)
        assert case is not None and case.erased_at is None
        assert case.email_enc.startswith(f"c1.{email_hash}.2."), case.email_enc[:100]
        assert a.desk.vault.decrypt(case.email_enc, session=session) == CUSTOMER
        for other in session.scalars(select(Case).where(Case.id != case_id)).all():
            assert other.erased_at is not None
        assert verify_chain(TEST_SECRET, session).ok
    # and a process that knows no key uses generation 2 too
    assert desk_b.post(desk_b.request(desk_b.payment())).status_code == 201
    with a.db.read() as session:
        assert session.get(CustomerKey, email_hash).generation == 2
