"""What a stranger learns from the routes: a method a route does not take is 405 with `Allow`
(RFC 9110), and a webhook whose integration is not configured is a path the server does not
know (404), the same answer byte for byte, so nothing tells which integrations a desk has."""

from __future__ import annotations

import pytest

from refund_desk.runtime import Runtime
from tests.helpers import Harness

WEBHOOKS = (
    "/webhooks/stripe",
    "/webhooks/paypal",
    "/webhooks/email",
    "/webhooks/shopify",
    "/webhooks/zendesk",
    "/webhooks/gorgias",
)


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("TRACE", "/api/v1/refund-requests", "POST"),
        ("PUT", "/api/v1/cases", "GET"),
        ("PATCH", "/api/v1/cases/case_x", "GET"),
        ("GET", "/api/v1/customers/ada@example.com", "DELETE"),
        ("DELETE", "/healthz", "GET"),
        ("GET", "/webhooks/stripe", "POST"),
        ("PUT", "/request", "GET, POST"),  # two routes on one path: both methods
        ("OPTIONS", "/appeal/some-token", "GET, POST"),
    ],
)
def test_a_method_a_route_does_not_take_is_405_with_allow(
    runtime: Runtime, method: str, path: str, allowed: str
) -> None:
    answer = Harness(runtime).client.request(method, path)  # no key: the method comes first
    assert answer.status_code == 405
    assert sorted(answer.headers["allow"].split(", ")) == sorted(allowed.split(", "))
    assert answer.json()["error"]["code"] == "method_not_allowed"


def test_an_unconfigured_webhook_answers_as_an_unknown_path(runtime: Runtime) -> None:
    client = Harness(runtime).client
    unknown = client.post("/webhooks/nothing-here", content=b"{}")
    assert unknown.status_code == 404
    for path in WEBHOOKS:
        answer = client.post(path, content=b"{}", headers={"Authorization": "Bearer x"})
        assert answer.status_code == 404, path
        assert answer.content == unknown.content, path
        assert answer.headers["content-type"] == unknown.headers["content-type"], path
