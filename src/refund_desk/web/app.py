"""The one FastAPI app: intake API, Slack, webhooks, health, metrics.

The lifespan starts APScheduler, whose only work is to fire the job sweeps; everything that
must happen is a row in the jobs table, so nothing is lost when the process goes away.
"""

from __future__ import annotations

import asyncio
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
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from refund_desk import logs, tracing
from refund_desk.bot.app import build_surface, pending_router, start_socket_mode
from refund_desk.bot.doctor import queue_doctor
from refund_desk.cases.errors import CaseError
from refund_desk.cases.intake import invalid
from refund_desk.runtime import Runtime, install_jobs
from refund_desk.web import api_models, desk, health, metrics, waiting
from refund_desk.web.admission import IntakeGate, intake_limit
from refund_desk.web.errors import error_body
from refund_desk.web.routes import appeals, inbound, web_form
from refund_desk.web.routes import intake_api as api
from refund_desk.web.routes import paypal_webhooks as paypal_routes
from refund_desk.web.routes import stripe_webhooks as stripe_routes
from refund_desk.web.routes.mcp_http import McpEndpoint
from refund_desk.web.security import PageHeaders

if TYPE_CHECKING:
    from refund_desk.demo.slack import SlackEmulator

log = logging.getLogger(__name__)
QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})  # probes, every few seconds
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE")


class Sweeper:
    """Fires the job sweeps: every REFUND_DESK_SWEEP_SECONDS, sooner when a job is due sooner,
    and at once when new work is committed. One sweep at a time per replica; a wake-up that
    arrives while one runs makes it go round again instead of queueing another.

    It also keeps this replica's workers for work its requests create (`Desk.start`): a worker
    thread claims such a job at once, so the request answers after intake and the case moves
    on without waiting for the next period. Only the job's id is in memory: the job is a
    committed row, which a sweep anywhere takes if this process dies."""

    def __init__(self, runtime: Runtime) -> None:
        self.jobs = runtime.desk.jobs
        self.db = runtime.db
        self.period = timedelta(seconds=runtime.settings.sweep_seconds)
        self.scheduler = BackgroundScheduler(timezone="UTC")
        self.running = threading.Lock()
        self.again = threading.Event()
        # What /readyz reads, and the heartbeat `refund-desk status` reads from the database.
        self.state = health.SweepState(period=self.period.total_seconds())
        self.started_at = datetime.now(UTC)
        self._beat_at = 0.0
        # SQLite has one writer: one thread. PostgreSQL: several, each a job at a time.
        threads = runtime.settings.worker_threads or (1 if runtime.db.one_writer else 2)
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
            self.state.last_swept, self.state.last_error = time.monotonic(), None
            self._heartbeat(None)
        except Exception as exc:  # the next period tries again; the jobs table keeps the work
            log.exception("sweep failed")
            self.state.last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            self._heartbeat(self.state.last_error)
            return
        finally:
            self.running.release()
        now = datetime.now(UTC)
        if upcoming is not None and upcoming < now + self.period:
            self._soon(max(upcoming, now) + timedelta(milliseconds=50))

    def _heartbeat(self, error: str | None) -> None:
        """At most every third of a period: this replica swept (for `refund-desk status`)."""
        beat = time.monotonic()
        if error is None and beat - self._beat_at < self.period.total_seconds() / 3:
            return
        self._beat_at = beat
        try:
            with self.db.write() as session:
                health.heartbeat(
                    session,
                    self.jobs.owner,
                    started_at=self.started_at,
                    swept_at=datetime.now(UTC),
                    sweep_seconds=self.period.total_seconds(),
                    error=error,
                )
        except Exception:  # the heartbeat is news, not work: a failed one is only logged
            log.warning("could not record this replica's sweep", exc_info=True)

    def take(self, job_id: int) -> None:
        """A request just committed this job: run it now, on a worker thread."""
        if self.jobs.stopping.is_set():
            return  # the row stays: a sweep takes it, here or elsewhere
        with self.idle:
            self.busy += 1
        try:
            future = self.pool.submit(self._run_one, job_id)
        except RuntimeError:  # shut down meanwhile
            self._done()
            return
        # A hand-off cancelled by `stop` never runs `_run_one`: it is done all the same.
        future.add_done_callback(lambda f: self._done() if f.cancelled() else None)

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
        self.state.running = False
        self.scheduler.shutdown(wait=False)
        self.pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + timeout
        with self.idle:  # jobs already running finish (each within its lease)
            self.idle.wait_for(lambda: self.busy <= 0, timeout=timeout)
        if self.running.acquire(timeout=max(0.0, deadline - time.monotonic())):
            self.running.release()


