"""Small server-rendered pages for customers: no JavaScript, accessible, CSRF-protected.

Jinja2 templates in `web/templates/`, escaped by default. CSRF is a double submit: a random
cookie, and a hidden field carrying an HMAC of that cookie, the form's purpose and a time, so a
page on another site can neither read nor forge the pair.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from refund_desk.crypto import keyed_hash, same

CSRF_COOKIE = "rd_form"
CSRF_MAX_AGE = 2 * 3600
_COOKIE_SHAPE = re.compile(r"^[A-Za-z0-9_\-]{32,64}$")


@dataclass
class Field:
    name: str
    label: str
    kind: str = "text"  # text | email | textarea | select | file
    hint: str | None = None
    required: bool = False
    options: tuple[tuple[str, str], ...] = ()
    attrs: dict[str, str] = field(default_factory=dict)


_templates = Environment(
    loader=PackageLoader("refund_desk.web", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render(template: str, *, title: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A page from `web/templates/`; every value is escaped by Jinja2."""
    html = _templates.get_template(template).render(title=title, **context)
    return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})


# ---------------------------------------------------------------- CSRF (double submit)


def csrf_cookie(request: Request) -> tuple[str, bool]:
    """The visitor's CSRF cookie value, and whether it is new (and must be set)."""
    value = request.cookies.get(CSRF_COOKIE, "")
    if _COOKIE_SHAPE.match(value):
        return value, False
    return secrets.token_urlsafe(32), True


def csrf_token(secret: str, cookie: str, purpose: str, now: float) -> str:
    """`<time>.<nonce>.<mac>`: each rendered form gets its own token (its own submission)."""
    ts, nonce = str(int(now)), secrets.token_urlsafe(9)
    return f"{ts}.{nonce}.{_sign(secret, cookie, purpose, f'{ts}.{nonce}')}"


def csrf_ok(secret: str, cookie: str | None, token: str | None, purpose: str, now: float) -> bool:
    if not cookie or not token or not _COOKIE_SHAPE.match(cookie):
        return False
    ts, _, rest = token.partition(".")
    nonce, _, sig = rest.partition(".")
    if not ts.isdigit() or not nonce or not (0 <= now - int(ts) <= CSRF_MAX_AGE):
        return False
    return same(_sign(secret, cookie, purpose, f"{ts}.{nonce}"), sig)


def _sign(secret: str, cookie: str, purpose: str, stamp: str) -> str:
    return keyed_hash(secret, "csrf", f"{purpose}|{cookie}|{stamp}")


def set_csrf_cookie(response: Response, request: Request, cookie: str) -> Response:
    response.set_cookie(
        CSRF_COOKIE,
        cookie,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


def wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept
