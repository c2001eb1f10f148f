"""/readyz: ready only while the database answers at the newest schema and this replica's
scheduler sweeps; each dependency listed with its state and last error. /healthz stays cheap."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from refund_desk.cases.ports import ProcessorError
from refund_desk.runtime import build
from refund_desk.storage.db import Database
from refund_desk.web.app import create_app
from tests.conftest import make_settings


def _until(fn: Callable[[], Any], pred: Callable[[Any], bool], seconds: float = 10.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = fn()
        if pred(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_readyz_goes_from_200_to_503_when_the_scheduler_stops_sweeping(sqlite_url: str) -> None:
    runtime = build(make_settings(sqlite_url, REFUND_DESK_SWEEP_SECONDS=0.2))
    app = create_app(runtime)
    with TestClient(app) as client:
        ready = _until(lambda: client.get("/readyz"), lambda r: r.status_code == 200)
        assert ready.status_code == 200, ready.text
        body = ready.json()
        assert body["status"] == "ready"
        checks = body["checks"]
        assert set(checks) == {"database", "migrations", "scheduler", "slack", "processor", "model"}
        assert checks["database"]["status"] == "ok"
        assert checks["migrations"]["status"] == "ok"
        assert checks["migrations"]["detail"]["current"] == checks["migrations"]["detail"]["newest"]
        assert checks["scheduler"]["status"] == "ok"
        assert checks["scheduler"]["detail"]["last_sweep_seconds_ago"] < 0.6
        assert checks["processor"]["status"] == "ok" and checks["model"]["status"] == "ok"

        app.state.sweeper.scheduler.pause()  # the sweeps stop firing; the process lives on
        stopped = _until(lambda: client.get("/readyz"), lambda r: r.status_code == 503)
        assert stopped.status_code == 503, stopped.text
        scheduler = stopped.json()["checks"]["scheduler"]
        assert scheduler["status"] == "down"
        assert "last sweep" in scheduler["error"]
        assert stopped.json()["status"] == "not ready"
        # Liveness is not readiness: the process still answers.
        assert client.get("/healthz").status_code == 200

        app.state.sweeper.scheduler.resume()
        again = _until(lambda: client.get("/readyz"), lambda r: r.status_code == 200)
        assert again.status_code == 200, again.text


def test_readyz_is_503_when_the_schema_is_behind(sqlite_url: str) -> None:
    runtime = build(make_settings(sqlite_url, REFUND_DESK_SWEEP_SECONDS=0.2))
    app = create_app(runtime)
    with TestClient(app) as client:
        _until(lambda: client.get("/readyz"), lambda r: r.status_code == 200)
        engine = Database.from_url(sqlite_url).engine
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '0006'"))
        engine.dispose()
        response = client.get("/readyz")
        assert response.status_code == 503
        migrations = response.json()["checks"]["migrations"]
        assert migrations["status"] == "down"
        assert "refund-desk db upgrade" in migrations["error"]


def test_a_failing_processor_is_listed_as_degraded_without_failing_readiness(
    sqlite_url: str,
) -> None:
    runtime = build(make_settings(sqlite_url, REFUND_DESK_SWEEP_SECONDS=0.2))
    assert runtime.sandbox is not None
    app = create_app(runtime)
    with TestClient(app) as client:
        _until(lambda: client.get("/readyz"), lambda r: r.status_code == 200)
        runtime.sandbox.set_fault("down", None)
        with pytest.raises(ProcessorError):
            runtime.desk.processor.payment("py_missing")
        response = client.get("/readyz")
        assert response.status_code == 200
        processor = response.json()["checks"]["processor"]
        assert processor["status"] == "degraded"
        assert processor["error"].startswith("payment: ")
