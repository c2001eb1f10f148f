"""Erasure against what runs beside it: an intake filing a case for the same customer (its
own case, or one that takes a file the erasure is deleting), a purge waiting for older
transactions, Slack calls that gave up."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlmodel import col

from refund_desk import clock
from refund_desk.bot.outbox import SLACK_CALL, Outbox
from refund_desk.cases import evidence as evidence_mod
from refund_desk.customers import erasure
from refund_desk.jobs.queue import ClaimedJob, RetryLater, enqueue
from refund_desk.storage.audit import Actor
from refund_desk.storage.db import PurgeBusy
from refund_desk.storage.models import Job
from tests.customers.conftest import OTHER, PHOTO, PNG, Channels
from tests.helpers import CUSTOMER


def _mail(channels: Channels, photos: list[bytes], n: int) -> str:
    return channels.mailed_case(channels.payment("30.00"), "20.00", photos, n)


def _files(channels: Channels) -> set[str]:
    folder = channels.runtime.settings.evidence_path()
    return {p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")}


def test_retention_does_not_delete_a_file_a_case_took_after_its_commit(
    channels: Channels,
) -> None:
    """Retention erases an old case of a customer whose newer case keeps their key alive, so
    the same photo sent again has the same stored name. An intake that reuses it commits
    after retention's commit and before the file deletion queued with it runs: the new case
    keeps its file, the old case's other file still goes."""
    desk = channels.runtime.desk
    old = _mail(channels, [PHOTO, OTHER], 1)
    channels.sweep()
    assert channels.case(old).status == "refunded"
    assert len(_files(channels)) == 2
    with clock.travel(timedelta(days=731)):
        live = channels.post(channels.request(channels.payment("30.00"), "20.00")).json()["id"]
        # Retention commits; its process stops before it deletes anything (no store): the
        # deletion is the job committed with it.
        assert erasure.retention(desk, days=730, evidence=None) == 1
        assert channels.case(old).erased_at is not None
        assert channels.case(live).erased_at is None  # the customer's key lives on
        new = _mail(channels, [PHOTO], 2)  # found on disk under the same name, and attached
        [shared] = _files(channels) & {i["file"] for i in channels.case(new).evidence or []}
        channels.sweep(seconds_ahead=0)  # the queued deletion runs now
        assert _files(channels) == {shared}  # the old case's other photo went
        assert channels.evidence_file(new) == PHOTO
        with clock.travel(timedelta(hours=2)):  # the new request's own unclaimed-files job
            channels.sweep(seconds_ahead=0)
        assert channels.evidence_file(new) == PHOTO


