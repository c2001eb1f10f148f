"""`/mcp`: the MCP server (`mcp_server.py`) over streamable HTTP. Every request carries an API
key (`Authorization: Bearer rdk_…`), checked before the MCP transport sees the request; its
scope says whether the caller may propose refunds.

The MCP SDK and its session manager are loaded on the first request with a valid key: a server
no assistant talks to does not carry them (about 12 MB of a demo's 250 MB budget)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from refund_desk.api_keys import Presented
from refund_desk.cases.errors import CaseError
from refund_desk.runtime import Runtime
from refund_desk.web.errors import error_response
from refund_desk.web.routes.intake_api import RecentKeys, check_key

if TYPE_CHECKING:
    from mcp.server.fastmcp import Context
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from refund_desk.mcp_server import Caller

KEY = "refund_desk.api_key"  # where the checked key rides in the request's scope


def _caller(ctx: Context[Any, Any, Any]) -> Caller:
    from refund_desk.mcp_server import key_caller

    request = ctx.request_context.request
    presented: Presented = request.scope[KEY]  # type: ignore[union-attr]
    return key_caller(presented.name, presented.scope)


class McpEndpoint:
    """An ASGI app: our API key check, then the MCP transport, started on first use and
    stopped with the server (`close`)."""

    def __init__(self, runtime: Runtime, recent: RecentKeys) -> None:
        self.runtime, self.recent = runtime, recent
        self._transport: ASGIApp | None = None
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers") or ())
        authorization = headers.get(b"authorization", b"").decode("latin-1") or None
        try:
            key = await run_in_threadpool(check_key, self.runtime, authorization, self.recent)
        except CaseError as exc:
            await error_response(exc.code, exc.message, exc.status)(scope, receive, send)
            return
        scope[KEY] = key
        await (await self._started())(scope, receive, send)

    async def _started(self) -> ASGIApp:
        async with self._lock:
            if self._transport is None:
                from mcp.server.fastmcp.server import StreamableHTTPASGIApp

                from refund_desk.mcp_server import build_server

                server = build_server(self.runtime, _caller)
                server.streamable_http_app()  # makes the session manager
                ready = asyncio.Event()
                self._task = asyncio.create_task(self._run(server.session_manager, ready))
                await ready.wait()
                self._transport = StreamableHTTPASGIApp(server.session_manager)
            return self._transport

    async def _run(self, manager: StreamableHTTPSessionManager, ready: asyncio.Event) -> None:
        async with manager.run():
            ready.set()
            await self._stop.wait()

    async def close(self) -> None:
        if self._task is not None:
            self._stop.set()
            await self._task
