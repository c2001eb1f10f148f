"""The refund pipeline end to end for a customer who returns after an erasure, on
SQLite and PostgreSQL, with the jobs run inline and swept (advice and decision on direct
rows), and with an erasure landing while the first case's jobs are still queued."""

from __future__ import annotations

from typing import Any

import pytest

from refund_desk.cases import advisory
from refund_desk.customers import erasure
from refund_desk.runtime import Runtime
from refund_desk.storage import direct_rows
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import Case, CustomerKey
from tests.cases.advance_common import case_row, executions
from tests.helpers import CUSTOMER, Harness

OLD = "My zanzibar vase arrived broken, shattered in the box."
NEW = "My kilimanjaro vase arrived broken, shattered in the box."


@pytest.fixture()
def desk(any_runtime: Runtime) -> Harness:
    harness = Harness(any_runtime)
    harness.publish()
    return harness


def _ask(desk: Harness, message: str) -> dict[str, Any]:
    response = desk.post(desk.request(desk.payment("30.00"), "20.00", message=message))
    assert response.status_code in (200, 201, 202), response.text
    return dict(response.json())


def _erase(desk: Harness) -> None:
    erasure.erase_customer(desk.runtime.desk, CUSTOMER, actor=Actor("cli", "t"), evidence=None)


def _check_fields(desk: Harness, old_id: str, new_id: str, *, generation: int) -> None:
    vault = desk.runtime.desk.vault
    for direct in (False, True):
        with desk.runtime.db.read() as session:
            if direct:
                direct_rows.use_direct_rows(session)
            key = session.get(CustomerKey, vault.email_hash(CUSTOMER))
            assert key is not None and key.generation == generation and key.key_enc
            del key
            old, new = session.get(Case, old_id), session.get(Case, new_id)
            assert old is not None and new is not None
            assert vault.decrypt(new.message_enc, session=session) == NEW
            assert vault.decrypt(new.email_enc, session=session) == CUSTOMER
            assert not vault.decrypt(old.message_enc, session=session)
            assert not vault.decrypt(old.email_enc, session=session)
            assert new.advice and str(new.advice["summary"]).startswith(f"c1.{new.email_hash}.")
            text = advisory.summary_text(vault, new.advice, session=session)
            assert text and text != advisory.ERASED


def test_returning_customer_refunded_after_erasure(desk: Harness) -> None:
    old = _ask(desk, OLD)
    desk.sweep()
    assert case_row(desk, old["id"]).status == "refunded"
    _erase(desk)
    new = _ask(desk, NEW)
    desk.sweep()
    assert case_row(desk, new["id"]).status == "refunded"
    assert [e.status for e in executions(desk, new["id"])] == ["succeeded"]
    _check_fields(desk, old["id"], new["id"], generation=2)


def test_returning_customer_with_jobs_swept_not_inline(desk: Harness) -> None:
    desk.runtime.desk.run_inline = False
    old = _ask(desk, OLD)
    _erase(desk)  # the first case's jobs are still queued
    new = _ask(desk, NEW)
    desk.sweep()
    desk.runtime.desk.run_inline = True
    desk.sweep()
    assert case_row(desk, new["id"]).status == "refunded"
    assert case_row(desk, old["id"]).status != "refunded"
    _check_fields(desk, old["id"], new["id"], generation=2)


def test_returning_twice(desk: Harness) -> None:
    first = _ask(desk, OLD)
    desk.sweep()
    _erase(desk)
    second = _ask(desk, OLD)
    desk.sweep()
    _erase(desk)
    third = _ask(desk, NEW)
    desk.sweep()
    assert case_row(desk, third["id"]).status == "refunded"
    assert case_row(desk, second["id"]).erased_at is not None
    _check_fields(desk, first["id"], third["id"], generation=3)
