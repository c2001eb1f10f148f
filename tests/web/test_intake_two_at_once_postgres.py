"""Two intake captures at once on PostgreSQL where job processes run the jobs
(`intake_limit` 2, the gate holding `Database.serving`), over real HTTP (uvicorn).

Attacks: duplicates of one payment filed concurrently (one case opens, the others are held as
possible duplicates, one refund in the end), one Idempotency-Key concurrently (one case, the
others replay it; a different body under the key is 409), an erasure racing intakes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from refund_desk.customers import erasure
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor, verify_chain
from refund_desk.storage.models import Case, CustomerKey
from refund_desk.web.admission import IntakeGate
from tests.conftest import TEST_SECRET, make_runtime
from tests.helpers import CUSTOMER, Harness, LiveServer

pytestmark = pytest.mark.postgres

N = 24


@pytest.fixture()
def served(pg_url: str) -> Iterator[tuple[Harness, LiveServer]]:
    rt: Runtime = make_runtime(pg_url)
    rt.desk.jobs_elsewhere = True  # `serve --job-processes N`: the default limit is 2 here
    harness = Harness(rt)
    harness.publish()
    server = LiveServer(rt)
    yield harness, server
    server.stop()
    rt.db.dispose()


def _gate(server: LiveServer) -> IntakeGate:
    return server.server.config.app.state.intake_gate  # type: ignore[no-any-return]


def _burst(
    server: LiveServer, key: str, bodies: list[tuple[dict[str, Any], str | None]]
) -> list[Any]:
    with httpx.Client(base_url=server.url, timeout=60) as client:

        def one(item: tuple[dict[str, Any], str | None]) -> httpx.Response:
            body, idem = item
            headers = {"Authorization": f"Bearer {key}"}
            if idem:
                headers["Idempotency-Key"] = idem
            return client.post("/api/v1/refund-requests", json=body, headers=headers)

        with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
            return list(pool.map(one, bodies))


def test_the_gate_admits_two_on_postgresql_with_job_processes(
    served: tuple[Harness, LiveServer],
) -> None:
    desk, server = served
    gate = _gate(server)
    assert gate.limit == 2
    payments = [desk.payment() for _ in range(N)]
    answers = _burst(server, desk.key, [(desk.request(p), None) for p in payments])
    assert [a.status_code for a in answers] == [201] * N, [a.text[:200] for a in answers][:3]
    assert gate.most_inside <= 2 and gate.inside == 0


def test_concurrent_duplicates_of_one_payment_open_one_case(
    served: tuple[Harness, LiveServer],
) -> None:
    desk, server = served
    payment = desk.payment("30.00")
    answers = _burst(server, desk.key, [(desk.request(payment, "20.00"), None)] * N)
    assert all(a.status_code == 201 for a in answers), {a.status_code for a in answers}
    bodies = [a.json() for a in answers]
    assert len({b["id"] for b in bodies}) == N
    first = [b for b in bodies if not b["possible_duplicate"]]
    assert len(first) == 1, [(b["status"], b["possible_duplicate"]) for b in bodies]
    # the job processes' work, run here: one refund at the processor
    desk.sweep()
    desk.sweep()
    refunds = desk.refunds_at_processor(payment)
    assert len(refunds) == 1 and refunds[0]["amount"] == 2000, refunds
    with desk.runtime.db.read() as session:
        held = session.scalars(select(Case).where(Case.id != first[0]["id"])).all()
        assert all(c.status != "refunded" for c in held)
        assert verify_chain(TEST_SECRET, session).ok


def test_one_idempotency_key_concurrently_is_one_case_and_another_body_is_409(
    served: tuple[Harness, LiveServer],
) -> None:
    desk, server = served
    payment = desk.payment("30.00")
    body = desk.request(payment, "20.00")
    other = desk.request(payment, "10.00")
    items = [(body, "checkout-7")] * (N - 4) + [(other, "checkout-7")] * 4
    answers = _burst(server, desk.key, items)
    same = answers[: N - 4]
    differ = answers[N - 4 :]
    codes = [a.status_code for a in answers]
    created = [a for a in answers if a.status_code == 201]
    assert len(created) == 1, codes
    if created[0] in differ:  # the other body came first: the same bodies are then 409
        assert all(a.status_code == 409 for a in same if a is not created[0]), codes
    else:
        assert {a.status_code for a in same} <= {200, 201}, codes
        assert len({a.json()["id"] for a in same}) == 1
        assert all(a.status_code == 409 for a in differ), codes
    with desk.runtime.db.read() as session:
        assert session.scalar(select(func.count()).select_from(Case)) == 1
    desk.sweep()
    assert len(desk.refunds_at_processor(payment)) <= 1


def test_an_erasure_racing_intakes_over_http(
    served: tuple[Harness, LiveServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A returning customer is erased while a burst of their intakes arrives: every request
    is answered 201, every case the erasure read is erased, and every case it did not read
    is readable under the customer's new key (never the destroyed one)."""
    desk, server = served
    payments = [desk.payment("30.00") for _ in range(N + 1)]
    assert desk.post(desk.request(payments[0], "20.00")).status_code == 201
    real = erasure._erase_cases

    def slow(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        time.sleep(0.5)
        return out

    monkeypatch.setattr(erasure, "_erase_cases", slow)
    result: list[Any] = []
    eraser = threading.Thread(
        target=lambda: result.append(
            erasure.erase_customer(
                desk.runtime.desk, CUSTOMER, actor=Actor("cli", "ops"), evidence=None
            )
        )
    )
    eraser.start()
    time.sleep(0.1)
    answers = _burst(server, desk.key, [(desk.request(p, "20.00"), None) for p in payments[1:]])
    eraser.join(30)
    assert result, "the erasure did not finish"
    assert all(a.status_code == 201 for a in answers), [a.text[:200] for a in answers][:3]
    erased_ids = set(result[0].cases)
    vault = desk.runtime.desk.vault
    with desk.runtime.db.read() as session:
        key = session.get(CustomerKey, vault.email_hash(CUSTOMER))
        assert key is not None and key.key_enc is not None and key.generation == 2
        for case in session.scalars(select(Case)).all():
            if case.id in erased_ids:
                assert case.erased_at is not None, case.id
                continue
            assert case.erased_at is None
            assert case.email_enc.startswith("c1.") and ".2." in case.email_enc[:90], case.id
            assert vault.decrypt(case.email_enc, session=session) == CUSTOMER, case.id
        assert verify_chain(TEST_SECRET, session).ok


@pytest.fixture()
def two_servers(pg_url: str) -> Iterator[list[tuple[Harness, LiveServer]]]:
    """Two HTTP processes (replicas) on one database, each with job processes elsewhere."""
    made = []
    for _ in range(2):
        rt = make_runtime(pg_url)
        rt.desk.jobs_elsewhere = True
        made.append((Harness(rt), LiveServer(rt)))
    made[0][0].publish()
    yield made
    for harness, server in made:
        server.stop()
        harness.runtime.db.dispose()


def _burst_across(
    servers: list[tuple[Harness, LiveServer]], body: dict[str, Any], idem: str | None, n: int
) -> list[Any]:
    clients = [httpx.Client(base_url=s.url, timeout=60) for _, s in servers]
    try:

        def one(i: int) -> httpx.Response:
            desk = servers[i % len(servers)][0]
            headers = {"Authorization": f"Bearer {desk.key}"}
            if idem:
                headers["Idempotency-Key"] = idem
            return clients[i % len(clients)].post(
                "/api/v1/refund-requests", json=body, headers=headers
            )

        with ThreadPoolExecutor(max_workers=n) as pool:
            return list(pool.map(one, range(n)))
    finally:
        for c in clients:
            c.close()


def test_duplicates_across_two_replicas_open_one_case(
    two_servers: list[tuple[Harness, LiveServer]],
) -> None:
    desk = two_servers[0][0]
    payment = desk.payment("30.00")
    answers = _burst_across(two_servers, desk.request(payment, "20.00"), None, N)
    assert all(a.status_code == 201 for a in answers), [a.text[:200] for a in answers][:3]
    bodies = [a.json() for a in answers]
    assert sum(not b["possible_duplicate"] for b in bodies) == 1
    desk.sweep()
    desk.sweep()
    assert len(desk.refunds_at_processor(payment)) == 1
    with desk.runtime.db.read() as session:
        assert verify_chain(TEST_SECRET, session).ok


def test_one_idempotency_key_across_two_replicas_is_one_case(
    two_servers: list[tuple[Harness, LiveServer]],
) -> None:
    """An Idempotency-Key is scoped to the API key: both replicas' harnesses made their own
    API key, so one harness's key is used against both replicas."""
    desk = two_servers[0][0]
    payment = desk.payment("30.00")
    body = desk.request(payment, "20.00")
    clients = [httpx.Client(base_url=s.url, timeout=60) for _, s in two_servers]
    try:

        def one(i: int) -> httpx.Response:
            return clients[i % 2].post(
                "/api/v1/refund-requests",
                json=body,
                headers={"Authorization": f"Bearer {desk.key}", "Idempotency-Key": "k-1"},
            )

        with ThreadPoolExecutor(max_workers=N) as pool:
            answers = list(pool.map(one, range(N)))
    finally:
        for c in clients:
            c.close()
    codes = [a.status_code for a in answers]
    assert set(codes) <= {200, 201} and codes.count(201) == 1, codes
    assert len({a.json()["id"] for a in answers}) == 1
    with desk.runtime.db.read() as session:
        assert session.scalar(select(func.count()).select_from(Case)) == 1


def test_duplicates_of_one_payment_through_api_form_and_email_share_the_gate(
    pg_url: str, tmp_path: Any
) -> None:
    """One payment asked about at once through the API, the web form and email: they pass
    one gate (at most two captures at once), one case opens, the others are held."""
    import re

    from fastapi.testclient import TestClient

    from refund_desk.payments.sandbox import SandboxProcessor
    from refund_desk.runtime import build
    from refund_desk.storage.db import Database
    from refund_desk.web.app import create_app
    from tests.conftest import _raise_crash, make_settings
    from tests.customers.conftest import EMAIL_SECRET, raw_email

    settings = make_settings(
        pg_url,
        REFUND_DESK_EMAIL_SECRET=EMAIL_SECRET,
        REFUND_DESK_EVIDENCE_DIR=str(tmp_path / "evidence"),
        REFUND_DESK_PUBLIC_URL="https://desk.example",
    )
    db = Database.from_url(pg_url)
    sandbox = SandboxProcessor(db, crash=_raise_crash)
    sandbox.honour_idempotency_keys = False
    rt = build(settings, db=db, processor=sandbox)
    rt.desk.jobs_elsewhere = True
    try:
        harness = Harness(rt)
        harness.publish()
        app = create_app(rt, scheduler=False)
        gate: IntakeGate = app.state.intake_gate
        assert gate.limit == 2
        payment = harness.payment("30.00")
        with TestClient(app) as client:
            tokens = []
            for _ in range(6):
                page = client.get("/request")
                found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
                assert found, page.text[:300]
                tokens.append(found.group(1))

            def api(i: int) -> Any:
                return client.post(
                    "/api/v1/refund-requests",
                    json=harness.request(payment, "20.00"),
                    headers={"Authorization": f"Bearer {harness.key}"},
                )

            def form(i: int) -> Any:
                return client.post(
                    "/request",
                    data={
                        "csrf_token": tokens[i],
                        "email": CUSTOMER,
                        "payment": payment,
                        "amount": "20.00",
                        "reason": "damaged",
                        "message": "It arrived broken.",
                    },
                )

            def mail(i: int) -> Any:
                raw = raw_email(
                    subject=f"Refund for order {payment}",
                    text="Amount: 20.00\nThe vase arrived broken.",
                    message_id=f"<m{i}@example.com>",
                )
                return client.post(
                    "/webhooks/email",
                    content=raw,
                    headers={
                        "Authorization": f"Bearer {EMAIL_SECRET}",
                        "Content-Type": "message/rfc822",
                    },
                )

            calls = [(f, i) for i in range(6) for f in (api, mail)] + [(form, i) for i in range(3)]
            with ThreadPoolExecutor(len(calls)) as pool:
                answers = list(pool.map(lambda c: c[0](c[1]), calls))
        assert all(a.status_code == 201 for a in answers), [
            (a.status_code, a.text[:160]) for a in answers if a.status_code != 201
        ][:3]
        assert gate.most_inside <= 2 and gate.inside == 0
        with rt.db.read() as session:
            cases = session.scalars(select(Case)).all()
            assert len(cases) == len(calls)
            assert sum(not c.possible_duplicate for c in cases) == 1, [
                (c.source, c.possible_duplicate) for c in cases
            ]
            assert verify_chain(TEST_SECRET, session).ok
        harness.sweep()
        harness.sweep()
        assert len(harness.refunds_at_processor(payment)) == 1
    finally:
        db.dispose()
