"""ASGI entry for multi-worker `serve` on PostgreSQL: `uvicorn refund_desk.web.main:app`."""

from __future__ import annotations

from refund_desk import logs
from refund_desk.runtime import build
from refund_desk.settings import load_settings
from refund_desk.web.app import create_app

logs.configure()  # each worker process logs as the command line does
app = create_app(build(load_settings(), migrate=True))
