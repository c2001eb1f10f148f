"""Erasure against what runs beside it: an intake filing a case for the same customer, a
purge waiting for older transactions, Slack calls that gave up."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from refund_desk.bot.outbox import SLACK_CALL, Outbox
from refund_desk.customers import erasure
from refund_desk.customers import evidence as evidence_mod
from refund_desk.storage.audit import Actor
from refund_desk.storage.crypto import PurgeBusy
from refund_desk.storage.jobs import ClaimedJob, RetryLater, enqueue
from refund_desk.storage.models import Job
from tests.customers.conftest import PNG, Channels
from tests.helpers import CUSTOMER


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
