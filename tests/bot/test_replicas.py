"""Two server processes on one PostgreSQL database: no double sends, and a killed replica's
work is finished by the other. Driven through the external contract only (env, CLI, HTTP)."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import create_engine, text

from refund_desk.demo.slack import SlackEmulator
from tests.conftest import TEST_SECRET
from tests.helpers import ACME
from tests.process_helpers import Env
from tests.slack_helpers import SIGNING_SECRET, TOKEN

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
CASES = 12


@pytest.fixture()
def env(tmp_path: Path, pg_url: str, slack: SlackEmulator) -> Env:
    env = Env(tmp_path)
    env.env.update(
        DATABASE_URL=pg_url,
        REFUND_DESK_SECRET=TEST_SECRET,
        SLACK_BOT_TOKEN=TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_API_URL=slack.api_url,
        REFUND_DESK_LEASE_SECONDS="3",
    )
    raw = yaml.safe_load(ACME.read_text())
    del raw["business_hours"]
    raw["sla"] = {3: "4s", 4: "4s"}  # remind at 2s, escalate at 4s, 8s, ...
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(raw, sort_keys=False))
    env.cli("db", "upgrade")
    env.cli("policy", "publish", str(policy))
    return env


def _levels(pg_url: str) -> dict[str, int]:
    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT id, escalation_level FROM cases")).all()
    finally:
        engine.dispose()
    return {r[0]: r[1] for r in rows}


def _post(url: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(
        f"{url}/api/v1/refund-requests",
        json=body,
        headers={"Authorization": f"Bearer {key}", "Prefer": "wait=10"},
        timeout=30,
    )
    assert response.status_code == 201, response.text
    return dict(response.json())


def test_two_replicas_send_one_reminder_and_one_escalation_per_case(
    env: Env, pg_url: str, slack: SlackEmulator
) -> None:
    key = env.api_key()
    payments = [env.payment("900.00", f"c{i}@example.com") for i in range(CASES)]
    first, url_a = env.serve()
    second, url_b = env.serve()
    try:
        for i, payment in enumerate(payments):
            body = {
                "payment": payment,
                "email": f"c{i}@example.com",
                "currency": "USD",
                "amount": "600.00",
                "message": "Please refund.",
            }
            assert _post(url_a if i % 2 else url_b, key, body)["status"] == "awaiting_approval"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            levels = _levels(pg_url)
            if len(levels) == CASES and all(level >= 1 for level in levels.values()):
                break
            time.sleep(0.2)
    finally:
        env.stop(first)
        env.stop(second)
    assert all(level >= 1 for level in _levels(pg_url).values()), _levels(pg_url)
    cards = slack.in_channel("C0FINANCE")
    assert len(cards) == CASES, "one card per case, posted once"
    for card in cards:
        lines = [m.text for m in slack.thread(card)]
        assert sum("Reminder" in line for line in lines) == 1, lines
        assert sum("level 1" in line for line in lines) == 1, lines
    dms = [m for m in slack.messages if m.channel == "D0MGR1"]
    assert len(dms) == CASES, "one escalation DM per case"


def test_a_killed_replicas_leased_work_is_finished_by_the_other(env: Env, pg_url: str) -> None:
    key = env.api_key()
    payment = env.payment("30.00", "ada@example.com", age_days=2)
    first, url_a = env.serve("--job-processes", "0")
    second, _ = env.serve("--job-processes", "0")
    try:
        env.cli("sandbox", "fault", "crash-after-success", "--times", "1")
        body = {
            "payment": payment,
            "email": "ada@example.com",
            "currency": "USD",
            "amount": "20.00",
            "message": "It arrived broken.",
        }
        # Replica A loses power mid-request (or B does, if it ran the job first).
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(
                f"{url_a}/api/v1/refund-requests",
                json=body,
                headers={"Authorization": f"Bearer {key}", "Prefer": "wait=10"},
                timeout=30,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and first.poll() is None and second.poll() is None:
            time.sleep(0.1)
        died = [p for p in (first, second) if p.poll() is not None]
        assert [p.returncode for p in died] == [86], "exactly one replica lost power"
        survivor = second if first in died else first
        shown = json.loads(env.cli("sandbox", "payment", "show", payment).stdout)
        case_id = shown["refunds"][0]["metadata"]["case_id"]
        deadline = time.monotonic() + 30
        status = ""
        while time.monotonic() < deadline:
            engine = create_engine(pg_url)
            with engine.connect() as conn:
                status = conn.execute(
                    text("SELECT status FROM cases WHERE id = :id"), {"id": case_id}
                ).scalar_one()
            engine.dispose()
            if status == "refunded":
                break
            time.sleep(0.2)
        assert status == "refunded"
        assert survivor.poll() is None
    finally:
        env.stop(first)
        env.stop(second)
    shown = json.loads(env.cli("sandbox", "payment", "show", payment).stdout)
    assert len(shown["refunds"]) == 1
