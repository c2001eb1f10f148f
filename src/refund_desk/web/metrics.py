"""`/metrics`: Prometheus figures.

Business figures are read from the database at scrape time, so every replica reports the same
truth and a restart loses nothing: cases by status and by decision, SLA breaches, escalations,
executions, money refunded, model tokens, model advisor failures, outbox depth, and input
drift (each reason's share this week against the four weeks before). Latencies (the
processor, Slack acknowledgements) are this process's own histograms.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlmodel import Session, col

from refund_desk import clock, tracing
from refund_desk.cases.ports import PaymentFacts, Processor, ProcessorRefund
from refund_desk.storage.db import Database
from refund_desk.storage.models import AdvisorCall, Approval, AuditHead, Case, Execution, Job

log = logging.getLogger(__name__)

LATENCY = CollectorRegistry(auto_describe=True)
PROCESSOR_SECONDS = Histogram(
    "refund_desk_processor_seconds",
    "Payment processor call latency.",
    ["call", "result"],
    registry=LATENCY,
)
SLACK_ACK_SECONDS = Histogram(
    "refund_desk_slack_ack_seconds",
    "Time from a Slack request to its acknowledgement.",
    ["kind"],
    registry=LATENCY,
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5),
)
OUTBOX_KINDS = ("notify", "slack.call", "slack.home", "customer.tell")
WAITING = ("awaiting_approval", "parked")
DRIFT_ALERT = 0.10  # a reason's weekly share moving this much is shown in App Home
# refund_desk_<name>: (help, labels), in the order they are exposed
GAUGES: dict[str, tuple[str, list[str]]] = {
    "cases": ("Cases by status.", ["status"]),
    "decisions": ("Cases by decision outcome and rule.", ["outcome", "rule"]),
    "sla_breached_cases": ("Waiting cases past their SLA deadline.", []),
    "escalated_cases": ("Waiting cases by escalation level.", ["level"]),
    "approval_wait_seconds": (
        "Time from a case's creation to a person's decision (last 500 decisions).",
        ["quantile"],
    ),
    "executions": ("Refund executions by status.", ["status"]),
    "refunded_minor_units": ("Money refunded, in minor units, by currency.", ["currency"]),
    "model_tokens": ("Tokens spent by the AI advisor, by provider.", ["provider"]),
    "advisor_failures": (
        "Model advisor calls that failed (the offline advisor answered), by provider and"
        " error code.",
        ["provider", "error"],
    ),
    "jobs": ("Jobs by kind and status.", ["kind", "status"]),
    "outbox_depth": ("Messages waiting to be sent.", []),
    "reason_share": ("Each reason's share of new cases.", ["reason", "window"]),
    "audit_records": ("Records in the audit chain.", []),
}


def reason_drift(session: Session, now: datetime) -> dict[str, tuple[float, float]]:
    """reason -> (share this week, share in the four weeks before)."""
    week, month = now - timedelta(days=7), now - timedelta(days=35)

    def shares(start: datetime, end: datetime) -> dict[str, float]:
        rows = session.execute(
            select(col(Case.reason), func.count())
            .where(col(Case.created_at) >= start, col(Case.created_at) < end)
            .group_by(col(Case.reason))
        ).all()
        total = sum(n for _, n in rows) or 1
        return {str(reason): n / total for reason, n in rows}

    now_shares, before = shares(week, now + timedelta(seconds=1)), shares(month, week)
    return {r: (now_shares.get(r, 0.0), before.get(r, 0.0)) for r in set(now_shares) | set(before)}


class StateCollector(Collector):
    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = {
            name: GaugeMetricFamily(f"refund_desk_{name}", doc, labels=labels)
            for name, (doc, labels) in GAUGES.items()
        }
        now = clock.now()
        with self.db.read() as session:
            for status, n in session.execute(
                select(col(Case.status), func.count()).group_by(col(Case.status))
            ):
                g["cases"].add_metric([status], n)
            outcome = col(Case.decision)["outcome"].as_string()
            rule = col(Case.decision)["rule"].as_string()
            for o, r, n in session.execute(
                select(outcome, rule, func.count())
                .where(col(Case.decision).is_not(None))
                .group_by(outcome, rule)
            ):
                g["decisions"].add_metric([str(o), str(r)], n)
            g["sla_breached_cases"].add_metric(
                [],
                session.scalar(
                    select(func.count())
                    .select_from(Case)
                    .where(col(Case.status).in_(WAITING), col(Case.sla_due_at) < now)
                )
                or 0,
            )
            for level, n in session.execute(
                select(col(Case.escalation_level), func.count())
                .where(col(Case.status).in_(WAITING), col(Case.escalation_level) > 0)
                .group_by(col(Case.escalation_level))
            ):
                g["escalated_cases"].add_metric([str(level)], n)
            spans = sorted(
                (decided - created).total_seconds()
                for decided, created in session.execute(
                    select(col(Approval.created_at), col(Case.created_at))
                    .join(Case, col(Case.id) == col(Approval.case_id))
                    .order_by(col(Approval.id).desc())
                    .limit(500)
                )
            )
            for q in (0.5, 0.9, 1.0):
                if spans:
                    g["approval_wait_seconds"].add_metric(
                        [str(q)], spans[min(len(spans) - 1, int(q * len(spans)))]
                    )
            for status, n in session.execute(
                select(col(Execution.status), func.count()).group_by(col(Execution.status))
            ):
                g["executions"].add_metric([status], n)
            for currency, total in session.execute(
                select(col(Execution.currency), func.sum(col(Execution.amount)))
                .where(col(Execution.status) == "succeeded")
                .group_by(col(Execution.currency))
            ):
                g["refunded_minor_units"].add_metric([currency], float(total or 0))
            for provider, total in session.execute(
                select(
                    col(AdvisorCall.provider),
                    func.sum(col(AdvisorCall.prompt_tokens) + col(AdvisorCall.completion_tokens)),
                ).group_by(col(AdvisorCall.provider))
            ):
                g["model_tokens"].add_metric([provider], float(total or 0))
            for provider, error, n in session.execute(
                select(col(AdvisorCall.provider), col(AdvisorCall.error_code), func.count())
                .where(col(AdvisorCall.outcome) != "parsed")
                .group_by(col(AdvisorCall.provider), col(AdvisorCall.error_code))
            ):
                g["advisor_failures"].add_metric([provider, str(error)], n)
            depth = 0
            for kind, status, n in session.execute(
                select(col(Job.kind), col(Job.status), func.count()).group_by(
                    col(Job.kind), col(Job.status)
                )
            ):
                g["jobs"].add_metric([kind, status], n)
                if kind in OUTBOX_KINDS and status == "pending":
                    depth += n
            g["outbox_depth"].add_metric([], depth)
            for reason, (this_week, before) in reason_drift(session, now).items():
                g["reason_share"].add_metric([reason, "week"], this_week)
                g["reason_share"].add_metric([reason, "trailing_4w"], before)
            head = session.get(AuditHead, 1)
            g["audit_records"].add_metric([], head.seq if head else 0)
        yield from g.values()


class TimedProcessor:
    """The processor port with every call timed by call and result."""

    def __init__(self, inner: Processor) -> None:
        self.inner = inner
        self.name = inner.name
        self.timeout_seconds = inner.timeout_seconds
        self.lists_every_refund = inner.lists_every_refund
        self.last_failure: tuple[datetime, str] | None = None  # for readiness: when and why

    def _timed(self, call: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        start, result, code = time.perf_counter(), "error", "interrupted"
        try:
            with tracing.span(f"processor {call}", processor=self.name):
                value = fn(*args, **kwargs)
            result = "ok"
            return value
        except Exception as exc:
            code = getattr(exc, "code", type(exc).__name__)
            raise
        finally:
            seconds = time.perf_counter() - start
            PROCESSOR_SECONDS.labels(call, result).observe(seconds)
            level = logging.INFO if result == "ok" else logging.WARNING
            if result != "ok":
                self.last_failure = (clock.now(), f"{call}: {code}")
            log.log(
                level,
                "processor %s %s: %s in %.0f ms",
                self.name,
                call,
                result if result == "ok" else f"error {code}",
                seconds * 1000,
                extra={"call": call, "outcome": result, "latency_ms": round(seconds * 1000, 1)},
            )

    def payment(self, payment_id: str) -> PaymentFacts:
        return self._timed("payment", self.inner.payment, payment_id)

    def list_refunds(self, payment_id: str) -> list[ProcessorRefund]:
        return self._timed("list_refunds", self.inner.list_refunds, payment_id)

    def create_refund(self, **kwargs: Any) -> ProcessorRefund:
        return self._timed("create_refund", self.inner.create_refund, **kwargs)

    def retrieve_refund(self, refund_id: str) -> ProcessorRefund:
        return self._timed("retrieve_refund", self.inner.retrieve_refund, refund_id)

    def list_refunds_since(
        self, since: datetime, until: datetime | None = None, payments: Iterable[str] = ()
    ) -> list[ProcessorRefund]:
        return self._timed(
            "list_refunds_since", self.inner.list_refunds_since, since, until, payments
        )

    def refusal(self, amount: int, currency: str, payment_id: str = "") -> str | None:
        return self.inner.refusal(amount, currency, payment_id)

    def check(self) -> str:
        return str(self._timed("check", self.inner.check))

    def owns(self, reference: str) -> bool:
        return self.inner.owns(reference)


def registry_for(db: Database) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(db))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry) + generate_latest(LATENCY)
