"""Backtests replay stored cases' frozen facts; the publishing gate wants one on the content."""

from __future__ import annotations

import io

import pytest
from sqlalchemy import update
from sqlmodel import col

from refund_desk.cases.errors import InvalidRequest
from refund_desk.governance.backtest import record_backtest, run_backtest, stream_cases
from refund_desk.governance.versions import publish
from refund_desk.policy import CompiledPolicy, parse_policy
from refund_desk.policy.diff import diff_policies
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import Case
from tests.helpers import ACME, Harness

ADMIN = Actor("cli", "tests")
STRICTER = ACME.read_text().replace("request.amount <= 50 and", "request.amount <= 10 and")
STRICTER = STRICTER.replace("{amount: 20, reason: damaged}", "{amount: 5, reason: damaged}")


def seed(harness: Harness, amounts: list[str]) -> list[str]:
    ids = []
    for amount in amounts:
        payment = harness.payment(amount)
        ids.append(harness.post(harness.request(payment, amount)).json()["id"])
    return ids


def test_backtest_counts_flips_and_money_per_outcome_and_rule(any_runtime: Runtime) -> None:
    harness = Harness(any_runtime)
    harness.publish()
    small, mid, big = seed(harness, ["5.00", "20.00", "30.00"])
    out = io.StringIO()
    run = run_backtest(
        any_runtime.db,
        CompiledPolicy.compile(parse_policy(STRICTER)),
        label="stricter",
        csv_out=out,
    )
    s = run.summary
    assert (s["cases"], s["unchanged"], s["changed"]) == (3, 1, 2)
    [flip] = s["flips"]
    assert (flip["from"], flip["to"], flip["cases"]) == ("approve", "review", 2)
    assert flip["amounts"] == {"USD": 5000} and set(flip["examples"]) == {mid, big}
    assert s["rules"]["default"]["flips"]["approve->review"]["cases"] == 2
    assert s["rules"]["damaged-small"] == {"decided": 1, "flips": {}}
    assert small not in out.getvalue() and mid in out.getvalue()
    said = run.text.as_text()
    assert "• paid automatically → decided by a person: 2 cases, 50.00 USD (e.g. " in said
    by_rule = "the default (Anything else goes to the support leads): 2 cases."
    assert f"Changes by the rule that now decides: {by_rule}" in said


def test_streaming_reads_in_batches_and_honours_the_window(any_runtime: Runtime) -> None:
    harness = Harness(any_runtime)
    harness.publish()
    ids = seed(harness, ["5.00", "6.00", "7.00", "8.00", "9.00"])
    with any_runtime.db.write() as session:  # one case from long ago
        session.execute(
            update(Case)
            .where(col(Case.id) == ids[0])
            .values(created_at=harness.runtime.desk.now().replace(year=2000))
        )
    since = harness.runtime.desk.now().replace(year=2020)
    streamed = [c.id for c in stream_cases(any_runtime.db.read, since=since, batch=2)]
    assert streamed == sorted(ids[1:])


def test_zero_cases_is_a_valid_run_and_says_so(any_runtime: Runtime) -> None:
    run = run_backtest(
        any_runtime.db, CompiledPolicy.compile(parse_policy(ACME.read_text())), label="v1"
    )
    assert run.summary["cases"] == 0 and "That is a valid run" in run.text


def test_the_gate_needs_a_backtest_on_exactly_this_content(runtime: Runtime) -> None:
    source = ACME.read_text()
    with runtime.db.write() as session, pytest.raises(InvalidRequest) as refused:
        publish(session, runtime.desk.audit, source=source, actor=ADMIN, backtest="require")
    assert refused.value.code == "policy_not_backtested"
    doc = parse_policy(source)
    short = run_backtest(runtime.db, CompiledPolicy.compile(doc), label="x", days=7)
    with runtime.db.write() as session:
        record_backtest(session, runtime.desk.audit, short, actor=ADMIN)
    with runtime.db.write() as session, pytest.raises(InvalidRequest):  # 7 days is not 30
        publish(session, runtime.desk.audit, source=source, actor=ADMIN, backtest="require")
    full = run_backtest(runtime.db, CompiledPolicy.compile(doc), label="x")
    with runtime.db.write() as session:
        record_backtest(session, runtime.desk.audit, full, actor=ADMIN)
    reformatted = source.replace("rules:\n", "# the rules\nrules:\n")  # same content hash
    with runtime.db.write() as session:
        row = publish(
            session, runtime.desk.audit, source=reformatted, actor=ADMIN, backtest="require"
        )
    assert row.version == 1


def test_diff_names_rule_level_changes() -> None:
    old = parse_policy(ACME.read_text())
    text = STRICTER.replace(
        "  - id: large\n",
        "  - id: huge\n    when: request.amount > 5000\n    outcome: deny\n  - id: large\n",
    )
    text = text.replace("leads: [U0LEAD1]", "leads: [U0LEAD1, U0LEAD2]")
    changes = {(c.kind, c.name) for c in diff_policies(old, parse_policy(text))}
    assert changes == {
        ("changed", "damaged-small"),
        ("added", "huge"),
        ("setting", "leads"),
        ("setting", "tests"),
    }


TO_FINANCE = ACME.read_text().replace(
    "default: {outcome: review",
    "  - id: over-100-to-finance\n"
    "    when: request.amount > 100\n"
    "    outcome: review\n"
    "    tier: 3\n"
    "    approvers: finance\n"
    "default: {outcome: review",
)


def test_a_backtest_reports_cases_that_would_go_to_other_people(any_runtime: Runtime) -> None:
    """Same outcome, another approver group: that is a change, counted with its money."""
    harness = Harness(any_runtime)
    harness.publish()
    payment = harness.payment("150.00")
    body = harness.request(payment, "150.00", message="I changed my mind about it.")
    moved = harness.post(body).json()["id"]
    run = run_backtest(any_runtime.db, CompiledPolicy.compile(parse_policy(TO_FINANCE)), label="d1")
    s = run.summary
    assert (s["cases"], s["changed"], s["flips"]) == (1, 1, [])
    [route] = s["routes"]
    assert (route["kind"], route["from"], route["to"], route["cases"]) == (
        "approvers",
        "support-leads",
        "finance",
        1,
    )
    assert route["amounts"] == {"USD": 15000} and route["examples"] == [moved]
    said = run.text.as_text()
    assert "1 would be decided differently" in said
    assert "• approvers support leads → finance: 1 case, 150.00 USD (e.g. " in said
