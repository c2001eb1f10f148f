"""`/metrics`: Prometheus figures read from the database at scrape time.

Reading the tables (not counting in process memory) makes every replica report the same truth
about cases, executions and pending work, and a restart loses nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlmodel import col

from refund_desk.storage.db import Database
from refund_desk.storage.models import AuditHead, Case, Execution, Job


class StateCollector(Collector):
    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily]:
        cases = GaugeMetricFamily("refund_desk_cases", "Cases by status.", labels=["status"])
        executions = GaugeMetricFamily(
            "refund_desk_executions", "Refund executions by status.", labels=["status"]
        )
        refunded = GaugeMetricFamily(
            "refund_desk_refunded_minor_units",
            "Money refunded, in minor units, by currency.",
            labels=["currency"],
        )
        jobs = GaugeMetricFamily(
            "refund_desk_jobs", "Jobs by kind and status.", labels=["kind", "status"]
        )
        audit = GaugeMetricFamily("refund_desk_audit_records", "Records in the audit chain.")
        with self.db.read() as session:
            for status, n in session.execute(
                select(col(Case.status), func.count()).group_by(col(Case.status))
            ):
                cases.add_metric([status], n)
            for status, n in session.execute(
                select(col(Execution.status), func.count()).group_by(col(Execution.status))
            ):
                executions.add_metric([status], n)
            for currency, total in session.execute(
                select(col(Execution.currency), func.sum(col(Execution.amount)))
                .where(col(Execution.status) == "succeeded")
                .group_by(col(Execution.currency))
            ):
                refunded.add_metric([currency], float(total or 0))
            for kind, status, n in session.execute(
                select(col(Job.kind), col(Job.status), func.count()).group_by(
                    col(Job.kind), col(Job.status)
                )
            ):
                jobs.add_metric([kind, status], n)
            head = session.get(AuditHead, 1)
            audit.add_metric([], head.seq if head else 0)
        yield from (cases, executions, refunded, jobs, audit)


def registry_for(db: Database) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(db))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
