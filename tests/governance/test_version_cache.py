"""A published policy version is read once per database, and only once its reader committed.

Versions never change once published, so `load_version` keeps what a committed transaction
read for the database's later transactions. A version read by the transaction that is
publishing it is not kept: that transaction may roll back, and the next publication then
takes the same number with other content.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from sqlalchemy import event

from refund_desk.governance.versions import load_version, publish
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor
from tests.helpers import ACME

ACTOR = Actor("cli", "tests")


def _source(say: str) -> str:
    raw = yaml.safe_load(ACME.read_text())
    raw["rules"][0]["say"] = say
    return yaml.safe_dump(raw, sort_keys=False)


def _reads_of_versions(runtime: Runtime) -> list[str]:
    seen: list[str] = []

    @event.listens_for(runtime.db.engine, "before_cursor_execute")
    def _count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "FROM policy_versions" in statement:
            seen.append(statement)

    return seen


def test_a_committed_read_is_not_made_again(any_runtime: Runtime) -> None:
    with any_runtime.db.write() as session:
        version = publish(
            session, any_runtime.desk.audit, source=_source("first"), actor=ACTOR
        ).version
    reads = _reads_of_versions(any_runtime)
    with any_runtime.db.read() as session:
        first = load_version(session, version)
    with any_runtime.db.read() as session:
        again = load_version(session, version)
    assert again is first
    assert len(reads) == 1


class _Abandon(Exception):
    pass


def test_a_version_read_by_a_transaction_that_rolls_back_is_not_kept(
    any_runtime: Runtime,
) -> None:
    audit = any_runtime.desk.audit
    with pytest.raises(_Abandon), any_runtime.db.write() as session:
        version = publish(session, audit, source=_source("rolled back"), actor=ACTOR).version
        assert load_version(session, version).doc.rules[0].say == "rolled back"
        raise _Abandon
    with any_runtime.db.write() as session:
        again = publish(session, audit, source=_source("kept"), actor=ACTOR).version
    assert again == version  # the same number, other content
    with any_runtime.db.read() as session:
        assert load_version(session, version).doc.rules[0].say == "kept"
