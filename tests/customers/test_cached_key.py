"""An intake encrypts the customer's fields before its write transaction, with the key this
process last saw (`Vault.ready_cipher`); the transaction proves the key row still holds that
key. An erasure in between (here or in another process) must never let the destroyed key be
used: the case is sealed under the customer's new key, and the erased cases stay unreadable."""

from __future__ import annotations

import time
from typing import Any

import pytest

from refund_desk.customers import erasure
from refund_desk.runtime import Runtime
from refund_desk.storage import crypto
from refund_desk.storage.audit import Actor
from refund_desk.storage.crypto import CustomerCipher, Vault
from refund_desk.storage.models import Case, CustomerKey
from refund_desk.web.app import Sweeper
from tests.conftest import make_runtime
from tests.helpers import CUSTOMER, Harness


def _case(runtime: Runtime, case_id: str) -> Case:
    with runtime.db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None
        return case


def _generation(runtime: Runtime, email_hash: str) -> tuple[int, str | None]:
    with runtime.db.read() as session:
        row = session.get(CustomerKey, email_hash)
        assert row is not None
        return row.generation, row.key_enc


def _erase_elsewhere(url: str) -> None:
    """Another process's erasure: its own vault, so this process's memory is not told."""
    other = make_runtime(url)
    try:
        erasure.erase_customer(other.desk, CUSTOMER, actor=Actor("cli", "ops"), evidence=None)
    finally:
        other.db.dispose()


def _file(desk: Harness) -> str:
    response = desk.post(desk.request(desk.payment()))
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_a_key_erased_by_another_process_is_never_used(
    any_runtime: Runtime, any_db_url: str
) -> None:
    desk = Harness(any_runtime)
    desk.publish()
    vault = any_runtime.desk.vault
    email_hash = vault.email_hash(CUSTOMER)
    first = _file(desk)
    remembered = vault.ready_cipher(email_hash)
    assert not remembered.fresh and remembered.generation == 1  # kept after the commit

    _erase_elsewhere(any_db_url)
    assert _generation(any_runtime, email_hash)[1] is None
    assert vault.ready_cipher(email_hash) is remembered  # this process was not told

    second = _file(desk)
    generation, key_enc = _generation(any_runtime, email_hash)
    assert generation == 2 and key_enc is not None and key_enc != remembered.wrapped
    case = _case(any_runtime, second)
    assert case.email_enc.startswith(f"c1.{email_hash}.2.")
    assert vault.decrypt(case.email_enc) == CUSTOMER
    assert vault.decrypt(case.message_enc) == desk.request("x")["message"]
    assert vault.decrypt(_case(any_runtime, first).email_enc) is None  # erased stays erased
    assert vault.ready_cipher(email_hash).generation == 2  # the new key is remembered


def test_an_erasure_between_the_encryption_and_the_capture(
    any_runtime: Runtime, any_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fields were encrypted under the live key; the customer is erased before the write
    transaction begins: the transaction sees the key gone and seals them again."""
    desk = Harness(any_runtime)
    desk.publish()
    vault = any_runtime.desk.vault
    email_hash = vault.email_hash(CUSTOMER)
    _file(desk)
    original = Vault.ready_cipher
    handed: list[CustomerCipher] = []

    def erase_after_reading(self: Vault, value: str) -> Any:
        cipher = original(self, value)
        if not handed:
            handed.append(cipher)
            _erase_elsewhere(any_db_url)
        return cipher

    monkeypatch.setattr(Vault, "ready_cipher", erase_after_reading)
    second = _file(desk)
    assert handed and handed[0].generation == 1 and not handed[0].fresh
    case = _case(any_runtime, second)
    assert case.email_enc.startswith(f"c1.{email_hash}.2.")
    assert case.name_enc is not None and case.name_enc.startswith(f"c1.{email_hash}.2.")
    assert vault.decrypt(case.email_enc) == CUSTOMER
    assert _generation(any_runtime, email_hash)[1] != handed[0].wrapped


def test_a_new_customers_fresh_key_is_the_one_stored(runtime: Runtime) -> None:
    desk = Harness(runtime)
    desk.publish()
    vault = runtime.desk.vault
    email_hash = vault.email_hash(CUSTOMER)
    fresh = vault.ready_cipher(email_hash)
    assert fresh.fresh  # nothing in memory: a key made before the transaction
    case = _case(runtime, _file(desk))
    generation, key_enc = _generation(runtime, email_hash)
    assert generation == 1 and key_enc is not None
    assert vault.decrypt(case.email_enc) == CUSTOMER


def test_a_fresh_key_never_replaces_a_live_one(runtime: Runtime) -> None:
    """Two first intakes of one customer race: the second's fresh key loses to the stored one,
    and its fields are sealed under the stored key."""
    desk = Harness(runtime)
    desk.publish()
    vault = runtime.desk.vault
    email_hash = vault.email_hash(CUSTOMER)
    _file(desk)
    stored = _generation(runtime, email_hash)
    vault.forget(email_hash)  # as if the other intake ran in another process
    case = _case(runtime, _file(desk))
    assert _generation(runtime, email_hash) == stored
    assert case.email_enc.startswith(f"c1.{email_hash}.1.")
    assert vault.decrypt(case.email_enc) == CUSTOMER


def test_a_key_erased_by_another_process_leaves_this_processs_memory_within_its_lifetime(
    any_runtime: Runtime, any_db_url: str
) -> None:
    """The process that took the intake is not told of another process's erasure: the key
    leaves its memory once `KEY_MEMORY_SECONDS` have passed since the key was last proved,
    at its next use or its next sweep, whichever comes first."""
    desk = Harness(any_runtime)
    desk.publish()
    vault = any_runtime.desk.vault
    email_hash = vault.email_hash(CUSTOMER)
    _file(desk)
    assert vault.remembers(email_hash)
    _erase_elsewhere(any_db_url)
    assert vault.remembers(email_hash)  # within the lifetime: still here
    assert vault.forget_expired(time.monotonic() + crypto.KEY_MEMORY_SECONDS / 2) == 0
    assert vault.forget_expired(time.monotonic() + crypto.KEY_MEMORY_SECONDS) == 1
    assert not vault.remembers(email_hash)


def test_a_key_past_its_lifetime_is_not_handed_out_and_leaves_memory_at_its_use(
    any_runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    desk = Harness(any_runtime)
    desk.publish()
    vault = any_runtime.desk.vault
    email_hash = vault.email_hash(CUSTOMER)
    _file(desk)
    assert not vault.ready_cipher(email_hash).fresh
    monkeypatch.setattr(crypto, "KEY_MEMORY_SECONDS", 0.0)
    assert vault.ready_cipher(email_hash).fresh
    assert not vault.remembers(email_hash)


def test_every_sweep_forgets_the_keys_past_their_lifetime(
    any_runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    desk = Harness(any_runtime)
    desk.publish()
    vault = any_runtime.desk.vault
    email_hash = vault.email_hash(CUSTOMER)
    _file(desk)
    assert vault.remembers(email_hash)
    monkeypatch.setattr(crypto, "KEY_MEMORY_SECONDS", 0.0)
    sweeper = Sweeper(any_runtime)
    try:
        sweeper.sweep()  # an idle process: no intake uses the key, the sweep drops it
    finally:
        sweeper.pool.shutdown()
    assert not vault.remembers(email_hash)
