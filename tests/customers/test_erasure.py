"""Erasing a customer: their email, name and words are gone from the database file (searched
as bytes), the export and the cases API; their evidence files are deleted; amounts,
decisions and approvals stay, and `audit verify` still passes. Retention does it for cases
closed long ago."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy import select, text
from sqlmodel import col
from typer.testing import CliRunner

from refund_desk import clock
from refund_desk.cases.evidence import EvidenceStore
from refund_desk.cases.listing import Filters, iter_export
from refund_desk.cli.main import app
from refund_desk.crypto import (
    derive_key,
    destroy_customer_key,
    purge_destroyed_keys,
)
from refund_desk.customers import erasure
from refund_desk.customers.erasure import retention
from refund_desk.runtime import Runtime
from refund_desk.settings import load_settings
from refund_desk.storage.audit import Actor, iter_records, verify_chain
from refund_desk.storage.db import PurgeBusy
from refund_desk.storage.models import Approval, Case, CustomerKey, Job
from tests.conftest import TEST_SECRET, make_runtime
from tests.customers.conftest import PNG, Channels, raw_email
from tests.customers.test_customer_tell import _act
from tests.helpers import CUSTOMER, Harness

SECRETS = (CUSTOMER.encode(), b"Lovelace", b"zanzibar")


def _file_bytes(channels: Channels) -> bytes:
    path = channels.runtime.settings.sqlite_path()
    assert path is not None
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*") if p.is_file())


def _history(channels: Channels) -> tuple[str, str, str]:
    small = channels.payment("30.00")
    first = channels.post_email(
        raw_email(
            subject=f"Refund for order {small}",
            text="Amount: 20.00\nMy zanzibar teapot arrived broken, see the photo.",
            attachments=[("teapot.png", "image/png", PNG)],
        )
    )
    assert first.status_code == 201, first.text
    large = channels.payment("900.00")
    second = channels.post_email(
        raw_email(
            subject=f"Refund {large}",
            text="Amount: 600.00\nThe zanzibar lamp never worked.",
            message_id="<m2@example.com>",
        )
    ).json()
    _act(channels, second["case"], "approve", "U0FIN1")
    bob = channels.sandbox.create_payment(
        amount=3000, currency="USD", email="bob@example.com", name="Bob Builder",
        chargebacks=0, created_at=clock.now() - timedelta(days=3),
    )  # fmt: skip
    other = channels.post({**channels.request(bob, "20.00"), "email": "bob@example.com"}).json()
    channels.sweep()
    return first.json()["case"], second["case"], other["id"]


def _erase(channels: Channels, email: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Through the CLI on SQLite, through the integrators' API on PostgreSQL."""
    settings = channels.runtime.settings
    if not settings.is_sqlite:
        response = channels.client.delete(
            f"/api/v1/customers/{email}", headers={"Authorization": f"Bearer {channels.key}"}
        )
        assert response.status_code == 200, response.text
        return response.json()
    monkeypatch.setenv("DATABASE_URL", settings.database_url)
    monkeypatch.setenv("REFUND_DESK_SECRET", TEST_SECRET)
    monkeypatch.setenv("REFUND_DESK_EVIDENCE_DIR", str(settings.evidence_path()))
    load_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["customer", "erase", email, "--yes", "--json"])
    finally:
        load_settings.cache_clear()
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_erasing_a_customer_removes_their_personal_data_and_keeps_the_record(
    channels: Channels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small, large, bobs = _history(channels)
    runtime = channels.runtime
    evidence = runtime.settings.evidence_path()
    [photo] = [p for p in evidence.iterdir() if not p.name.startswith(".")]
    before = channels.get(small)
    assert before["status"] == "refunded" and channels.get(large)["status"] == "refunded"
    if runtime.settings.is_sqlite:  # the search can find them in the sandbox ledger; the
        data = _file_bytes(channels)  # customer's words only ever sealed (message, summary)
        assert CUSTOMER.encode() in data and b"Lovelace" in data and b"zanzibar" not in data

    answer = _erase(channels, CUSTOMER, tmp_path, monkeypatch)
    assert sorted(answer["cases"]) == sorted([small, large])
    assert answer["evidence_files"] == 1 and not photo.exists()

    # Not in the database file, searched as bytes (write-ahead log included).
    if runtime.settings.is_sqlite:
        data = _file_bytes(channels)
        for secret in SECRETS:
            assert secret not in data, secret
    # Not in the export.
    with runtime.db.read() as session:
        exported = json.dumps(list(iter_export(session, Filters(since=clock.now() - timedelta(1)))))
    assert all(s.decode() not in exported for s in SECRETS)
    # Not in the cases API, which says the customer was erased.
    views = [channels.get(small), channels.get(large)]
    shown = json.dumps(views)
    assert all(s.decode() not in shown for s in SECRETS)
    assert all(v["erased_at"] for v in views)
    assert views[0]["advice"]["summary"] == "[erased]"
    ask = {"Authorization": f"Bearer {channels.key}"}
    listed = channels.client.get("/api/v1/cases", params={"email": CUSTOMER}, headers=ask).json()
    assert {c["id"] for c in listed["cases"]} == {small, large}
    # Amounts, decisions, approvals, refunds and the record stay.
    assert views[0]["amount"] == before["amount"] == "20.00"
    assert views[0]["decision"]["rule"] == before["decision"]["rule"]
    assert views[0]["refunds"] == before["refunds"]
    assert views[1]["amount"] == "600.00" and views[1]["status"] == "refunded"
    with runtime.db.read() as session:
        approvals = session.scalars(select(Approval).where(Approval.case_id == large)).all()  # type: ignore[arg-type]
        assert [(a.approver, a.decision, a.amount) for a in approvals] == [
            ("U0FIN1", "approve", 60000)
        ]
        result = verify_chain(TEST_SECRET, session)
        assert result.ok, result.problem
        [erased] = [r for r in iter_records(session) if r.action == "customer.erased"]
        assert erased.payload["cases"] == sorted([small, large])
        assert all(s.decode() not in json.dumps(erased.payload) for s in SECRETS)
        case = session.get(Case, small)
        assert case is not None and runtime.desk.vault.decrypt(case.email_enc) is None
        bob = session.get(Case, bobs)
        assert bob is not None and runtime.desk.vault.decrypt(bob.email_enc) == "bob@example.com"

    # A second erasure finds nothing left; a returning customer starts afresh.
    assert _erase(channels, CUSTOMER, tmp_path, monkeypatch)["already_erased"] is True
    again = channels.post(channels.request(channels.payment("30.00"), "20.00")).json()
    with runtime.db.read() as session:
        returning = session.get(Case, again["id"])
        assert returning is not None
        assert runtime.desk.vault.decrypt(returning.email_enc) == CUSTOMER
        small_case = session.get(Case, small)
        assert small_case is not None and runtime.desk.vault.decrypt(small_case.email_enc) is None


def test_retention_erases_cases_closed_long_ago_and_keeps_recent_ones(channels: Channels) -> None:
    small, large, bobs = _history(channels)
    runtime = channels.runtime
    store = EvidenceStore(runtime.settings.evidence_path())
    assert retention(runtime.desk, days=730, evidence=store) == 0
    with clock.travel(timedelta(days=731)):
        recent = channels.post(channels.request(channels.payment("30.00"), "20.00")).json()["id"]
        assert retention(runtime.desk, days=730, evidence=store) == 3
    with runtime.db.read() as session:
        for case_id in (small, large, bobs):
            case = session.get(Case, case_id)
            assert case is not None and case.erased_at is not None and case.message_enc is None
        kept = session.get(Case, recent)
        assert kept is not None and kept.erased_at is None
        assert runtime.desk.vault.decrypt(kept.email_enc) == CUSTOMER  # the key lives on
        assert verify_chain(TEST_SECRET, session).ok
        actions = [r.action for r in iter_records(session)]
    assert actions.count("retention.erased") == 1
    assert [p for p in store.directory.iterdir() if not p.name.startswith(".")] == []


def test_erasing_an_unknown_customer_is_a_clear_error(channels: Channels) -> None:
    response = channels.client.delete(
        "/api/v1/customers/nobody@example.com",
        headers={"Authorization": f"Bearer {channels.key}"},
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "customer_not_found"


class _ErasingAdvisor:
    """The customer's erasure commits while the advisor (a model: seconds) is being asked."""

    def __init__(self, inner: Any, desk: Any) -> None:
        self.inner, self.desk, self.name = inner, desk, inner.name
        self.model = getattr(inner, "model", None)

    def advise(self, request: Any) -> Any:
        advice = self.inner.advise(request)
        erasure.erase_customer(self.desk, CUSTOMER, actor=Actor("cli", "t"), evidence=None)
        return advice


def test_an_erasure_during_the_advisor_call_keeps_no_quote(any_runtime: Runtime) -> None:
    desk = Harness(any_runtime)
    desk.publish()
    any_runtime.desk.advisor = _ErasingAdvisor(any_runtime.desk.advisor, any_runtime.desk)
    payment = desk.payment("30.00")
    body = desk.post(desk.request(payment, "20.00", message="The blue vase arrived shattered"))
    with any_runtime.db.read() as session:
        case = session.get(Case, body.json()["id"])
        assert case is not None and case.erased_at is not None
        assert (case.advice or {}).get("summary") == erasure.ERASED
        assert "shattered" not in json.dumps(case.advice)


def test_evidence_files_go_even_if_the_process_dies_after_the_erasure_commits(
    channels: Channels,
) -> None:
    """The deletion is a job committed with the erasure; here the process 'dies' before it
    unlinks anything (no store given), and a sweep later removes the files."""
    _history(channels)
    evidence = channels.runtime.settings.evidence_path()
    [photo] = [p for p in evidence.iterdir() if not p.name.startswith(".")]
    erasure.erase_customer(channels.runtime.desk, CUSTOMER, actor=Actor("cli", "t"), evidence=None)
    assert photo.exists()
    channels.sweep()
    assert not photo.exists()


PHOTO = b"\x89PNG\r\n\x1a\n" + b"zanzibar teapot, cracked lid " * 8


def _mail_photo(channels: Channels) -> str:
    return channels.mailed_case(channels.payment("30.00"), "20.00", [PHOTO], 1)


def _live_keys(runtime: Runtime) -> list[bytes]:
    """Every data key still in the database, unwrapped with the deployment secret."""
    wrap = Fernet(base64.urlsafe_b64encode(derive_key(TEST_SECRET, "customer-keys")))
    with runtime.db.read() as session:
        rows = session.scalars(select(CustomerKey)).all()
        return [wrap.decrypt(r.key_enc.encode()) for r in rows if r.key_enc is not None]


def test_a_copy_of_the_evidence_folder_is_unreadable_after_the_erasure(
    channels: Channels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case_id = _mail_photo(channels)
    runtime = channels.runtime
    assert channels.evidence_file(case_id) == PHOTO  # served to whoever holds the card's link
    folder = runtime.settings.evidence_path()
    backup = tmp_path / "evidence-backup"
    shutil.copytree(folder, backup)
    copies = [p for p in backup.iterdir() if not p.name.startswith(".")]
    assert len(copies) == 1 and copies[0].name != hashlib.sha256(PHOTO).hexdigest()
    with runtime.db.read() as session:
        [key] = session.scalars(select(CustomerKey)).all()
        wrapped = key.key_enc
    assert wrapped is not None
    sealed = copies[0].read_bytes()
    assert b"zanzibar" not in sealed and b"PNG" not in sealed  # sealed even before

    _erase(channels, CUSTOMER, tmp_path, monkeypatch)

    assert [p for p in folder.iterdir() if not p.name.startswith(".")] == []
    assert channels.evidence_file(case_id) is None
    # The copy outlived the erasure, but nothing opens it: not the desk ...
    assert runtime.desk.vault.open(sealed) is None
    # ... nor any key left in the database, nor the deployment's own field key.
    body = sealed.split(b".", 3)[3]
    field_key = base64.urlsafe_b64encode(derive_key(TEST_SECRET, "field-encryption"))
    remaining = [*_live_keys(runtime), field_key]
    for candidate in remaining:
        with pytest.raises(InvalidToken):
            Fernet(candidate).decrypt(body)
    if runtime.settings.is_sqlite:  # the destroyed key is not left in the file's free pages
        assert wrapped.encode() not in _file_bytes(channels)


def test_evidence_stored_plaintext_by_an_earlier_version_is_served_and_erased(
    channels: Channels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Earlier versions stored the file as it came, named by its SHA-256, and the item had no
    stored name: the read path knows both layouts, and an erasure deletes both."""
    case_id = _mail_photo(channels)
    runtime = channels.runtime
    folder = runtime.settings.evidence_path()
    sha = hashlib.sha256(PHOTO).hexdigest()
    with runtime.db.write() as session:
        case = session.get(Case, case_id)
        assert case is not None
        items = [dict(i) for i in case.evidence or []]
        (folder / items[0].pop("file")).unlink()
        case.evidence = items
        session.add(case)
    (folder / sha).write_bytes(PHOTO)
    assert channels.evidence_file(case_id) == PHOTO

    assert _erase(channels, CUSTOMER, tmp_path, monkeypatch)["evidence_files"] == 1
    assert not (folder / sha).exists() and channels.evidence_file(case_id) is None


def _key_table_bytes(runtime: Runtime) -> tuple[str, bytes]:
    """PostgreSQL: the key table's heap file as on disk (after a checkpoint), and its path."""
    with runtime.db.engine.connect() as conn:
        conn.execute(text("CHECKPOINT"))
        path = conn.scalar(text("SELECT pg_relation_filepath('customer_keys')"))
        data = conn.scalar(text("SELECT pg_read_binary_file(:p)"), {"p": path})
    return str(path), bytes(data)


def test_a_destroyed_key_leaves_no_old_row_version_behind(
    channels: Channels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wrapped key is decryptable with the deployment secret, so its old row version
    must go too: PostgreSQL keeps it as a dead tuple (plain VACUUM leaves its bytes in the
    page), SQLite in its write-ahead log. The erasure queues a job that removes it."""
    _mail_photo(channels)
    runtime = channels.runtime
    with runtime.db.read() as session:
        [key] = session.scalars(select(CustomerKey)).all()
        wrapped = (key.key_enc or "").encode()
    assert wrapped
    if not runtime.settings.is_sqlite:
        with runtime.db.engine.connect() as conn:
            if not conn.scalar(text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")):
                pytest.skip("reading the heap file needs a superuser")
        old_path, heap = _key_table_bytes(runtime)
        assert wrapped in heap

    _erase(channels, CUSTOMER, tmp_path, monkeypatch)
    with runtime.db.read() as session:
        [purge] = session.scalars(select(Job).where(col(Job.kind) == erasure.PURGE_KEYS_JOB)).all()
        assert purge.status == "pending"
    if not runtime.settings.is_sqlite:
        assert wrapped in _key_table_bytes(runtime)[1]  # the dead tuple, until the job runs

    # A transaction older than the erasure (on a shared server, another database's CREATE
    # DATABASE counts too) makes the purge wait and retry; it ends within seconds here.
    for later in range(60):
        with clock.travel(timedelta(hours=later)):
            channels.sweep()
        with runtime.db.read() as session:
            if session.get(Job, purge.id).status == "done":  # type: ignore[union-attr]
                break
        time.sleep(0.5)
    else:
        raise AssertionError("the purge never finished")
    if runtime.settings.is_sqlite:
        assert wrapped not in _file_bytes(channels)
    else:
        new_path, heap = _key_table_bytes(runtime)
        assert wrapped not in heap
        with runtime.db.engine.connect() as conn:  # the table's old file is emptied
            old = conn.scalar(
                text("SELECT pg_read_binary_file(CAST(:p AS text), 0, 1048576, true)"),
                {"p": old_path},
            )
        assert new_path != old_path and wrapped not in bytes(old or b"")


@pytest.mark.postgres
def test_the_purge_waits_for_transactions_older_than_the_erasure(pg_url: str) -> None:
    """VACUUM keeps a dead row version that an older transaction may still see: the purge
    notices (VERBOSE's count) and asks to be retried instead of reporting success."""
    runtime = make_runtime(pg_url)
    try:
        with runtime.db.write() as session:
            runtime.desk.vault.for_customer(session, "e" * 64)
        with runtime.db.engine.connect() as older:
            older.execute(text("SELECT txid_current()"))  # holds the horizon back
            with runtime.db.write() as session:
                assert destroy_customer_key(session, "e" * 64, clock.now())
            with pytest.raises(PurgeBusy, match="still in use"):
                purge_destroyed_keys(runtime.db)
            older.rollback()
        for _ in range(60):  # others' transactions on a shared server hold it for seconds
            try:
                purge_destroyed_keys(runtime.db)
                break
            except PurgeBusy:
                time.sleep(0.5)
        else:
            raise AssertionError("the purge still waits after its older transaction ended")
    finally:
        runtime.db.dispose()


def test_the_advisors_summary_is_sealed_so_an_old_copy_is_unreadable_after_the_erasure(
    channels: Channels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary quotes the customer's words: it is stored under their data key, so a copy
    taken before the erasure (an old row version, a backup) says nothing after it."""
    from refund_desk.cases.advisory import ERASED, summary_text

    small, _, _ = _history(channels)
    runtime = channels.runtime
    with runtime.db.read() as session:
        case = session.get(Case, small)
        assert case is not None
        stored = dict(case.advice or {})
    assert "zanzibar" not in json.dumps(stored)  # neither the summary nor the explanation
    assert "zanzibar" in channels.get(small)["advice"]["summary"]  # shown to those who may read
    assert "zanzibar" in summary_text(runtime.desk.vault, stored)

    _erase(channels, CUSTOMER, tmp_path, monkeypatch)
    assert summary_text(runtime.desk.vault, stored) == ERASED
