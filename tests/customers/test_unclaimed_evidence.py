"""Evidence files of a request that never became a case do not stay in the folder: a refusal
after the write deletes them at once, a process that died before its case committed leaves
them to a job an hour later. A file a committed case refers to is never deleted (one
customer's same photo is stored once, so two of their cases can share it)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlmodel import col

from refund_desk import clock
from refund_desk.cases import evidence
from refund_desk.storage.models import Job
from tests.customers.conftest import OTHER, PHOTO, Channels
from tests.helpers import CUSTOMER


def _files(channels: Channels) -> list[Path]:
    folder = channels.runtime.settings.evidence_path()
    if not folder.exists():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file())


def test_a_request_refused_after_its_files_were_written_leaves_none(channels: Channels) -> None:
    payment = channels.payment("30.00")
    first = channels.mail_request(payment, amount="30.00", photos=[PHOTO], n=1)
    assert first.status_code == 201, first.text
    channels.sweep()
    assert channels.get(first.json()["case"])["status"] == "refunded"
    [kept] = _files(channels)

    # Nothing is left to refund: the capture refuses after the files were sealed and written.
    # Its new photo goes; the photo it shares with the refunded case stays.
    refused = channels.mail_request(payment, amount=None, photos=[PHOTO, OTHER], n=2)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "nothing_refundable"
    assert _files(channels) == [kept]
    assert channels.evidence_file(first.json()["case"]) == PHOTO


def test_a_crash_in_the_capture_leaves_no_file(
    channels: Channels, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the process failed while capturing")

    monkeypatch.setattr(evidence, "attach", broken)
    payment = channels.payment("30.00")
    with pytest.raises(RuntimeError):
        channels.mail_request(payment, amount="20.00", photos=[PHOTO], n=1)
    assert channels.case_count() == 0
    assert _files(channels) == []


def test_files_of_a_process_that_died_before_its_case_committed_go_an_hour_later(
    channels: Channels,
) -> None:
    desk = channels.runtime.desk
    store = evidence.EvidenceStore(channels.runtime.settings.evidence_path())
    payment = channels.payment("30.00")
    assert channels.mail_request(payment, amount="20.00", photos=[PHOTO], n=1).status_code == 201
    [claimed] = _files(channels)
    # Written, and then nothing: the process died before its capture committed.
    orphan = evidence.check_upload(OTHER)
    evidence.store_files(
        desk, store, desk.vault.email_hash(CUSTOMER), [orphan, evidence.check_upload(PHOTO)]
    )
    assert len(_files(channels)) == 2

    channels.sweep(seconds_ahead=60)  # within the hour a capture may still take them
    assert len(_files(channels)) == 2
    with clock.travel(timedelta(hours=1, minutes=1)):
        channels.sweep(seconds_ahead=0)
    assert _files(channels) == [claimed]  # the shared photo is on a case: it stays
    with desk.db.read() as session:
        jobs = session.scalars(select(Job).where(col(Job.kind) == evidence.UNCLAIMED_JOB)).all()
        assert len(jobs) == 2 and all(j.status == "done" for j in jobs)


def test_a_file_deleted_while_a_capture_was_on_its_way_is_written_again(
    channels: Channels, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A capture found its photo already stored (by a request of the same customer that is
    being refused); the refusal deletes it before the capture commits. The capture, holding
    the customer's key row, writes it again: its committed case never lacks its file."""
    desk = channels.runtime.desk
    store = evidence.EvidenceStore(channels.runtime.settings.evidence_path())
    store_files = evidence.store_files

    def then_refused_elsewhere(*args: Any, **kwargs: Any) -> evidence.Stored:
        stored = store_files(*args, **kwargs)
        deleted = evidence.discard(desk, store, stored.email_hash, stored.names.values())
        assert deleted == 1 and _files(channels) == []
        return stored

    monkeypatch.setattr(evidence, "store_files", then_refused_elsewhere)
    payment = channels.payment("30.00")
    response = channels.mail_request(payment, amount="20.00", photos=[PHOTO], n=1)
    assert response.status_code == 201, response.text
    assert len(_files(channels)) == 1
    assert channels.evidence_file(response.json()["case"]) == PHOTO
    with clock.travel(timedelta(hours=2)):
        channels.sweep(seconds_ahead=0)
    assert channels.evidence_file(response.json()["case"]) == PHOTO
