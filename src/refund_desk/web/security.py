"""What every HTML page carries, and `HEAD` answered as `GET`.

A plain ASGI middleware: a response whose type is HTML gets a strict Content-Security-Policy (no
inline script or style, nothing from another origin, no framing), `X-Content-Type-Options:
nosniff` and a `Referrer-Policy`, whichever route sent it. A `HEAD` request is served as the
`GET` it asks about, with the body left out (RFC 9110 §9.3.2).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "object-src 'none'"
)
# FastAPI's API documentation pages (Swagger UI, ReDoc) start their viewer with an inline
# script and load it from the jsDelivr CDN: they alone get a policy that allows those two.
DOCS_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc"})
DOCS_CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; "
    "style-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; img-src 'self' data: https:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
)
OTHER_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
)


class PageHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        head = scope["method"] == "HEAD"
        policy = DOCS_CONTENT_SECURITY_POLICY if scope["path"] in DOCS_PATHS else None
        page_headers = (
            (b"content-security-policy", (policy or CONTENT_SECURITY_POLICY).encode()),
            *OTHER_HEADERS,
        )
        if head:
            scope = {**scope, "method": "GET"}

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                kind = next((v for k, v in headers if k.lower() == b"content-type"), b"")
                if kind.startswith(b"text/html"):
                    present = {k.lower() for k, _ in headers}
                    headers += [(k, v) for k, v in page_headers if k not in present]
                message = {**message, "headers": headers}
            elif head and message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app(scope, receive, sending)
