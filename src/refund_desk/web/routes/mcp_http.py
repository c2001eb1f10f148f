"""`/mcp`: the MCP server (`mcp_server.py`) over streamable HTTP. Every request carries an API
key (`Authorization: Bearer rdk_…`), checked before the MCP transport sees the request; its
scope says whether the caller may propose refunds."""

from __future__ import annotations

from typing import Any

from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.server import StreamableHTTPASGIApp
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from refund_desk.api_keys import Presented
from refund_desk.cases.errors import CaseError
from refund_desk.mcp_server import Caller, build_server, key_caller
from refund_desk.runtime import Runtime
from refund_desk.web.errors import error_response
from refund_desk.web.routes.intake_api import RecentKeys, check_key

KEY = "refund_desk.api_key"  # where the checked key rides in the request's scope


class KeyRequired:
    """An ASGI app: the MCP transport, behind our API key check."""

    def __init__(self, inner: StreamableHTTPASGIApp, runtime: Runtime, recent: RecentKeys) -> None:
        self.inner, self.runtime, self.recent = inner, runtime, recent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers") or ())
        authorization = headers.get(b"authorization", b"").decode("latin-1") or None
        try:
            scope[KEY] = await run_in_threadpool(
                check_key, self.runtime, authorization, self.recent
            )
        except CaseError as exc:
            await error_response(exc.code, exc.message, exc.status)(scope, receive, send)
            return
        await self.inner(scope, receive, send)


def _caller(ctx: Context[Any, Any, Any]) -> Caller:
    request = ctx.request_context.request
    presented: Presented = request.scope[KEY]  # type: ignore[union-attr]
    return key_caller(presented.name, presented.scope)


def mcp_route(runtime: Runtime, recent: RecentKeys) -> tuple[Route, FastMCP]:
    """The `/mcp` route, and its server (whose session manager the app's lifespan runs)."""
    server = build_server(runtime, _caller)
    server.streamable_http_app()  # makes the session manager
    endpoint = KeyRequired(StreamableHTTPASGIApp(server.session_manager), runtime, recent)
    return Route("/mcp", endpoint=endpoint), server
