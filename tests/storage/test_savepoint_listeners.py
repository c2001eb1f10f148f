"""`Vault.for_customer`'s savepoint (PostgreSQL) fires the session-wide listeners that
stand for "the transaction committed" / "the transaction rolled back".

SQLAlchemy dispatches `before_commit`, `after_commit` and `after_rollback` for a SAVEPOINT's
release and rollback as well as for the real transaction. This change added the first
savepoint (`_share_live_key`) and, in the same round, moved work onto those events:

* `storage/audit._forget` (after_rollback) drops the records appended so far when the look at
  a new or erased customer's key is rolled back: the transaction then commits its change
  WITHOUT its audit record, silently (the chain still verifies: the record never existed).
* `storage/db._run_on_commit` (after_commit) runs `on_commit` callbacks when the look at a
  live key is released: `load_version` keeps a version the transaction itself wrote before
  that transaction commits; if it then rolls back, the next publication takes the number
  and every later evaluation gets the rolled-back text from the cache.

No flow of today calls `for_customer` after an append for a customer without a live key, or
after reading a version it published; these tests compose the real functions to show the
contracts (`append`: "it commits or rolls back with the change"; `on_commit`: "never if it
rolls back") no longer hold once a savepoint is in the transaction.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml
from sqlalchemy import func, select
from sqlmodel import col

from refund_desk.governance.versions import load_version, publish
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import SYSTEM, Actor
from refund_desk.storage.models import AuditRecord
from tests.conftest import make_runtime
from tests.helpers import ACME

ACTOR = Actor("cli", "tests")


@pytest.fixture()
def any_runtime(pg_url: str) -> Iterator[Runtime]:
    """PostgreSQL only: the savepoint is made there (SQLite's writer excludes all anyway)."""
    runtime = make_runtime(pg_url)
    yield runtime
    runtime.db.dispose()


def _source(say: str) -> str:
    raw = yaml.safe_load(ACME.read_text())
    raw["rules"][0]["say"] = say
    return yaml.safe_dump(raw, sort_keys=False)


class _Abandon(Exception):
    pass


def test_a_record_appended_before_a_new_customers_key_commits_with_the_change(
    any_runtime: Runtime,
) -> None:
    desk = any_runtime.desk
    with any_runtime.db.write() as session:
        desk.audit.append(session, action="review.probe", actor=SYSTEM, payload={"n": 1})
        desk.vault.for_customer(session, desk.vault.email_hash("new-customer@example.com"))
    with any_runtime.db.read() as session:
        kept = session.scalar(
            select(func.count())
            .select_from(AuditRecord)
            .where(col(AuditRecord.action) == "review.probe")
        )
    assert kept == 1  # the key was made and committed; its transaction's record must be too


def test_a_version_read_by_a_transaction_that_rolls_back_is_not_kept_after_a_key_look(
    any_runtime: Runtime,
) -> None:
    desk, audit = any_runtime.desk, any_runtime.desk.audit
    live = desk.vault.email_hash("known@example.com")
    with any_runtime.db.write() as session:
        desk.vault.for_customer(session, live)  # a customer with a live key
    with pytest.raises(_Abandon), any_runtime.db.write() as session:
        version = publish(session, audit, source=_source("rolled back"), actor=ACTOR).version
        assert load_version(session, version).doc.rules[0].say == "rolled back"
        desk.vault.for_customer(session, live)  # the shared look, in a savepoint, released
        raise _Abandon
    with any_runtime.db.write() as session:
        again = publish(session, audit, source=_source("kept"), actor=ACTOR).version
    assert again == version  # the same number, other content
    with any_runtime.db.read() as session:
        assert load_version(session, version).doc.rules[0].say == "kept"
