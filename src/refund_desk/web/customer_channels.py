"""Wire the customer channels' routes into the app: web form, email, platform webhooks, appeals.

The Slack side of customer channels (vouching for evidence) is `bot/listeners/evidence.py`.
"""

from __future__ import annotations

from fastapi import FastAPI

from refund_desk.web.routes import appeals as appeal_routes
from refund_desk.web.routes import inbound, web_form


def install(app: FastAPI) -> None:
    for router in (web_form.router, inbound.router, appeal_routes.router):
        app.include_router(router)
