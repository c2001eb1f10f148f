"""The Bolt app: one workspace, listeners per surface, the outbox, and the FastAPI route.

Blocking work (the database, job runs) never runs on the event loop: listeners hand their one
short transaction to a small pool of their own (`ack_pool`), so an acknowledgement never waits
behind background work. After `ack()`, the jobs a click created are started at once on the
other pool (`pool`); if the process dies first, the sweeps run them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from slack_bolt.adapter.fastapi.async_handler import AsyncSlackRequestHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk import WebClient
from slack_sdk.web.async_client import AsyncWebClient
from starlette.responses import JSONResponse, PlainTextResponse, Response

from refund_desk.bot.directory import SlackDirectory
from refund_desk.bot.listeners.refund_command import FILE_CASE
from refund_desk.bot.outbox import SLACK_CALL, SLACK_TELL, Outbox
from refund_desk.cases.desk import Desk
from refund_desk.cases.notify import NOTIFY
from refund_desk.jobs.queue import Handler
from refund_desk.settings import Settings
from refund_desk.web.metrics import SLACK_ACK_SECONDS

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class Surface:
    app: AsyncApp
    desk: Desk
    outbox: Outbox
    settings: Settings
    directory: SlackDirectory  # the policy's user groups, read from Slack
    # Background work (jobs started after ack(): Slack, Stripe, the advisor, backtests) ...
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(8, "slack"))
    # ... never delays an acknowledgement: listeners' short transactions have their own threads.
    ack_pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(4, "slack-ack"))
    # Requests arrive over signed HTTP (`/slack/events`), or over Socket Mode, never both: the
    # HTTP route exists only with a signing secret and no app-level token.
    http: bool = False
    _background: set[Future[None]] = field(default_factory=set)

    def private_job_kinds(self) -> set[str]:
        """Jobs whose payload holds a rendered message or what someone typed: emptied once
        delivered (a card quotes the customer; an erasure must not find it in the jobs)."""
        return {SLACK_CALL, SLACK_TELL, FILE_CASE}

    def job_handlers(self) -> dict[str, Handler]:
        """The job kinds only Slack runs; `runtime.job_table` puts them in the one table."""
        from refund_desk.bot.doctor import DOCTOR_JOB, doctor_job
        from refund_desk.bot.home import HOME, publish_home
        from refund_desk.bot.listeners.refund_command import file_case
        from refund_desk.bot.policy_jobs import (
            BACKTEST_JOB,
            BACKTEST_REPORT_JOB,
            DRAFT_FILE_JOB,
            PolicyJobs,
        )
        from refund_desk.governance.review import REVIEW_JOB

        policy_jobs = PolicyJobs(self.desk, self.outbox)
        return {
            NOTIFY: self.outbox.on_notify,
            SLACK_CALL: self.outbox.on_call,
            SLACK_TELL: self.outbox.on_tell,
            BACKTEST_JOB: policy_jobs.backtest,
            BACKTEST_REPORT_JOB: policy_jobs.backtest_report,
            DRAFT_FILE_JOB: policy_jobs.draft_file,
            REVIEW_JOB: policy_jobs.review,
            FILE_CASE: partial(file_case, self.desk),
            HOME: partial(publish_home, self),
            DOCTOR_JOB: partial(doctor_job, self),
        }

    async def blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a listener's database work off the event loop, never behind background jobs.

        The policy's user groups are read first (when older than the directory allows), so the
        transaction that follows checks membership at most a minute old without calling out."""

        def run() -> T:
            self.directory.refresh()
            return fn(*args, **kwargs)

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.ack_pool, run)

    def start_jobs(self, job_ids: Iterable[int]) -> None:
        """After ack(): run the jobs a click created, then whatever else became due (unless
        the jobs run in processes of their own: there they are due at once)."""
        if self.desk.jobs_elsewhere:
            return
        ids = list(job_ids)

        def run() -> None:
            for job_id in ids:
                self.desk.jobs.run_now(job_id)
            self.desk.jobs.sweep(max_batches=5)

        future = self.pool.submit(run)
        self._background.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: Future[None]) -> None:
        self._background.discard(future)
        if not future.cancelled() and future.exception() is not None:
            log.error("background jobs failed; the sweeps will retry", exc_info=future.exception())

    def router(self) -> APIRouter:
        handler = AsyncSlackRequestHandler(self.app)
        router = APIRouter()

        @router.post("/slack/events")
        async def slack_events(request: Request) -> Response:
            return await handler.handle(request)

        return router


