"""ASGI entry for multi-worker `serve` on PostgreSQL: `uvicorn refund_desk.bot.main:app`."""

from __future__ import annotations

from refund_desk.bot.app import create_app
from refund_desk.bot.runtime import build
from refund_desk.settings import load_settings

app = create_app(build(load_settings(), migrate=True))