class RequestLog:
    """One log line per request: route, status, time, and the case it turned out to be about
    (a plain ASGI middleware: what the app raises passes through unchanged)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        with logs.request_scope() as bound:
            try:
                await self.app(scope, receive, sending)
            finally:
                path = getattr(scope.get("route"), "path", None) or scope["path"]
                if path not in QUIET_PATHS:
                    log.info(
                        "%s %s %s in %.0f ms",
                        scope["method"],
                        path,
                        status,
                        (time.perf_counter() - start) * 1000,
                        extra={"status": status, **bound},
                    )


def create_app(
    runtime: Runtime, *, scheduler: bool = True, slack_emulator: SlackEmulator | None = None
) -> FastAPI:
    """The app; `slack_emulator` (only `refund-desk demo` passes one) mounts the Slack emulator."""
    surface = build_surface(runtime.desk, runtime.settings)
    install_jobs(runtime, slack=surface)
    if runtime.settings.job_processes > 0:
        # `serve --job-processes N`: the jobs run in processes of their own (`job_process.py`);
        # this one takes requests, and what they create is due at once, for those to take.
        runtime.desk.jobs_elsewhere, scheduler = True, False

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        sweeper = Sweeper(runtime) if scheduler else None
        app.state.sweeper = sweeper
        if sweeper is not None:
            sweeper.start()
            runtime.desk.wake = sweeper.wake
            runtime.desk.worker = sweeper.take
        socket_mode = start_socket_mode(surface, runtime.settings) if surface else None
        app.state.socket_mode = socket_mode
        if surface is not None:  # the workspace checked against the policy, as a job
            surface.start_jobs([await asyncio.to_thread(queue_doctor, surface, "start-up")])
        try:
            yield
        finally:
            await assistants.close()  # `/mcp`, if an assistant started it
            if socket_mode is not None:
                await socket_mode.close()
            if sweeper is not None:
                runtime.desk.wake = None
                runtime.desk.worker = None
                sweeper.stop(timeout=runtime.desk.jobs.lease.total_seconds())
            tracing.flush()

    app = FastAPI(title="Refund Desk", version="0.1.0", lifespan=lifespan)
    app.state.runtime = runtime
    app.state.case_waiters = waiters = waiting.CaseWaiters()  # for `Prefer: wait=N`
    app.state.recent_keys = api.RecentKeys()  # which keys `KeyFirst` checks before the body
    app.state.intake_gate = IntakeGate(
        intake_limit(
            runtime.settings.intake_concurrency,
            jobs_elsewhere=runtime.desk.jobs_elsewhere,
            processor_is_remote=runtime.sandbox is None,  # the sandbox is this database
            one_writer=runtime.db.one_writer,
        ),
        serving=runtime.db.serving,
    )
    runtime.desk.jobs.listeners.append(waiters.job_finished)

    app.add_middleware(PageHeaders)  # every HTML page: CSP, nosniff, no framing; HEAD as GET
    app.add_middleware(RequestLog)
    # Traces only with OTEL_EXPORTER_OTLP_ENDPOINT; otherwise nothing is loaded or exported.
    tracing.setup(runtime.settings.otlp_endpoint, app=app, engine=runtime.db.engine)
    app.include_router(api.router)
    app.include_router(stripe_routes.router)
    app.include_router(paypal_routes.router)
    assistants = McpEndpoint(runtime, app.state.recent_keys)
    app.router.routes.append(Route("/mcp", endpoint=assistants))
    app.state.socket_mode = None
    if surface is not None:
        if surface.http:  # only with a signing secret; never in Socket Mode
            app.include_router(surface.router())
        app.state.slack = surface
    elif runtime.settings.slack_signing_secret and runtime.settings.slack_app_token is None:
        # Being installed: Slack verifies the request URL before there is a bot token.
        app.include_router(pending_router(runtime.settings.slack_signing_secret.get_secret_value()))
    for customer_channel in (web_form.router, inbound.router, appeals.router):
        app.include_router(customer_channel)
    desk.install(app)
    if slack_emulator is not None:
        app.include_router(slack_emulator.router())

    @app.exception_handler(CaseError)
    async def _case_error(request: Request, exc: CaseError) -> JSONResponse:
        # 503: nothing was written; the client sends the same request again (same key) later
        retry = {"Retry-After": "30"} if exc.status == 503 else None
        return JSONResponse(
            error_body(exc.code, exc.message, exc.fields), status_code=exc.status, headers=retry
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        problem = invalid(exc.errors(), within=1)  # without FastAPI's `body`, `header`...
        return JSONResponse(
            error_body(problem.code, problem.message, problem.fields), status_code=422
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # An unknown route, an unconfigured webhook (`errors.no_such_route`), a method a route
        # does not take (405, its `Allow` naming every method the path takes).
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        headers = exc.headers
        allowed = _allowed(request) if exc.status_code == 405 else None
        if allowed:
            headers = {**(headers or {}), "Allow": ", ".join(allowed)}
        return JSONResponse(
            error_body(code, str(exc.detail)), status_code=exc.status_code, headers=headers
        )

    def _allowed(request: Request) -> list[str]:
        """The methods some route of the app takes at this path (Starlette's 405 names only the
        first route's: `/request` is a GET route and a POST route)."""
        return [
            method
            for method in METHODS
            if any(
                route.matches({**request.scope, "method": method, "path_params": {}})[0]
                is Match.FULL
                for route in app.router.routes
            )
        ]

    # /openapi.json: the API's models, its bearer key and the request's rules, for this desk's
    # processors.
    api_models.describe(app, runtime.desk.processor.name.split(","))

    registry = metrics.registry_for(runtime.db)

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        return Response(metrics.render(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/readyz")
    def readyz() -> JSONResponse:
        """Ready for traffic: the database answers at the newest schema and this replica's
        scheduler sweeps; Slack, the processor and the model are listed with their state."""
        sweeper: Sweeper | None = getattr(app.state, "sweeper", None)
        socket_mode = app.state.socket_mode
        ready, body = health.readiness(
            runtime,
            sweeper.state if sweeper is not None else None,
            socket_mode.status if socket_mode is not None else None,
        )
        return JSONResponse(body, status_code=200 if ready else 503)

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
