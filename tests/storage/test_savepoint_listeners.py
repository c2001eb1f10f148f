"""`Vault.for_customer`'s savepoint (PostgreSQL) must not pass for the end of the transaction.

SQLAlchemy dispatches `before_commit`, `after_commit` and `after_rollback` for a SAVEPOINT's
release and rollback as well as for the real transaction. Listeners on those events must
still hold their contracts with a savepoint inside: `audit.append` "commits or rolls back with
the change" (`storage/audit._forget`), and `on_commit` callbacks (`storage/db._run_on_commit`,
which `load_version`'s cache relies on) "never run if it rolls back".
"""

from __future__ import annotations

import pytest
import yaml
from sqlalchemy import func, select
from sqlmodel import col

from refund_desk.governance.versions import load_version, publish
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import SYSTEM, Actor
from refund_desk.storage.models import AuditRecord
from tests.helpers import ACME

ACTOR = Actor("cli", "tests")


def _source(say: str) -> str:
    raw = yaml.safe_load(ACME.read_text())
    raw["rules"][0]["say"] = say
    return yaml.safe_dump(raw, sort_keys=False)


class _Abandon(Exception):
    pass


def test_a_record_appended_before_a_new_customers_key_commits_with_the_change(
    pg_runtime: Runtime,
) -> None:
    desk = pg_runtime.desk
    with pg_runtime.db.write() as session:
        desk.audit.append(session, action="review.probe", actor=SYSTEM, payload={"n": 1})
        desk.vault.for_customer(session, desk.vault.email_hash("new-customer@example.com"))
    with pg_runtime.db.read() as session:
        kept = session.scalar(
            select(func.count())
            .select_from(AuditRecord)
            .where(col(AuditRecord.action) == "review.probe")
        )
    assert kept == 1  # the key was made and committed; its transaction's record must be too


def test_a_version_read_by_a_transaction_that_rolls_back_is_not_kept_after_a_key_look(
    pg_runtime: Runtime,
) -> None:
    desk, audit = pg_runtime.desk, pg_runtime.desk.audit
    live = desk.vault.email_hash("known@example.com")
    with pg_runtime.db.write() as session:
        desk.vault.for_customer(session, live)  # a customer with a live key
    with pytest.raises(_Abandon), pg_runtime.db.write() as session:
        version = publish(session, audit, source=_source("rolled back"), actor=ACTOR).version
        assert load_version(session, version).doc.rules[0].say == "rolled back"
        desk.vault.for_customer(session, live)  # the shared look, in a savepoint, released
        raise _Abandon
    with pg_runtime.db.write() as session:
        again = publish(session, audit, source=_source("kept"), actor=ACTOR).version
    assert again == version  # the same number, other content
    with pg_runtime.db.read() as session:
        assert load_version(session, version).doc.rules[0].say == "kept"
