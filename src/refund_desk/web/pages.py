"""Small server-rendered pages for customers: no JavaScript, accessible, CSRF-protected.

Plain string templates with every value escaped here. CSRF is a double submit: a random
cookie, and a hidden field carrying an HMAC of that cookie, the form's purpose and a time, so a
page on another site can neither read nor forge the pair.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from html import escape

from fastapi import Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from refund_desk.storage.crypto import keyed_hash, same
from refund_desk.web.errors import error_response

CSRF_COOKIE = "rd_form"
CSRF_MAX_AGE = 2 * 3600
_COOKIE_SHAPE = re.compile(r"^[A-Za-z0-9_\-]{32,64}$")

STYLE = """
body{font:16px/1.5 system-ui,sans-serif;margin:0;color:#1b1b1b;background:#f7f7f7}
main{max-width:40rem;margin:2rem auto;padding:1.5rem;background:#fff}
label{display:block;font-weight:600;margin-top:1.25rem}
.hint{color:#555;margin:.25rem 0}
input,select,textarea{font:inherit;width:100%;box-sizing:border-box;padding:.5rem;
border:2px solid #555}
textarea{min-height:8rem}
[aria-invalid=true]{border-color:#b00020}
.error{color:#b00020;font-weight:600;margin:.25rem 0}
.summary{border:3px solid #b00020;padding:1rem;margin-bottom:1rem}
button{font:inherit;margin-top:1.5rem;padding:.6rem 1.2rem;background:#0b5;color:#fff;
border:0}
:focus{outline:3px solid #fd0;outline-offset:2px}
.visually-hidden{position:absolute;left:-10000px}
"""


@dataclass
class Field:
    name: str
    label: str
    kind: str = "text"  # text | email | textarea | select | file
    hint: str | None = None
    required: bool = False
    options: tuple[tuple[str, str], ...] = ()
    attrs: dict[str, str] = field(default_factory=dict)


def page(title: str, body: str, *, status: int = 200) -> HTMLResponse:
    html = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
        f"<body><main>{body}</main></body></html>"
    )
    return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})


def error_summary(errors: dict[str, str], form_error: str | None) -> str:
    if not errors and not form_error:
        return ""
    items = "".join(
        f'<li><a href="#{escape(name)}">{escape(message)}</a></li>'
        for name, message in errors.items()
    )
    lead = f"<p>{escape(form_error)}</p>" if form_error else ""
    return (
        '<div class="summary" role="alert" id="form-errors" tabindex="-1">'
        f"<h2>There is a problem</h2>{lead}<ul>{items}</ul></div>"
    )


def render_field(f: Field, values: dict[str, str], errors: dict[str, str]) -> str:
    """A labelled control; its hint and error are tied to it with aria-describedby."""
    described = []
    parts = [
        f'<label for="{f.name}">{escape(f.label)}{"" if f.required else " (optional)"}</label>'
    ]
    if f.hint:
        parts.append(f'<p class="hint" id="{f.name}-hint">{escape(f.hint)}</p>')
        described.append(f"{f.name}-hint")
    if f.name in errors:
        parts.append(f'<p class="error" id="{f.name}-error">{escape(errors[f.name])}</p>')
        described.append(f"{f.name}-error")
    attrs = {"id": f.name, "name": f.name, **f.attrs}
    if described:
        attrs["aria-describedby"] = " ".join(described)
    if f.name in errors:
        attrs["aria-invalid"] = "true"
    if f.required:
        attrs["required"] = ""
    attr_text = "".join(f' {k}="{escape(v)}"' if v != "" else f" {k}" for k, v in attrs.items())
    value = values.get(f.name, "")
    if f.kind == "textarea":
        parts.append(f"<textarea{attr_text}>{escape(value)}</textarea>")
    elif f.kind == "select":
        options = "".join(
            f'<option value="{escape(v)}"{" selected" if v == value else ""}>{escape(t)}</option>'
            for v, t in f.options
        )
        parts.append(f"<select{attr_text}>{options}</select>")
    elif f.kind == "file":
        parts.append(f'<input type="file"{attr_text}>')
    else:
        parts.append(f'<input type="{f.kind}" value="{escape(value)}"{attr_text}>')
    return f'<div class="field">{"".join(parts)}</div>'


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


def json_error(code: str, message: str, fields: dict[str, str], status: int) -> JSONResponse:
    return error_response(code, message, status, fields)
