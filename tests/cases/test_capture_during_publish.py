"""Captures while `/refund-policy` publishes and rolls back (PostgreSQL, two replicas): each
case's version is one that was published, the same on the case row, its
`request.received` record and the API's answer, and never older than one active before the
capture began nor newer than one active when it answered."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import select

from refund_desk.governance.admin import rollback
from refund_desk.governance.versions import publish
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import AuditRecord, Case, Control
from tests.conftest import make_runtime
from tests.helpers import ACME, Harness

pytestmark = pytest.mark.postgres

TEXTS = [ACME.read_text(), ACME.read_text().replace("4: 24h", "4: 2d")]


def _active(rt: Any) -> int | None:
    with rt.db.read() as session:
        return session.get(Control, 1).active_version  # type: ignore[union-attr]


def test_capture_during_publish_and_rollback(pg_url: str) -> None:
    rts = [make_runtime(pg_url), make_runtime(pg_url)]
    try:
        desks = [Harness(rts[0])]
        desks.append(Harness.__new__(Harness))
        desks[1].runtime = rts[1]
        from fastapi.testclient import TestClient

        from refund_desk.web.app import create_app

        desks[1].client = TestClient(create_app(rts[1], scheduler=False))
        desks[1].key = desks[0].key
        desks[0].publish(TEXTS[0])
        desks[0].publish(TEXTS[1])  # backtests on record for both texts
        stop = threading.Event()
        errors: list[BaseException] = []
        ops: list[int] = []

        def governor() -> None:
            i = 0
            try:
                while not stop.is_set():
                    with rts[1].db.write() as session:
                        if i % 2:
                            rollback(session, rts[1].desk.audit, version=2 - (i // 2) % 2,
                                     actor=Actor("cli", "gov"))  # fmt: skip
                        else:
                            publish(session, rts[1].desk.audit, source=TEXTS[(i // 2) % 2],
                                    actor=Actor("cli", "gov"), backtest="require")  # fmt: skip
                    i += 1
                    ops.append(i)
            except BaseException as exc:
                errors.append(exc)

        payments = [desks[0].payment("900.00") for _ in range(4)]

        def one(i: int) -> tuple[int | None, Any, int | None]:
            before = _active(rts[0])
            resp = desks[i % 2].post(desks[0].request(payments[i % 4], "1.00"))
            after = _active(rts[0])
            return before, resp, after

        g = threading.Thread(target=governor)
        g.start()
        try:
            with ThreadPoolExecutor(max_workers=8) as pool:
                results = list(pool.map(one, range(80)))
        finally:
            stop.set()
            g.join(60)
        bad = [r.text for _, r, _ in results if r.status_code != 201]
        assert not bad, bad[:3]
        with rts[0].db.read() as session:
            for before, resp, after in results:
                cid = resp.json()["id"]
                answer = resp.json()["decision"]["policy_version"]
                case = session.get(Case, cid)
                rec = session.scalars(
                    select(AuditRecord).where(
                        AuditRecord.case_id == cid, AuditRecord.action == "request.received"
                    )
                ).one()
                assert case.policy_version == rec.policy_version == answer, (
                    case.policy_version,
                    rec.policy_version,
                    answer,
                )
                assert before is not None and after is not None
                assert before <= case.policy_version <= after, (before, case.policy_version, after)
        assert not errors, errors
        assert len(ops) >= 4, ops
        assert len({r.json()["decision"]["policy_version"] for _, r, _ in results}) >= 2
    finally:
        for rt in rts:
            rt.db.dispose()
