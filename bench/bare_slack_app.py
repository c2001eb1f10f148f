"""The reference for `slack_ack_bench.py`: `bare_app.py`'s endpoint plus a bare Bolt app on
FastAPI that verifies the same signed requests and acknowledges every button at once.

    DATABASE_URL=... SLACK_SIGNING_SECRET=... python -m uvicorn bare_slack_app:app --app-dir bench
"""

from __future__ import annotations

import os
from typing import Any

from bare_app import app
from fastapi import Request
from slack_bolt.adapter.fastapi.async_handler import AsyncSlackRequestHandler
from slack_bolt.async_app import AsyncApp

bolt = AsyncApp(
    signing_secret=os.environ["SLACK_SIGNING_SECRET"],
    token="xoxb-bare",
    token_verification_enabled=False,
)


@bolt.action("approve")
async def on_approve(ack: Any) -> None:
    await ack()


handler = AsyncSlackRequestHandler(bolt)


@app.post("/slack/events")
async def slack_events(request: Request) -> Any:
    return await handler.handle(request)
