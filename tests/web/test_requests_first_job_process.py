"""The real thing: `refund-desk serve --job-processes 1` (a server process and a
`refund-desk worker` process on one SQLite file) under concurrent intakes. Every request is
answered, every case refunded once, the audit chain verifies, and the server and its job
process stop cleanly (no lock left that keeps anyone waiting)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx

from tests.helpers import ACME
from tests.process_helpers import Env

N = 8  # each payment is made by a CLI run (about a second each)


def test_concurrent_intakes_against_a_server_with_a_real_job_process(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.cli("db", "upgrade")
    env.cli("policy", "publish", str(ACME))
    key = env.api_key()
    emails = [f"c{i}@example.com" for i in range(N)]  # apart: no repeat-refund signal
    payments = [env.payment("30.00", e, age_days=2) for e in emails]
    headers = {"Authorization": f"Bearer {key}"}
    proc, url = env.serve("--job-processes", "1")
    try:

        async def post_all() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=url, timeout=60) as client:
                return list(
                    await asyncio.gather(
                        *(
                            client.post(
                                "/api/v1/refund-requests",
                                json={
                                    "payment": p,
                                    "email": e,
                                    "currency": "USD",
                                    "amount": "20.00",
                                    "message": "The mug arrived broken.",
                                },
                                headers=headers,
                            )
                            for p, e in zip(payments, emails, strict=True)
                        )
                    )
                )

        responses = asyncio.run(post_all())
        assert all(r.status_code == 201 for r in responses), [r.text for r in responses]
        ids = [r.json()["id"] for r in responses]
        deadline = time.monotonic() + 90
        statuses: dict[str, Any] = {}
        while time.monotonic() < deadline:
            statuses = {
                i: httpx.get(f"{url}/api/v1/cases/{i}", headers=headers).json()["status"]
                for i in ids
                if statuses.get(i) != "refunded"
            } | {i: s for i, s in statuses.items() if s == "refunded"}
            if all(s == "refunded" for s in statuses.values()):
                break
            time.sleep(0.3)
        assert all(s == "refunded" for s in statuses.values()), statuses
        for i in ids:
            case = httpx.get(f"{url}/api/v1/cases/{i}", headers=headers).json()
            assert [r["amount"] for r in case["refunds"]] == ["20.00"], case
    finally:
        output = env.stop(proc)
    assert proc.returncode is not None
    assert "Traceback" not in output, output[-3000:]
    shown = json.loads(env.cli("sandbox", "payment", "show", payments[0]).stdout)
    assert len(shown["refunds"]) == 1
    assert "ok:" in env.cli("audit", "verify").stdout
