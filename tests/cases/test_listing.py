"""`GET /api/v1/cases` (cursor pages, filters) and `refund-desk cases export` (CSV, JSON Lines)."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import timedelta

from refund_desk import clock
from refund_desk.cases.listing import EXPORT_FIELDS, ExportWriter, Filters, iter_export
from refund_desk.runtime import Runtime
from tests.helpers import Harness


def _cases(desk: Harness, n: int, *, email: str = "ada@example.com") -> list[str]:
    ids = []
    for _ in range(n):
        payment = desk.payment("30.00", email=email)
        body = desk.post({**desk.request(payment, "20.00"), "email": email}).json()
        ids.append(body["id"])
    return ids


def _list(desk: Harness, **params: object) -> dict:  # type: ignore[type-arg]
    response = desk.client.get(
        "/api/v1/cases", params=params, headers={"Authorization": f"Bearer {desk.key}"}
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_cases_come_in_cursor_pages_with_filters(runtime: Runtime) -> None:
    desk = Harness(runtime)
    desk.publish()
    ada = _cases(desk, 5)
    bob = _cases(desk, 2, email="bob@example.com")
    big = desk.post(desk.request(desk.payment("900.00"), "600.00")).json()["id"]

    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        body = _list(desk, limit=3, **({"cursor": cursor} if cursor else {}))
        seen += [c["id"] for c in body["cases"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == [*ada, *bob, big] and pages == 3
    assert [c["id"] for c in _list(desk, email="BOB@example.com")["cases"]] == bob
    waiting = _list(desk, status="awaiting_approval")["cases"]
    assert [c["id"] for c in waiting] == [big] and waiting[0]["amount"] == "600.00"
    one = _list(desk, payment=_list(desk)["cases"][0]["payment"])["cases"]
    assert [c["id"] for c in one] == [ada[0]]
    tomorrow = (clock.now() + timedelta(days=1)).date().isoformat()
    assert _list(desk, since=tomorrow)["cases"] == []
    assert len(_list(desk, until=tomorrow)["cases"]) == 8
    assert "email" not in json.dumps(_list(desk)).replace('"source": "email"', "")

    ask = {"Authorization": f"Bearer {desk.key}"}
    bad = desk.client.get("/api/v1/cases", params={"status": "maybe", "since": "x"}, headers=ask)
    assert bad.status_code == 422 and set(bad.json()["error"]["fields"]) == {"status", "since"}
    assert (
        desk.client.get("/api/v1/cases", params={"cursor": "nonsense"}, headers=ask).status_code
        == 422
    )
    assert desk.client.get("/api/v1/cases", params={"limit": 101}, headers=ask).status_code == 422
    assert desk.client.get("/api/v1/cases").status_code == 401


def test_export_has_one_line_per_case_in_major_units_with_decision_and_refund(
    runtime: Runtime,
) -> None:
    desk = Harness(runtime)
    desk.publish()
    [paid] = _cases(desk, 1)
    waiting = desk.post(desk.request(desk.payment("900.00"), "600.00")).json()["id"]
    with runtime.db.read() as session:
        rows = list(iter_export(session, Filters(since=clock.now() - timedelta(days=1)), batch=1))
    assert [r["case_id"] for r in rows] == [paid, waiting]
    first = rows[0]
    assert (first["amount"], first["currency"], first["refunded_amount"]) == (
        "20.00",
        "USD",
        "20.00",
    )
    assert (first["status"], first["rule"], first["tier"], first["policy_version"]) == (
        "refunded", "damaged-small", 2, 1,
    )  # fmt: skip
    assert first["execution_id"] and first["processor_refund_id"]
    assert first["seconds_to_decision"] is not None and first["seconds_to_decision"] >= 0
    assert rows[1]["refunded_amount"] == "0.00" and rows[1]["decided_at"] is None
    zoned = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00")
    times = [first["created_at"], first["decided_at"], first["updated_at"]]
    assert all(zoned.fullmatch(t) for t in times), "ISO 8601 with the zone"

    out = io.StringIO()
    writer = ExportWriter(out, "csv")
    for row in rows:
        writer.write(row)
    parsed = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert tuple(parsed[0]) == EXPORT_FIELDS and parsed[0]["amount"] == "20.00"
    out = io.StringIO()
    writer = ExportWriter(out, "jsonl")
    writer.write(rows[0])
    assert json.loads(out.getvalue())["approvers"] == []
