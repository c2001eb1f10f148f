"""the audit head is locked at commit only, never across the rest of a transaction.

`AuditLog._seal` says the head is locked "only for the records' own INSERT and the commit".
Since `Vault.for_customer` makes its shared look at the customer's key in a SAVEPOINT
(PostgreSQL), and SQLAlchemy fires `before_commit` for a savepoint's release too, the
session-wide `_seal_pending` listener seals the records appended so far at that release: the
audit head (one row every auditing transaction of every replica must lock) is then held
`FOR UPDATE` for the rest of the capture, across the evidence files written to disk, the
job rows, the intake key and the commit.

A real flow: an email with a photo. `_capture` appends `request.received`, then its `prepare`
calls `for_customer` (the reply, then `evidence.attach`), then writes the photo.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from refund_desk.cases import evidence
from tests.customers.conftest import PHOTO, Channels, raw_email


def _head_is_locked(url: str) -> bool:
    """From another connection: is the audit head row locked FOR UPDATE right now?"""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            try:
                conn.execute(text("SELECT seq FROM audit_head WHERE id = 1 FOR UPDATE NOWAIT"))
            except OperationalError:
                return True
            finally:
                conn.rollback()
        return False
    finally:
        engine.dispose()


@pytest.fixture()
def any_db_url(pg_url: str) -> str:
    """PostgreSQL only (the channels run on it): SQLite's writer covers the whole
    transaction anyway."""
    return pg_url


def test_the_audit_head_is_not_locked_while_a_capture_writes_its_evidence(
    channels: Channels, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = channels.runtime.db.engine.url.render_as_string(hide_password=False)
    probes: list[tuple[str, bool]] = []
    real_put = evidence.EvidenceStore.put

    def probing_put(self: evidence.EvidenceStore, upload: Any, cipher: Any) -> str:
        probes.append(("put", _head_is_locked(url)))
        return real_put(self, upload, cipher)

    monkeypatch.setattr(evidence.EvidenceStore, "put", probing_put)
    payment = channels.payment("30.00")
    response = channels.post_email(
        raw_email(
            subject=f"Refund for order {payment}",
            text="Amount: 20.00\nThe teapot arrived broken.",
            attachments=[("p.png", "image/png", PHOTO)],
            message_id="<review-1@example.com>",
        )
    )
    assert response.status_code == 201, response.text
    assert len(probes) >= 2, probes  # before the capture, and in it (`evidence.attach`)
    # While the capture's transaction writes the photo, no other transaction may be kept from
    # auditing: the head is locked only at the commit.
    assert not any(locked for _, locked in probes), probes
