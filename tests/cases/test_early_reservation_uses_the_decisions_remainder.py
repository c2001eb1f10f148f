"""The reservation made in the decision's transaction reuses the
decision's "refundable". Concurrent cases of different amounts on one payment, through real
HTTP, with a refund made elsewhere at the processor first: never more out than captured."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.helpers import Harness, LiveServer


def test_concurrent_partial_refunds_never_exceed_the_payment(
    live: tuple[Harness, LiveServer],
) -> None:
    desk, server = live
    payment = desk.payment("40.00")
    desk.sandbox.create_refund(  # a refund made elsewhere (the dashboard), not by us
        payment_id=payment,
        amount=1500,
        currency="usd",
        idempotency_key="elsewhere-1",
        metadata={},
    )
    amounts = [f"{9 + i / 10:.2f}" for i in range(12)]  # distinct: no duplicates
    headers = {"Authorization": f"Bearer {desk.key}"}
    with httpx.Client(base_url=server.url, timeout=60) as client:

        def one(amount: str) -> httpx.Response:
            return client.post(
                "/api/v1/refund-requests",
                json=desk.request(payment, amount, reason="damaged"),
                headers=headers,
            )

        with ThreadPoolExecutor(max_workers=12) as pool:
            responses = list(pool.map(one, amounts))
    assert all(r.status_code == 201 for r in responses), [r.text[:200] for r in responses]
    desk.sweep()
    refunds = desk.refunds_at_processor(payment)
    total = sum(r["amount"] for r in refunds if r.get("status", "succeeded") != "failed")
    assert len(refunds) > 1, [
        (r.json()["status"], (r.json().get("decision") or {}).get("rule")) for r in responses
    ]
    assert total <= 4000, (total, [r["amount"] for r in refunds])
