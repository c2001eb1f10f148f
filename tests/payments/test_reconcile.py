"""Reconciliation: refunds at the processor against our executions, each finding reported once."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import delete, select, update
from typer.testing import CliRunner

from refund_desk import clock
from refund_desk.cli.main import app
from refund_desk.payments import reconcile
from refund_desk.runtime import Runtime
from refund_desk.settings import load_settings
from refund_desk.storage.models import (
    AuditRecord,
    Execution,
    Job,
    ProcessorFinding,
    SandboxRefund,
)
from tests.helpers import Harness
from tests.payments.conftest import LocalStripe, StripeHarness


@pytest.fixture()
def desk(any_runtime: Runtime) -> Harness:
    harness = Harness(any_runtime)
    harness.publish()
    return harness


def _finance_messages(desk: Harness) -> list[dict[str, object]]:
    with desk.runtime.db.read() as session:
        jobs = session.scalars(select(Job).where(Job.kind == "notify")).all()
    return [j.payload for j in jobs if j.payload["event"] == "finance.finding"]


def _refunded(desk: Harness) -> tuple[str, str]:
    payment = desk.payment("30.00")
    body = desk.post(desk.request(payment, "20.00")).json()
    assert body["status"] == "refunded"
    return payment, body["id"]


def test_finds_an_outside_refund_and_an_amount_mismatch(desk: Harness) -> None:
    _, case_id = _refunded(desk)
    other = desk.payment("50.00")
    desk.sandbox.create_refund(
        payment_id=other, amount=1500, currency="usd", idempotency_key="dash", metadata={}
    )
    with desk.runtime.db.write() as session:  # our record and the processor now disagree
        session.execute(update(Execution).values(amount=1900))
    since = clock.now() - timedelta(hours=1)

    report = reconcile.reconcile(desk.runtime.desk, since=since)

    kinds = {f.kind: f for f in report.findings}
    assert set(kinds) == {"unknown_refund", "amount_mismatch"}
    assert kinds["unknown_refund"].payment_id == other
    assert kinds["unknown_refund"].processor_amount == 1500
    mismatch = kinds["amount_mismatch"]
    assert (mismatch.case_id, mismatch.processor_amount, mismatch.our_amount) == (
        case_id,
        2000,
        1900,
    )
    assert report.new_keys == {f.key for f in report.findings}
    with desk.runtime.db.read() as session:
        audit = session.scalars(
            select(AuditRecord).where(AuditRecord.action == "reconcile.finding")
        ).all()
    assert {a.payload["kind"] for a in audit} == {"unknown_refund", "amount_mismatch"}
    assert len(_finance_messages(desk)) == 2

    again = reconcile.reconcile(desk.runtime.desk, since=since)
    assert len(again.findings) == 2 and again.new_keys == set()
    assert len(_finance_messages(desk)) == 2, "each finding is reported once"

    out = io.StringIO()
    again.write_csv(out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert {(r["kind"], r["processor_amount"], r["new"]) for r in rows} == {
        ("unknown_refund", "15.00", "no"),
        ("amount_mismatch", "20.00", "no"),
    }


def test_ours_missing_at_the_processor_and_status_mismatch(desk: Harness) -> None:
    _, first = _refunded(desk)
    _, second = _refunded(desk)
    with desk.runtime.db.write() as session:
        [gone] = session.scalars(select(Execution).where(Execution.case_id == first)).all()
        # The processor lost the first refund; our record says the second one failed.
        session.execute(delete(SandboxRefund).where(SandboxRefund.id == gone.processor_refund_id))
        session.execute(
            update(Execution)
            .where(Execution.case_id == second)  # type: ignore[arg-type]
            .values(status="failed")
        )
    report = reconcile.reconcile(desk.runtime.desk, since=clock.now() - timedelta(hours=1))
    assert sorted((f.kind, f.case_id) for f in report.findings) == [
        ("missing_at_processor", first),
        ("status_mismatch", second),
    ]


def test_clean_window_finds_nothing(desk: Harness) -> None:
    _refunded(desk)
    report = reconcile.reconcile(desk.runtime.desk, since=clock.now() - timedelta(hours=1))
    assert report.findings == [] and report.refunds_seen == 1 and report.executions_seen == 1


def test_scheduled_pass_runs_and_comes_back(desk: Harness) -> None:
    desk.sandbox.create_refund(
        payment_id=desk.payment("10.00"),
        amount=500,
        currency="usd",
        idempotency_key="dash",
        metadata={},
    )
    reconcile.ensure_scheduled(desk.runtime.desk)
    reconcile.ensure_scheduled(desk.runtime.desk)  # replicas race harmlessly
    desk.runtime.desk.jobs.sweep()
    with desk.runtime.db.read() as session:
        [job] = session.scalars(select(Job).where(Job.kind == "reconcile")).all()
        findings = session.scalars(select(ProcessorFinding)).all()
    assert job.status == "pending" and job.failures == 0
    assert job.due_at > clock.now() + timedelta(minutes=50)
    assert [f.kind for f in findings] == ["unknown_refund"]


def test_reconcile_against_localstripe(
    on_localstripe: StripeHarness, localstripe: LocalStripe
) -> None:
    localstripe.flush()
    payment = localstripe.pay(3000)
    body = on_localstripe.post(on_localstripe.request(payment, "20.00")).json()
    assert body["status"] == "refunded"
    outside = localstripe.refund_directly(localstripe.pay(5000), 700)
    with on_localstripe.runtime.db.write() as session:
        session.execute(update(Execution).values(amount=1999))
    report = reconcile.reconcile(
        on_localstripe.runtime.desk, since=clock.now() - timedelta(minutes=5)
    )
    found = {(f.kind, f.refund_id) for f in report.findings}
    assert ("unknown_refund", outside) in found
    assert any(kind == "amount_mismatch" for kind, _ in found)
    assert len(found) == 2


def test_cli_lists_findings_and_writes_csv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.delenv("REFUND_DESK_SECRET", raising=False)
    monkeypatch.delenv("REFUND_DESK_PROCESSOR", raising=False)
    load_settings.cache_clear()
    runner = CliRunner()
    try:
        made = runner.invoke(
            app,
            [
                "sandbox",
                "payment",
                "create",
                "--amount",
                "25.00",
                "--currency",
                "usd",
                "--email",
                "a@b.co",
            ],
        )
        assert made.exit_code == 0, made.output
        from refund_desk.cli.main import _runtime

        _runtime().desk.processor.create_refund(
            payment_id=made.stdout.strip(),
            amount=1000,
            currency="usd",
            idempotency_key="dash",
            metadata={},
        )
        target = tmp_path / "findings.csv"
        result = runner.invoke(app, ["reconcile", "--since", "1d", "--csv", str(target)])
        assert result.exit_code == 0, result.output
        assert "unknown_refund" in result.output and "1 findings (1 new)" in result.output
        assert "unknown_refund" in target.read_text()
        bad = runner.invoke(app, ["reconcile", "--since", "last tuesday"])
        assert bad.exit_code == 2
        assert runner.invoke(app, ["reconcile", "--help"]).exit_code == 0
    finally:
        load_settings.cache_clear()
