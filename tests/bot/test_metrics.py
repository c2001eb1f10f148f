"""`/metrics` reports the figures operators watch, read from the database and this process."""

from __future__ import annotations

import re
from collections.abc import Callable

from refund_desk import clock
from refund_desk.storage.models import Case
from tests.helpers import ACME
from tests.slack_helpers import SlackHarness


def value(text: str, series: str) -> float:
    match = re.search(rf"^{re.escape(series)} (\S+)$", text, re.MULTILINE)
    assert match, f"{series} not in metrics"
    return float(match.group(1))


def test_metrics_cover_decisions_slas_latency_outbox_and_drift(
    sqlite_url: str, slack_desk: Callable[[str, str], SlackHarness]
) -> None:
    desk = slack_desk(sqlite_url, ACME.read_text())
    small = desk.payment("30.00")
    desk.post(desk.request(small, "20.00"))
    big = desk.payment("900.00")
    waiting = desk.post(desk.request(big, "600.00")).json()["id"]
    desk.settle()
    desk.escalate("U0FIN1", desk.buttons()["escalate"])
    desk.settle()
    with desk.runtime.db.write() as session:  # its deadline has passed
        case = session.get(Case, waiting)
        assert case is not None
        case.sla_due_at = clock.now()
        session.add(case)

    text = desk.client.get("/metrics").text
    assert value(text, 'refund_desk_decisions{outcome="approve",rule="damaged-small"}') == 1
    assert value(text, 'refund_desk_decisions{outcome="review",rule="large"}') == 1
    assert value(text, "refund_desk_sla_breached_cases") == 1
    assert value(text, 'refund_desk_escalated_cases{level="1"}') == 1
    assert value(text, 'refund_desk_executions{status="succeeded"}') == 1
    assert value(text, 'refund_desk_processor_seconds_count{call="create_refund",result="ok"}') >= 1
    assert value(text, 'refund_desk_slack_ack_seconds_count{kind="block_actions"}') >= 1
    assert value(text, "refund_desk_outbox_depth") >= 0
    assert value(text, 'refund_desk_reason_share{reason="damaged",window="week"}') > 0
    assert 'refund_desk_approval_wait_seconds{quantile="0.5"}' in text
    assert "refund_desk_model_tokens" in text
