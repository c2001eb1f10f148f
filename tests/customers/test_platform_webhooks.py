"""Shopify, Zendesk and Gorgias deliveries: verified, mapped to one case, repeats idempotent."""

from __future__ import annotations

import json

from refund_desk import clock
from tests.customers.conftest import GORGIAS_SECRET, Channels
from tests.helpers import CUSTOMER


def _shopify_return(payment: str, return_id: int = 9001) -> bytes:
    return json.dumps(
        {
            "id": return_id,
            "status": "requested",
            "order": {
                "id": 450789469,
                "email": CUSTOMER,
                "transactions": [{"kind": "sale", "payment_id": payment}],
            },
            "return_line_items": [
                {"quantity": 1, "return_reason": "DEFECTIVE", "customer_note": "The lamp flickers."}
            ],
        }
    ).encode()


def test_shopify_bad_or_missing_signature_is_refused(channels: Channels) -> None:
    payment = channels.payment("30.00")
    body = _shopify_return(payment)
    assert channels.post_shopify(body, secret="another-shops-secret").status_code == 401
    assert channels.post_shopify(body, signature="").status_code == 401
    tampered = channels.post_shopify(
        body.replace(b"9001", b"9002"), signature=None
    )  # re-signed: fine
    assert tampered.status_code == 201
    assert channels.case_count() == 1


def test_shopify_same_delivery_twice_is_one_case(channels: Channels) -> None:
    payment = channels.payment("30.00")
    body = _shopify_return(payment)
    first = channels.post_shopify(body)
    again = channels.post_shopify(body)
    assert first.status_code == 201 and again.status_code == 200
    assert first.json()["case"] == again.json()["case"] and again.json()["duplicate"] is True
    assert channels.case_count() == 1
    view = channels.get(first.json()["case"])
    assert view["source"] == "shopify" and view["external_id"] == "9001"
    assert view["reason"] == "defective" and view["reason_source"] == "customer_input"


def test_shopify_unknown_topic_is_refused(channels: Channels) -> None:
    payment = channels.payment("30.00")
    response = channels.post_shopify(_shopify_return(payment), topic="orders/create")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "unsupported_topic"
    assert channels.case_count() == 0


def test_zendesk_signature_tags_and_repeats(channels: Channels) -> None:
    payment = channels.payment("30.00")
    ticket = {
        "ticket": {
            "id": 88,
            "tags": "refund vip",
            "subject": f"Refund {payment}",
            "description": "Broken on arrival.",
            "requester": {"email": CUSTOMER},
        }
    }
    body = json.dumps(ticket).encode()
    assert channels.post_zendesk(body, secret="wrong").status_code == 401
    unsigned = channels.client.post("/webhooks/zendesk", content=body)
    assert unsigned.status_code == 401
    first = channels.post_zendesk(body)
    again = channels.post_zendesk(body, stamp=clock.now().strftime("%Y-%m-%dT%H:%M:%S+00:00"))
    assert first.status_code == 201 and again.status_code == 200
    assert first.json()["case"] == again.json()["case"]
    stale = channels.post_zendesk(body, stamp="2025-01-01T00:00:00Z")
    assert stale.status_code == 401  # a recorded request is not replayable later
    untagged = dict(ticket["ticket"], id=89, tags=["billing"])
    ignored = channels.post_zendesk(json.dumps({"ticket": untagged}).encode())
    assert ignored.status_code == 200 and ignored.json()["ignored"] is True
    assert channels.case_count() == 1


def test_gorgias_ticket_tagged_for_refunds(channels: Channels) -> None:
    payment = channels.payment("30.00")
    ticket = {
        "ticket": {
            "id": 5150,
            "tags": [{"name": "refund"}],
            "subject": "Refund please",
            "customer": {"email": CUSTOMER},
            "messages": [{"body_text": f"Order {payment} arrived damaged."}],
        }
    }
    body = json.dumps(ticket).encode()
    wrong = channels.client.post(
        "/webhooks/gorgias", content=body, headers={"Authorization": "Bearer nope"}
    )
    assert wrong.status_code == 401
    ok = channels.client.post(
        "/webhooks/gorgias", content=body, headers={"Authorization": f"Bearer {GORGIAS_SECRET}"}
    )
    assert ok.status_code == 201, ok.text
    assert channels.get(ok.json()["case"])["source"] == "gorgias"


def test_delivery_missing_what_a_case_needs_writes_nothing(channels: Channels) -> None:
    before = channels.counts()
    body = json.dumps({"id": 1, "order": {"id": 2}}).encode()
    response = channels.post_shopify(body)
    assert response.status_code == 422
    assert set(response.json()["error"]["fields"]) == {"email", "payment"}
    assert channels.counts() == before


def test_an_unconfigured_platform_is_an_unknown_route(channels: Channels, sqlite_url: str) -> None:
    """Without its secret a channel's webhook answers as a path the server does not know (it
    was 503 `not_configured`, which told a stranger which integrations a desk has)."""
    from fastapi.testclient import TestClient

    from refund_desk.runtime import build
    from refund_desk.web.app import create_app
    from tests.conftest import make_settings

    bare = build(make_settings(sqlite_url))
    client = TestClient(create_app(bare, scheduler=False))
    unknown = client.post("/webhooks/nothing-here", content=b"{}")
    for path in ("/webhooks/shopify", "/webhooks/zendesk", "/webhooks/gorgias", "/webhooks/email"):
        answer = client.post(path, content=b"{}")
        assert (answer.status_code, answer.json()) == (404, unknown.json())
    bare.db.dispose()