@dataclass
class SocketMode:
    """Socket Mode, started in the background: a Slack that cannot be reached at start-up
    never keeps the intake API and webhooks from serving; it retries, and `/healthz` says so."""

    surface: Surface
    app_token: str
    status: str = "connecting"
    handler: Any | None = None
    task: asyncio.Task[None] | None = None
    ATTEMPT_SECONDS = 30.0
    MAX_DELAY_SECONDS = 60.0

    async def _run(self) -> None:
        from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

        delay = 1.0
        while True:
            handler = AsyncSocketModeHandler(self.surface.app, self.app_token)
            try:
                await asyncio.wait_for(handler.connect_async(), self.ATTEMPT_SECONDS)
            except asyncio.CancelledError:
                await _close_quietly(handler)
                raise
            except Exception as exc:  # any failure: try again later
                self.status = "retrying"
                log.warning("Socket Mode could not connect (%s); retrying in %.0fs", exc, delay)
                await _close_quietly(handler)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.MAX_DELAY_SECONDS)
                continue
            self.handler, self.status = handler, "connected"
            return

    async def close(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        if self.handler is not None:
            await _close_quietly(self.handler)


async def _close_quietly(handler: Any) -> None:
    try:
        await handler.close_async()
    except Exception:  # closing a socket that never opened
        log.debug("closing Socket Mode failed", exc_info=True)


def start_socket_mode(surface: Surface, settings: Settings) -> SocketMode | None:
    """Socket Mode instead of HTTP when an app-level token is set (needs a running loop)."""
    if settings.slack_app_token is None:
        return None
    socket_mode = SocketMode(surface, settings.slack_app_token.get_secret_value())
    socket_mode.task = asyncio.get_running_loop().create_task(socket_mode._run())
    return socket_mode


def pending_router(signing_secret: str) -> APIRouter:
    """`/slack/events` before the bot token is set: Slack checks the request URL while the app is
    being created, before it is installed, so the route answers `url_verification` as soon as
    the signing secret is set (every request still signed); anything else is told what is
    missing."""
    from slack_sdk.signature import SignatureVerifier

    verifier = SignatureVerifier(signing_secret)
    router = APIRouter()

    @router.post("/slack/events")
    async def slack_events(request: Request) -> Response:
        body = (await request.body()).decode("utf-8", "replace")
        if not verifier.is_valid_request(body, dict(request.headers)):
            return Response("invalid signature", status_code=401)
        if "json" in request.headers.get("content-type", ""):
            with contextlib.suppress(ValueError):
                payload = json.loads(body)
                if isinstance(payload, dict) and payload.get("type") == "url_verification":
                    return JSONResponse({"challenge": payload.get("challenge")})
        return PlainTextResponse(
            "Refund Desk is not connected to this workspace yet: set SLACK_BOT_TOKEN (Install "
            "App in the app's settings) and restart the server."
        )

    return router


def slack_configured(settings: Settings) -> bool:
    return settings.slack_bot_token is not None and (
        settings.slack_signing_secret is not None or settings.slack_app_token is not None
    )


def build_surface(desk: Desk, settings: Settings) -> Surface | None:
    """The Slack surface, or None when no workspace is configured."""
    if not slack_configured(settings):
        return None
    from refund_desk.bot.blocks import modals as views
    from refund_desk.bot.listeners import actions, events, evidence
    from refund_desk.bot.listeners import policy_command as policy_commands
    from refund_desk.bot.listeners import refund_command as commands

    assert settings.slack_bot_token is not None
    token = settings.slack_bot_token.get_secret_value()
    signing = settings.slack_signing_secret
    http = signing is not None and settings.slack_app_token is None
    app = AsyncApp(
        client=AsyncWebClient(token=token, base_url=settings.slack_api_url),
        signing_secret=signing.get_secret_value() if signing else None,
        # Socket Mode requests are authenticated by the app-level token over the socket, and
        # then no HTTP route is mounted; over HTTP every request must carry a valid signature.
        request_verification_enabled=http,
        raise_error_for_unhandled_request=False,
        # Our listeners finish right after ack() (the rest runs as jobs), so answering after
        # the listener costs nothing and no listener work is left running unseen.
        process_before_response=True,
    )
    # Read before a listener acknowledges: a short timeout, and a failed read counts as nobody.
    directory = SlackDirectory(
        WebClient(token=token, base_url=settings.slack_api_url, timeout=3), desk.db
    )
    desk.directory = directory
    outbox = Outbox(
        desk=desk,
        client=WebClient(token=token, base_url=settings.slack_api_url),
        default_channel=settings.channel,
        directory=directory,
        desk_url=settings.public_url,
    )
    surface = Surface(
        app=app, desk=desk, outbox=outbox, settings=settings, http=http, directory=directory
    )

    @app.middleware
    async def time_ack(body: dict[str, Any], next: Callable[[], Any]) -> Any:
        """Our listeners answer right after ack(): their time is the acknowledgement's."""
        start = time.perf_counter()
        try:
            return await next()
        finally:
            kind = str(body.get("type") or ("command" if "command" in body else "other"))
            SLACK_ACK_SECONDS.labels(kind).observe(time.perf_counter() - start)

    for module in (actions, views, commands, policy_commands, events, evidence):
        module.register(surface)

    @app.error
    async def on_error(error: Exception, body: dict[str, Any], respond: Any) -> None:
        """One place that tells the person something went wrong, instead of silence: a short
        apology with an incident id (found in the log), never the exception's text."""
        incident = secrets.token_hex(4)
        log.error("Slack listener failed (incident %s)", incident, exc_info=error)
        text = (
            f":warning: Sorry, that did not work (incident `{incident}`). Nothing was changed "
            "by the failed step; try again, or give the incident id to your admin."
        )
        user = (body.get("user") or {}).get("id") or body.get("user_id")
        if not user:
            return
        channel = (body.get("channel") or {}).get("id") or body.get("channel_id")
        await actions.tell(surface, channel, str(user), text, body.get("response_url"))

    return surface
