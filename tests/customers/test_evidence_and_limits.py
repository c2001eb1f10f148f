"""Content sniffing, the evidence folder, and database rate limits on both databases."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from refund_desk import clock
from refund_desk.cases import evidence
from refund_desk.cases.errors import InvalidRequest
from refund_desk.crypto import CustomerCipher
from refund_desk.customers import ratelimit
from refund_desk.storage.db import Database
from tests.conftest import make_settings


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b"\x89PNG\r\n\x1a\n....", "image/png"),
        (b"\xff\xd8\xff\xe0....", "image/jpeg"),
        (b"GIF89a....", "image/gif"),
        (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"%PDF-1.7\n", "application/pdf"),
        (b"<svg xmlns='http://www.w3.org/2000/svg'/>", None),
        (b"MZ\x90\x00", None),
    ],
)
def test_type_is_sniffed_from_content(data: bytes, kind: str | None) -> None:
    assert evidence.sniff(data) == kind


def test_size_and_emptiness_are_checked() -> None:
    with pytest.raises(InvalidRequest) as too_big:
        evidence.check_upload(b"%PDF-" + b"0" * evidence.MAX_BYTES)
    assert "over 10 MB" in too_big.value.fields["evidence"]
    with pytest.raises(InvalidRequest):
        evidence.check_upload(b"")


def test_store_seals_each_file_under_its_customers_key(tmp_path: Path) -> None:
    store = evidence.EvidenceStore(tmp_path / "ev")
    upload = evidence.check_upload(b"%PDF-1.4 receipt for the zanzibar teapot")
    alice = CustomerCipher("a" * 64, 1, Fernet.generate_key())
    bob = CustomerCipher("b" * 64, 1, Fernet.generate_key())
    name = store.put(upload, alice)
    # Addressed by content within one customer: the same file twice is stored once ...
    assert store.put(upload, alice) == name
    # ... but the name is not the content's hash, and another customer's copy is another file.
    assert name != upload.sha256 and store.put(upload, bob) != name
    assert len([p for p in (tmp_path / "ev").iterdir()]) == 2
    sealed = store.path(name).read_bytes()
    assert b"zanzibar" not in sealed and b"%PDF" not in sealed
    with pytest.raises(ValueError):
        store.path("../../etc/passwd")


def test_evidence_folder_defaults_beside_the_database(tmp_path: Path) -> None:
    settings = make_settings(f"sqlite:///{tmp_path}/desk.db")
    assert settings.evidence_path() == tmp_path.resolve() / "evidence"
    chosen = make_settings("sqlite:///x.db", REFUND_DESK_EVIDENCE_DIR=str(tmp_path / "files"))
    assert chosen.evidence_path() == (tmp_path / "files").resolve()


def test_rate_limit_counts_per_window_on_both_databases(any_db_url: str) -> None:
    db = Database.from_url(any_db_url)
    try:
        now = clock.now()
        answers = [ratelimit.hit(db, "k", limit=3, window_seconds=3600, now=now) for _ in range(4)]
        assert answers == [True, True, True, False]
        assert ratelimit.hit(db, "other", limit=3, window_seconds=3600, now=now)
        later = now.replace(year=now.year + 1)
        assert ratelimit.hit(db, "k", limit=3, window_seconds=3600, now=later)
    finally:
        db.dispose()
