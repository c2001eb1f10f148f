"""The one FastAPI app: intake API, Slack, webhooks, health, metrics.

The lifespan starts APScheduler, whose only work is to fire the job sweeps; everything that
must happen is a row in the jobs table, so nothing is lost when the process goes away.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from apscheduler.schedulers.background import BackgroundScheduler
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import text
from starlette.exceptions import HTTPException as StarletteHTTPException

from refund_desk.bot.app import build_surface, start_socket_mode
from refund_desk.cases.errors import CaseError
from refund_desk.runtime import Runtime, install_jobs
from refund_desk.web import customer_channels as channels
from refund_desk.web import metrics, waiting
from refund_desk.web.errors import error_body
from refund_desk.web.routes import intake_api as api
from refund_desk.web.routes import stripe_webhooks as stripe_routes

if TYPE_CHECKING:
    from refund_desk.demo.slack import SlackEmulator

log = logging.getLogger(__name__)


class Sweeper:
    """Fires the job sweeps: every REFUND_DESK_SWEEP_SECONDS, sooner when a job is due sooner,
    and at once when new work is committed. One sweep at a time per replica; a wake-up that
    arrives while one runs makes it go round again instead of queueing another.

    It also keeps this replica's workers for work its requests create (`Desk.hand_off`): such
    a job is taken at once by a worker thread, before its due time, so the request answers
    after intake and the case moves on without waiting for the next period. Only the job's id
    is kept in memory; the job is a committed row, and if this process dies a sweep elsewhere
    takes it after its grace."""

    def __init__(self, runtime: Runtime) -> None:
        self.jobs = runtime.desk.jobs
        self.period = timedelta(seconds=runtime.settings.sweep_seconds)
        self.scheduler = BackgroundScheduler(timezone="UTC")
        self.running = threading.Lock()
        self.again = threading.Event()
        # SQLite has one writer: one thread. PostgreSQL: several, each a job at a time.
        threads = runtime.settings.worker_threads or (1 if runtime.db.is_sqlite else 2)
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="worker")
        self.busy = 0
        self.idle = threading.Condition()

    def start(self) -> None:
        self.scheduler.add_job(
            self.sweep,
            "interval",
            seconds=self.period.total_seconds(),
            id="sweep",
            max_instances=1,
            coalesce=True,
            # First sweep right away: a restarted replica resumes due work at once.
            next_run_time=datetime.now(UTC),
        )
        self.scheduler.start()

    def sweep(self) -> None:
        if not self.running.acquire(blocking=False):
            self.again.set()
            return
        try:
            while not self.jobs.stopping.is_set():
                self.again.clear()
                self.jobs.sweep()
                if not self.again.is_set():
                    break
            upcoming = self.jobs.next_due()
        except Exception:  # the next period tries again; the jobs table keeps the work
            log.exception("sweep failed")
            return
        finally:
            self.running.release()
        now = datetime.now(UTC)
        if upcoming is not None and upcoming < now + self.period:
            self._soon(max(upcoming, now) + timedelta(milliseconds=50))

    def take(self, job_id: int) -> None:
        """A request just committed this job: run it now, on a worker thread."""
        if self.jobs.stopping.is_set():
            return  # the row stays: a sweep takes it after its grace, here or elsewhere
        with self.idle:
            self.busy += 1
        try:
            self.pool.submit(self._run_one, job_id)
        except RuntimeError:  # shut down meanwhile
            self._done()

    def _run_one(self, job_id: int) -> None:
        try:
            if not self.jobs.stopping.is_set():
                self.jobs.run_now(job_id)
        except Exception:  # the job is a row: its lease runs out and a sweep retries it
            log.exception("job %s failed to run", job_id)
        finally:
            self._done()

    def _done(self) -> None:
        with self.idle:
            self.busy -= 1
            self.idle.notify_all()

    def wake(self) -> None:
        """New work was just committed: sweep now instead of at the next period."""
        if self.running.locked():
            self.again.set()
        else:
            self._soon(datetime.now(UTC))

    def _soon(self, when: datetime) -> None:
        if self.jobs.stopping.is_set():
            return
        self.scheduler.add_job(
            self.sweep,
            "date",
            run_date=when,
            id="sweep-soon",
            replace_existing=True,
            misfire_grace_time=None,
        )

    def stop(self, timeout: float) -> None:
        """Stop between jobs; leave what is not started to the other replicas (or a restart)."""
        self.jobs.stopping.set()
        self.scheduler.shutdown(wait=False)
        self.pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + timeout
        with self.idle:  # jobs already running finish (each within its lease)
            self.idle.wait_for(lambda: self.busy <= 0, timeout=timeout)
        if self.running.acquire(timeout=max(0.0, deadline - time.monotonic())):
            self.running.release()


def create_app(
    runtime: Runtime, *, scheduler: bool = True, slack_emulator: SlackEmulator | None = None
) -> FastAPI:
    """The app; `slack_emulator` (only `refund-desk demo` passes one) mounts the Slack emulator."""
    surface = build_surface(runtime.desk, runtime.settings)
    install_jobs(runtime, slack=surface)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        sweeper = Sweeper(runtime) if scheduler else None
        if sweeper is not None:
            sweeper.start()
            runtime.desk.wake = sweeper.wake
            runtime.desk.worker = sweeper.take
        socket_mode = start_socket_mode(surface, runtime.settings) if surface else None
        app.state.socket_mode = socket_mode
        try:
            yield
        finally:
            if socket_mode is not None:
                await socket_mode.close()
            if sweeper is not None:
                runtime.desk.wake = None
                runtime.desk.worker = None
                sweeper.stop(timeout=runtime.desk.jobs.lease.total_seconds())

    app = FastAPI(title="Refund Desk", version="0.1.0", lifespan=lifespan)
    app.state.runtime = runtime
    app.state.case_waiters = waiters = waiting.CaseWaiters()  # for `Prefer: wait=N`
    runtime.desk.jobs.listeners.append(waiters.job_finished)
    app.include_router(api.router)
    app.include_router(stripe_routes.router)
    app.state.socket_mode = None
    if surface is not None:
        if surface.http:  # only with a signing secret; never in Socket Mode
            app.include_router(surface.router())
        app.state.slack = surface
    channels.install(app, runtime, surface)  # web form, email, platform webhooks, appeals
    if slack_emulator is not None:
        app.include_router(slack_emulator.router())

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
        if surface is None:
            return {"status": "ok"}
        socket_mode = app.state.socket_mode
        # Socket Mode: connecting, retrying or connected; the intake API serves meanwhile.
        return {"status": "ok", "slack": socket_mode.status if socket_mode else "http"}

    return app
