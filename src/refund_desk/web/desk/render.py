"""The desk's pages: Jinja2 templates in `web/templates/desk/`, every value escaped, every form
with a CSRF token bound to the signed-in person, and the helpers the templates share."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from refund_desk import clock, money
from refund_desk.text import Text
from refund_desk.web import pages
from refund_desk.web.desk import session
from refund_desk.web.desk.session import Viewer

SECTIONS = (
    ("queue", "My queue", "/desk"),
    ("cases", "Cases", "/desk/cases"),
    ("policy", "Policy", "/desk/policy"),
    ("insights", "Insights", "/desk/insights"),
)


def csrf_purpose(viewer: Viewer) -> str:
    return f"desk|{viewer.user}"


def page(
    request: Request,
    viewer: Viewer | None,
    template: str,
    *,
    title: str,
    section: str | None = None,
    status: int = 200,
    **context: Any,
) -> Response:
    """A desk page for ``viewer`` (None: the sign-in pages). Forms on it carry `csrf()`."""
    secret = request.app.state.runtime.settings.secret_value()
    cookie, new = pages.csrf_cookie(request)

    def csrf() -> str:
        assert viewer is not None, "a form on a page without a signed-in person"
        return pages.csrf_token(secret, cookie, csrf_purpose(viewer), clock.now().timestamp())

    response = pages.render(
        f"desk/{template}",
        title=title,
        status=status,
        viewer=viewer,
        sections=SECTIONS,
        section=section,
        csrf=csrf,
        amount=amount,
        stamp=stamp,
        words=words,
        **context,
    )
    if new:
        pages.set_csrf_cookie(response, request, cookie)
    return keep(request, response)


def keep(request: Request, response: Response) -> Response:
    """The session shown by this request stays alive: its idle clock starts again."""
    found = getattr(request.state, "desk_session", None)
    if found is not None:
        secret = request.app.state.runtime.settings.secret_value()
        session.refresh(response, request, secret, found)
    return response


def csrf_ok(request: Request, viewer: Viewer, token: str | None) -> bool:
    secret = request.app.state.runtime.settings.secret_value()
    cookie = request.cookies.get(pages.CSRF_COOKIE)
    return pages.csrf_ok(secret, cookie, token, csrf_purpose(viewer), clock.now().timestamp())


def amount(minor: int | None, currency: str) -> str:
    return "" if minor is None else money.format_money(minor, currency)


def stamp(at: datetime | None) -> str:
    """A time as the record shows it: ISO 8601 in UTC, to the minute."""
    return "" if at is None else at.strftime("%Y-%m-%d %H:%M UTC")


def words(value: Text | str | None) -> str:
    if value is None:
        return ""
    return value.as_text() if isinstance(value, Text) else str(value)
