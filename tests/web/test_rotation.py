"""Rotation: an API key's successor works at once, the old key for its grace period only, on
the record."""

from __future__ import annotations

from datetime import timedelta

from refund_desk import clock
from refund_desk.api_keys import list_api_keys, rotate_api_key
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor, verify_chain
from tests.conftest import TEST_SECRET
from tests.helpers import Harness


def _ask(desk: Harness, key: str) -> int:
    headers = {"Authorization": f"Bearer {key}"}
    return desk.client.get("/api/v1/cases/c_missing", headers=headers).status_code


def test_a_rotated_key_works_for_its_grace_period_then_stops(runtime: Runtime) -> None:
    desk = Harness(runtime)
    old = desk.key
    new = rotate_api_key(
        runtime.db, "tests", grace=timedelta(hours=1), audit=runtime.desk.audit,
        actor=Actor("cli", "ops"),
    )  # fmt: skip
    assert new != old and new.startswith("rdk_")
    assert _ask(desk, old) == 404 and _ask(desk, new) == 404  # both authenticate
    with runtime.db.read() as session:
        keys = list_api_keys(session)
    states = [k.state(clock.now()) for k in keys]
    assert states == ["rotating", "active"]
    assert keys[0].last_used_at is not None and keys[1].last_used_at is not None
    with clock.travel(timedelta(hours=1, minutes=1)):
        assert _ask(desk, old) == 401
        assert _ask(desk, new) == 404
        with runtime.db.read() as session:
            assert list_api_keys(session)[0].state(clock.now()) == "expired"
    with runtime.db.read() as session:
        assert verify_chain(TEST_SECRET, session).ok
        from refund_desk.storage.audit import iter_records

        [record] = [r for r in iter_records(session) if r.action == "api_key.rotated"]
    assert record.payload["previous"] == [old[:10]] and record.payload["prefix"] == new[:10]
    assert record.payload["grace_seconds"] == 3600
    assert old not in str(record.payload) and new not in str(record.payload)


def test_rotating_with_no_grace_stops_the_old_key_at_once(runtime: Runtime) -> None:
    desk = Harness(runtime)
    new = rotate_api_key(
        runtime.db, "tests", grace=timedelta(0), audit=runtime.desk.audit, actor=Actor("cli")
    )
    assert _ask(desk, desk.key) == 401 and _ask(desk, new) == 404
