"""Issue 13, the items found by reading: each checked, and fixed where it held."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from refund_desk.cases.approvals import may_vouch
from refund_desk.customers.couriers import HelpdeskCourier
from refund_desk.runtime import Runtime
from refund_desk.storage.models import Case
from tests.helpers import Harness, published


@pytest.mark.parametrize("channel", ["zendesk", "gorgias"])
def test_a_helpdesk_ticket_id_stays_one_path_segment(
    channel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def request(method: str, url: str, **kw: Any) -> httpx.Response:
        seen.append(url)
        return httpx.Response(200)

    monkeypatch.setattr(httpx, "request", request)
    courier = HelpdeskCourier(channel, "https://u:p@acme.example/base", "desk@acme.example")
    out = SimpleNamespace(
        reply={"ticket_id": "../../users/1?x=#"},
        full_text=lambda: "Your refund was issued.",
        to_email="ada@example.com",
    )
    courier.send(out)  # type: ignore[arg-type]
    [url] = seen
    assert "/../" not in url and "?" not in url and "#" not in url
    assert "..%2F..%2Fusers%2F1%3Fx%3D%23" in url


def test_the_demo_warns_when_it_listens_beyond_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    from refund_desk.cli.main import app
    from refund_desk.demo import runner

    monkeypatch.setattr(runner, "run", lambda **kw: None)
    result = CliRunner().invoke(app, ["demo", "--host", "0.0.0.0"])
    assert result.exit_code == 0, result.output
    assert "WARNING" in result.output and "act as any" in result.output
    quiet = CliRunner().invoke(app, ["demo"])
    assert "WARNING" not in quiet.output


def test_only_the_cases_own_group_may_vouch_for_its_evidence(any_runtime: Runtime) -> None:
    desk = published(any_runtime)
    payment = desk.payment("900.00")
    case_id = desk.post(desk.request(payment, "400.00")).json()["id"]  # support-leads decide
    with any_runtime.db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None
        assert may_vouch(session, case, "U0LEAD1")
        assert may_vouch(session, case, "U0MGR1")
        assert not may_vouch(session, case, "U0FIN1"), "finance does not decide this case"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.7/hook",
        "http://[::1]/hook",
        "http://metadata.google.internal/computeMetadata/v1",
    ],
)
def test_a_callback_url_must_reach_a_public_host(runtime: Runtime, url: str) -> None:
    desk = published(runtime)
    response = desk.post(desk.request(desk.payment("30.00"), "20.00", callback_url=url))
    assert response.status_code == 422
    assert "callback_url" in response.json()["error"]["fields"]


def test_a_callback_url_is_checked_again_after_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from refund_desk.customers.couriers import WebhookCourier
    from refund_desk.customers.outcomes import DeliveryFailed

    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: [(2, 1, 6, "", ("127.0.0.1", 443))])
    out = SimpleNamespace(callback_url="https://shop.example/hook", message_id=1)
    with pytest.raises(DeliveryFailed) as failed:
        WebhookCourier("s" * 32).send(out)  # type: ignore[arg-type]
    assert not failed.value.transient and "non-public" in str(failed.value)


@pytest.mark.postgres
def test_replicas_count_the_breakers_hourly_limits_one_at_a_time(pg_runtime: Runtime) -> None:
    """Two replicas must not both see room for one more automatic refund: the count is taken
    under the control row's lock, so a second counter waits for the first to commit."""
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    from refund_desk.cases import breaker
    from refund_desk.governance.versions import control, load_version
    from tests.cases.test_breaker import policy_with

    rt = pg_runtime
    Harness(rt).publish(policy_with(max_refunds_per_hour=1))
    with rt.db.read() as session:
        version = control(session).active_version
        assert version is not None
        policy = load_version(session, version)
    holder = rt.db.engine.connect()
    try:
        holder.begin()
        holder.execute(text("SELECT id FROM control WHERE id = 1 FOR UPDATE"))
        with rt.db.engine.connect() as other, pytest.raises(OperationalError, match="lock"):
            other.begin()
            other.execute(text("SET LOCAL lock_timeout = '300ms'"))
            from sqlmodel import Session

            breaker.over_limit(Session(bind=other), policy, 1000, "usd")
    finally:
        holder.rollback()
        holder.close()
