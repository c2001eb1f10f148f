"""Promise 4: a customer's data key destroyed by an erasure in one process is never used by
another to encrypt anything after the erasure committed.

"Another process" is a second runtime on the same database.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from refund_desk.cases import evidence
from refund_desk.crypto import CustomerCipher
from refund_desk.customers import erasure
from refund_desk.customers.intake import ChannelRequest, receive
from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.runtime import Runtime, build
from refund_desk.storage.audit import Actor
from refund_desk.storage.db import Database
from refund_desk.storage.models import CustomerKey
from tests.conftest import make_runtime, make_settings
from tests.helpers import CUSTOMER, published

PHOTO = b"\x89PNG\r\n\x1a\n" + b"a cracked teapot lid " * 8


def _erase(url: str, store: evidence.EvidenceStore | None = None) -> None:
    other = make_runtime(url)
    try:
        erasure.erase_customer(other.desk, CUSTOMER, actor=Actor("cli", "ops"), evidence=store)
    finally:
        other.db.dispose()


def _generation(rt: Runtime, email_hash: str) -> tuple[int, bool]:
    with rt.db.read() as session:
        row = session.get(CustomerKey, email_hash)
        assert row is not None
        return row.generation, row.key_enc is not None


def _server(url: str, **extra: object) -> Runtime:
    db = Database.from_url(url)
    settings = make_settings(url, REFUND_DESK_SWEEP_SECONDS=0.2, **extra)
    return build(settings, db=db, processor=SandboxProcessor(db))


@pytest.mark.parametrize("path", ["evidence-file"])
def test_a_destroyed_key_never_encrypts_after_the_erasure_committed(
    any_runtime: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """Catches: the destroyed key (generation 1) used to encrypt after the erasure committed.

    intake-fields: this process remembers the key; an erasure elsewhere commits; the next
    intake of the customer encrypts their email, name and message under the remembered,
    destroyed key before its transaction (which then seals them again under a new key and
    drops the first tokens: nothing of them is stored; a use in memory).

    evidence-file: `store_files` proves the key in a short transaction, then seals and writes
    the files after its commit. An erasure committing in between leaves a file on disk sealed
    under the destroyed key, written after the erasure (and after it deleted the customer's
    files); `attach` seals the file again under the new key, and the first copy stays until
    the unclaimed-files job an hour later. A backup taken before the erasure holds the
    wrapped key that opens it."""
    rt = any_runtime
    desk = published(rt)
    store = evidence.EvidenceStore(tmp_path / "evidence")
    email_hash = rt.desk.vault.email_hash(CUSTOMER)
    assert desk.post(desk.request(desk.payment())).status_code == 201  # generation 1
    assert _generation(rt, email_hash) == (1, True)
    uses: list[tuple[int, str]] = []
    erased = {"done": False}
    seal = CustomerCipher.seal

    def watched_seal(self: CustomerCipher, data: bytes) -> bytes:
        if erased["done"] and self.email_hash == email_hash:
            uses.append((self.generation, "seal"))
        return seal(self, data)

    monkeypatch.setattr(CustomerCipher, "seal", watched_seal)
    if path == "intake-fields":
        _erase(rt.settings.database_url, store)
        erased["done"] = True
        assert desk.post(desk.request(desk.payment())).status_code == 201
    else:
        put = evidence.EvidenceStore.put
        fired = {"n": 0}
        eraser: list[threading.Thread] = []

        def erase_elsewhere() -> None:
            _erase(rt.settings.database_url, store)
            erased["done"] = True

        def put_after_erasure(self: Any, upload: Any, cipher: CustomerCipher) -> str:
            # Another process erases the customer while the file is being stored: the
            # erasure waits for the key's holder (this transaction) to commit.
            if not fired["n"]:
                fired["n"] += 1
                eraser.append(threading.Thread(target=erase_elsewhere))
                eraser[0].start()
                eraser[0].join(0.3)
                assert eraser[0].is_alive(), "the erasure did not wait for the key's holder"
            return put(self, upload, cipher)

        monkeypatch.setattr(evidence.EvidenceStore, "put", put_after_erasure)
        request = ChannelRequest(
            source="web_form",
            email=CUSTOMER,
            payment=desk.payment(),
            actor=Actor("customer", "web_form"),
            dedupe="review-1",
            amount="20.00",
            message="The teapot arrived broken.",
            uploads=[evidence.check_upload(PHOTO, filename="lid.png")],
        )
        receive(rt.desk, request, store=store, base_url="http://127.0.0.1:8000")
        assert fired["n"] == 1
        eraser[0].join(30)
        assert erased["done"]
    if path == "intake-fields":  # erased first: the intake made a new key
        assert _generation(rt, email_hash) == (2, True)
    on_disk = [
        p.name
        for p in (store.directory.iterdir() if store.directory.exists() else [])
        if p.read_bytes().startswith(f"c1.{email_hash}.1.".encode())
    ]
    assert on_disk == [], f"files sealed under the destroyed key after the erasure: {on_disk}"
    assert [u for u in uses if u[0] == 1] == [], f"destroyed key used to encrypt: {uses}"


def test_an_intake_stores_nothing_under_a_key_erased_meanwhile(
    any_db_url: str, any_runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches: a case stored under the destroyed key when the erasure commits just before
    the intake's capture transaction."""
    rt = any_runtime
    desk = published(rt)
    vault = rt.desk.vault
    email_hash = vault.email_hash(CUSTOMER)
    assert desk.post(desk.request(desk.payment())).status_code == 201
    from refund_desk.cases import intake

    original = intake.fetch_payment

    def fetched_then_erased(desk_: Any, payment_id: str) -> Any:
        facts = original(desk_, payment_id)
        _erase(any_db_url)  # between the processor's answer and the capture
        return facts

    monkeypatch.setattr(intake, "fetch_payment", fetched_then_erased)
    second = desk.post(desk.request(desk.payment())).json()
    from refund_desk.storage.models import Case

    with rt.db.read() as session:
        case = session.get(Case, second["id"])
        assert case is not None
        for field in (case.email_enc, case.name_enc, case.message_enc):
            assert field is None or field.startswith(f"c1.{email_hash}.2."), field
    assert vault.decrypt(case.email_enc) == CUSTOMER
    assert _generation(rt, email_hash) == (2, True)