def test_retentions_deletion_waits_for_an_intake_taking_the_same_file(
    channels: Channels, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Side by side on PostgreSQL (SQLite runs them one after the other): the queued deletion
    starts while an intake that found the photo on disk is inside its transaction. It waits
    for the customer's key row, which the intake holds, and then sees the intake's case."""
    desk = channels.runtime.desk
    store = evidence_mod.EvidenceStore(channels.runtime.settings.evidence_path())
    _mail(channels, [PHOTO], 1)
    channels.sweep()
    with clock.travel(timedelta(days=731)):
        channels.post(channels.request(channels.payment("30.00"), "20.00"))  # keeps the key
        assert erasure.retention(desk, days=730, evidence=None) == 1
        with desk.db.read() as session:
            [job_id] = session.scalars(
                select(col(Job.id)).where(col(Job.kind) == erasure.DELETE_FILES_JOB)
            ).all()
        job = desk.jobs.claim_one(job_id)
        assert job is not None
        in_tx, go = threading.Event(), threading.Event()
        original = evidence_mod.attach

        def slow_attach(*args: Any, **kwargs: Any) -> Any:  # in the intake's transaction
            out = original(*args, **kwargs)
            in_tx.set()
            go.wait(10)
            return out

        monkeypatch.setattr(evidence_mod, "attach", slow_attach)
        cases: list[str] = []
        intake = threading.Thread(target=lambda: cases.append(_mail(channels, [PHOTO], 2)))
        intake.start()
        assert in_tx.wait(20)
        deleted: list[bool] = []

        def delete() -> None:
            erasure.run_delete_files(desk, job, evidence=store)
            deleted.append(True)

        deletion = threading.Thread(target=delete)
        deletion.start()
        time.sleep(1.5)  # the deletion now waits on the key row
        go.set()
        intake.join(30)
        deletion.join(30)
        monkeypatch.setattr(evidence_mod, "attach", original)
        assert cases and deleted
        assert channels.evidence_file(cases[0]) == PHOTO


def test_a_deletion_queued_by_an_earlier_version_still_spares_files_a_case_holds(
    channels: Channels,
) -> None:
    """Earlier versions queued the files without their customer: each is still checked
    against every case when the job runs."""
    held = _mail(channels, [PHOTO], 1)
    [name] = _files(channels)
    stray = "f" * 64
    (channels.runtime.settings.evidence_path() / stray).write_bytes(b"left by an erasure")
    with channels.runtime.db.write() as session:
        enqueue(session, kind=erasure.DELETE_FILES_JOB, payload={"files": [name, stray]})
    channels.sweep(seconds_ahead=0)
    assert _files(channels) == {name} and channels.evidence_file(held) == PHOTO


def test_after_an_erasure_the_same_photo_is_a_new_file(channels: Channels) -> None:
    """An erasure destroys the key: the photo sent again after its commit is sealed under the
    new key's generation, under a new name, so the deletion the erasure queued never meets
    a file a later case refers to."""
    desk = channels.runtime.desk
    old = _mail(channels, [PHOTO], 1)
    [before] = _files(channels)
    erasure.erase_customer(desk, CUSTOMER, actor=Actor("cli", "ops"), evidence=None)
    new = _mail(channels, [PHOTO], 2)
    [item] = channels.case(new).evidence or []
    assert item["file"] != before and _files(channels) == {before, item["file"]}
    channels.sweep(seconds_ahead=0)  # the queued deletion runs now
    assert _files(channels) == {item["file"]}
    assert channels.evidence_file(new) == PHOTO and channels.evidence_file(old) is None


@pytest.mark.parametrize(
    "any_db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_an_erasure_does_not_miss_a_case_committed_while_it_waits(
    channels: Channels, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL runs the two transactions side by side (SQLite one after the other): the
    erasure takes the customer's key row first, so it waits for the intake holding it and
    then reads the case that intake committed."""
    desk = channels.runtime.desk
    in_tx, go = threading.Event(), threading.Event()
    original = evidence_mod.attach

    def slow_attach(*args: Any, **kwargs: Any) -> Any:  # in the intake's transaction
        out = original(*args, **kwargs)
        in_tx.set()
        go.wait(10)
        return out

    monkeypatch.setattr(evidence_mod, "attach", slow_attach)
    payment = channels.payment("30.00")
    form = {
        "email": CUSTOMER,
        "payment": payment,
        "amount": "10.00",
        "reason": "damaged",
        "message": "Broken, see https://photos.example/ada-lovelace-kitchen.jpg",
    }
    responses: list[Any] = []
    intake = threading.Thread(
        target=lambda: responses.append(
            channels.submit_form(form, files=[("ada-lovelace-passport.png", PNG + b"x")])
        )
    )
    intake.start()
    assert in_tx.wait(20)
    result: list[erasure.Erasure] = []
    store = evidence_mod.EvidenceStore(channels.runtime.settings.evidence_path())
    erase = threading.Thread(
        target=lambda: result.append(
            erasure.erase_customer(desk, CUSTOMER, actor=Actor("cli", "ops"), evidence=store)
        )
    )
    erase.start()
    time.sleep(1.5)  # the erasure now waits on the key row
    go.set()
    intake.join(30)
    erase.join(30)
    monkeypatch.setattr(evidence_mod, "attach", original)
    case = channels.case(responses[0].headers["X-Refund-Desk-Case"])
    assert result and result[0].key_destroyed
    assert case.erased_at is not None and "ada-lovelace" not in str(case.evidence)


def test_a_purge_waiting_for_older_transactions_never_gives_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def busy(db: object) -> None:
        raise PurgeBusy("1 old row versions of customer_keys are still in use")

    monkeypatch.setattr(erasure, "purge_destroyed_keys", busy)
    job = ClaimedJob.__new__(ClaimedJob)
    object.__setattr__(job, "attempt", 19)
    object.__setattr__(job, "failures", 19)

    class _Desk:
        db = None

    with pytest.raises(RetryLater) as retry:
        erasure.run_purge_keys(_Desk(), job)  # type: ignore[arg-type]
    assert retry.value.failed is False  # waiting does not use up max_attempts


def test_an_erasure_strips_cards_from_slack_calls_that_gave_up(runtime: Any) -> None:
    case_id = "case_gave_up_1"
    text = f"{case_id}: Ada Lovelace says her teapot broke"
    card = [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]
    params = {"channel": "C1", "ts": "1.2", "text": "x", "blocks": card}
    with runtime.db.write() as session:
        job = enqueue(session, kind=SLACK_CALL, payload={"method": "chat.update", "params": params})
        job.status = "dead"
        session.add(job)
        session.flush()
        job_id = job.id
    with runtime.db.write() as session:
        Outbox.forget_cases(object(), session, [case_id])  # type: ignore[arg-type]
    with runtime.db.read() as session:
        row = session.get(Job, job_id)
        assert row is not None and "Ada Lovelace" not in str(row.payload)
