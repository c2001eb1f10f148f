"""A minimal Slack Web API for `slack_ack_bench.py`: every method answers `ok` at once.

python -m uvicorn fake_slack:app --app-dir bench/parts
"""

from __future__ import annotations

import itertools
from typing import Any

from fastapi import FastAPI

app = FastAPI()
_ts = itertools.count(1)


@app.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/api/{method}")
def call(method: str) -> dict[str, Any]:
    ts = f"1700000000.{next(_ts):06d}"
    return {
        "ok": True,
        "ts": ts,
        "channel": "C0FINANCE",
        "message": {"ts": ts},
        "user_id": "U0BOT",
        "bot_id": "B0BOT",
        "team_id": "T0BENCH",
        "url": "https://bench.slack.invalid/",
        "view": {"id": "V0BENCH"},
    }
