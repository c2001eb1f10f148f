"""The one FastAPI app: intake API, Slack, webhooks, health, metrics.

The lifespan starts APScheduler, whose only work is to fire the job sweeps; everything that
must happen is a row in the jobs table, so nothing is lost when the process goes away.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from apscheduler.schedulers.background import BackgroundScheduler
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import text
from starlette.exceptions import HTTPException as StarletteHTTPException

from refund_desk.bot import api, channels, metrics, stripe_routes
from refund_desk.bot.runtime import Runtime
from refund_desk.bot.slack.surface import build_surface, start_socket_mode
from refund_desk.cases.errors import CaseError

if TYPE_CHECKING:
    from refund_desk.bot.sandbox import Sandbox

log = logging.getLogger(__name__)


def error_body(code: str, message: str, fields: dict[str, str] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fields": fields or {}}}


def start_scheduler(runtime: Runtime) -> BackgroundScheduler:
    """Fire sweeps every REFUND_DESK_SWEEP_SECONDS, and sooner when a job is due sooner."""
    scheduler = BackgroundScheduler(timezone="UTC")
    jobs = runtime.desk.jobs
    period = timedelta(seconds=runtime.settings.sweep_seconds)

    def sweep() -> None:
        try:
            jobs.sweep()
            upcoming = jobs.next_due()
        except Exception:  # the next period tries again; the jobs table keeps the work
            log.exception("sweep failed")
            return
        now = datetime.now(UTC)
        if upcoming is not None and upcoming < now + period:
            scheduler.add_job(
                sweep,
                "date",
                run_date=max(upcoming, now) + timedelta(milliseconds=50),
                id="sweep-soon",
                replace_existing=True,
                misfire_grace_time=None,
            )

    scheduler.add_job(
        sweep,
        "interval",
        seconds=runtime.settings.sweep_seconds,
        id="sweep",
        max_instances=1,
        coalesce=True,
        # First sweep right away: a restarted replica resumes due work without waiting a period.
        next_run_time=datetime.now(UTC),
    )
    scheduler.start()

    def wake() -> None:
        """New work was just committed: sweep now instead of at the next period."""
        scheduler.add_job(
            sweep, "date", id="sweep-now", replace_existing=True, misfire_grace_time=None
        )

    runtime.desk.wake = wake
    return scheduler


def create_app(
    runtime: Runtime, *, scheduler: bool = True, sandbox: Sandbox | None = None
) -> FastAPI:
    """The app; `sandbox` (only `refund-desk demo` passes one) mounts the local Slack sandbox."""
    surface = build_surface(runtime.desk, runtime.settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        sched = start_scheduler(runtime) if scheduler else None
        socket_mode = await start_socket_mode(surface, runtime.settings) if surface else None
        try:
            yield
        finally:
            if socket_mode is not None:
                await socket_mode.close_async()
            if sched is not None:
                runtime.desk.wake = None
                runtime.desk.jobs.stopping.set()  # a running sweep stops between jobs
                sched.shutdown(wait=True)

    app = FastAPI(title="Refund Desk", version="0.1.0", lifespan=lifespan)
    app.state.runtime = runtime
    app.include_router(api.router)
    app.include_router(stripe_routes.router)
    if surface is not None:
        app.include_router(surface.router())
        app.state.slack = surface
    channels.install(app, runtime, surface)  # web form, email, platform webhooks, appeals
    if sandbox is not None:
        app.include_router(sandbox.router())

    @app.exception_handler(CaseError)
    async def _case_error(request: Request, exc: CaseError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message, exc.fields), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = {".".join(str(p) for p in e["loc"][1:]) or "body": e["msg"] for e in exc.errors()}
        return JSONResponse(
            error_body("invalid_request", "The request has invalid fields.", fields),
            status_code=422,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code)

    registry = metrics.registry_for(runtime.db)

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        return Response(metrics.render(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        with runtime.db.read() as session:
            session.execute(text("SELECT 1"))
        return {"status": "ok"}

    return app
