"""The reference for `slack_ack_bench.py`: `bare_app.py`'s endpoint plus a bare Bolt app on
FastAPI that verifies the same signed requests and acknowledges every button at once.

    DATABASE_URL=... SLACK_SIGNING_SECRET=... SLACK_API_URL=... \
        python -m uvicorn bare_slack_app:app --app-dir bench/parts
"""

from __future__ import annotations

import os
from typing import Any

from bare_app import app
from fastapi import Request
from slack_bolt.adapter.fastapi.async_handler import AsyncSlackRequestHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

bolt = AsyncApp(  # configured as Refund Desk's: a client on the fake Web API, ack then return
    client=AsyncWebClient(token="xoxb-bare", base_url=os.environ["SLACK_API_URL"]),
    signing_secret=os.environ["SLACK_SIGNING_SECRET"],
    raise_error_for_unhandled_request=False,
    process_before_response=True,
)


@bolt.action("approve")
async def on_approve(ack: Any) -> None:
    await ack()


handler = AsyncSlackRequestHandler(bolt)


@app.post("/slack/events")
async def slack_events(request: Request) -> Any:
    return await handler.handle(request)
