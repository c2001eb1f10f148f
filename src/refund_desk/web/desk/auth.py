"""Sign in with Slack (OpenID Connect) and sign out.

`GET /desk/sign-in` says what the desk is and offers the button (or, without `SLACK_CLIENT_ID`
and `SLACK_CLIENT_SECRET`, how to configure it). `GET /desk/sign-in/slack` starts the flow: a
fresh `state` and `nonce` go into a short-lived signed cookie bound to this browser (HttpOnly,
SameSite=Lax, only sent to `/desk/sign-in`), and the browser goes to Slack's authorize page.
`GET /desk/sign-in/callback` (the redirect URL in `manifest.yml`) takes the cookie once: its
`state` must be the one Slack brought back, the code is exchanged once, and the ID token must
carry its `nonce` (`openid.py` checks the rest). Only a local `/desk` path is followed
afterwards. A person the active policy names in none of its roles gets no session: the page
says so. Anything refused changes nothing: no session, no record.
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response

from refund_desk import clock
from refund_desk.crypto import keyed_hash, same
from refund_desk.runtime import Runtime
from refund_desk.web.desk import session
from refund_desk.web.desk.access import signed_in
from refund_desk.web.desk.openid import (
    SignInFailed,
    SlackSignIn,
    SlackUnreachable,
    configured,
)
from refund_desk.web.desk.render import csrf_ok, page
from refund_desk.web.desk.session import Viewer

log = logging.getLogger(__name__)
router = APIRouter(include_in_schema=False)

CALLBACK = "/desk/sign-in/callback"
STARTED = "rd_sign_in"  # the state cookie
STARTED_FOR = timedelta(minutes=10)
HOME = "/desk"
_used_lock = threading.Lock()
_used: dict[str, datetime] = {}  # states taken here, until their cookie would have lapsed


@dataclass(frozen=True)
class Started:
    """A sign-in this browser started: what Slack must bring back, and where to go after."""

    state: str
    nonce: str
    next: str
    at: int  # unix seconds


def local_next(value: str | None) -> str:
    """A path on the desk to go to after sign-in; anything else (another host, a scheme, a
    protocol-relative `//host`, a backslash or control character) is the queue."""
    if not value or len(value) > 2000:
        return HOME
    if any(ord(c) < 0x21 or c in "\\\x7f" for c in value):
        return HOME
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or value.startswith("//"):
        return HOME
    if parts.path != HOME and not parts.path.startswith(HOME + "/"):
        return HOME
    if parts.path.startswith("/desk/sign-") or "/." in parts.path:
        return HOME
    return value


def redirect_uri(request: Request) -> str:
    runtime: Runtime = request.app.state.runtime
    return runtime.settings.public_url.rstrip("/") + CALLBACK


def slack_sign_in(request: Request) -> SlackSignIn | None:
    """The app's OpenID Connect client (made once), or None when the settings are missing."""
    runtime: Runtime = request.app.state.runtime
    if not configured(runtime.settings):
        return None
    state = request.app.state
    with _used_lock:
        found = getattr(state, "desk_slack_sign_in", None)
        if found is None:
            found = SlackSignIn(runtime.settings)
            state.desk_slack_sign_in = found
    return found if isinstance(found, SlackSignIn) else None


# ---------------------------------------------------------------- the state cookie


def _sign(secret: str, body: str) -> str:
    return keyed_hash(secret, "desk-sign-in", body)


def _set_started(response: Response, request: Request, secret: str, started: Started) -> None:
    data = {"s": started.state, "n": started.nonce, "x": started.next, "t": started.at}
    raw = json.dumps(data, separators=(",", ":")).encode()
    body = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    response.set_cookie(
        STARTED,
        f"{body}.{_sign(secret, body)}",
        max_age=int(STARTED_FOR.total_seconds()),
        path="/desk/sign-in",
        httponly=True,
        samesite="lax",
        secure=session.secure(request),
    )


def _forget_started(response: Response, request: Request) -> None:
    response.delete_cookie(
        STARTED, path="/desk/sign-in", httponly=True, samesite="lax", secure=session.secure(request)
    )


def take_started(request: Request, secret: str) -> Started | None:
    """The sign-in this browser started, once: signed by us, not lapsed, not taken before here."""
    raw = request.cookies.get(STARTED, "")
    body, _, signature = raw.partition(".")
    if not body or not signature or not same(_sign(secret, body), signature):
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        started = Started(str(data["s"]), str(data["n"]), str(data["x"]), int(data["t"]))
    except (ValueError, KeyError, TypeError):
        return None
    now = clock.now()
    age = now.timestamp() - started.at
    if not 0 <= age <= STARTED_FOR.total_seconds() + 5:
        return None
    with _used_lock:
        for state in [s for s, until in _used.items() if until < now]:
            del _used[state]
        if started.state in _used:
            return None
        _used[started.state] = now + STARTED_FOR + timedelta(seconds=10)
    return started


# ---------------------------------------------------------------- the pages


def _sign_in_page(
    request: Request,
    *,
    status: int = 200,
    title: str = "Sign in",
    next_url: str = HOME,
    **context: Any,
) -> Response:
    runtime: Runtime = request.app.state.runtime
    return page(
        request,
        None,
        "sign_in.html",
        title=title,
        status=status,
        configured=configured(runtime.settings),
        start_url=f"/desk/sign-in/slack?next={quote(next_url, safe='')}",
        callback_url=redirect_uri(request),
        **{"problem": None, "no_role": None, **context},
    )


@router.get("/desk/sign-in")
def sign_in(request: Request, next: str = HOME) -> Response:
    return _sign_in_page(request, next_url=local_next(next))


@router.get("/desk/sign-in/slack")
def start(request: Request, next: str = HOME) -> Response:
    """Off to Slack's authorize page with a fresh state and nonce bound to this browser."""
    client = slack_sign_in(request)
    if client is None:
        return RedirectResponse("/desk/sign-in", 303)
    runtime: Runtime = request.app.state.runtime
    started = Started(
        secrets.token_urlsafe(24),
        secrets.token_urlsafe(24),
        local_next(next),
        int(clock.now().timestamp()),
    )
    try:
        url = client.authorization_url(redirect_uri(request), started.state, started.nonce)
    except SlackUnreachable as exc:
        log.warning("Sign in with Slack: %s", exc)
        return _sign_in_page(
            request,
            status=502,
            problem="Slack's sign-in could not be reached just now. Try again in a minute.",
        )
    response = RedirectResponse(url, 303)
    response.headers["Cache-Control"] = "no-store"
    _set_started(response, request, runtime.settings.secret_value(), started)
    return response


@router.get(CALLBACK)
def callback(request: Request, code: str = "", state: str = "", error: str = "") -> Response:
    """Where Slack sends the browser back. Refused unless this browser started this sign-in."""
    runtime: Runtime = request.app.state.runtime
    secret = runtime.settings.secret_value()
    started = take_started(request, secret)
    response = _callback(request, runtime, started, code, state, error)
    _forget_started(response, request)
    response.headers["Cache-Control"] = "no-store"
    return response


def _callback(
    request: Request,
    runtime: Runtime,
    started: Started | None,
    code: str,
    state: str,
    error: str,
) -> Response:
    if started is None or not state or not same(state, started.state):
        log.warning("Sign in with Slack refused: the state is not this browser's")
        return _sign_in_page(
            request,
            status=400,
            title="Sign in again",
            problem=(
                "This sign-in did not start in this browser, or it took too long. "
                "Nothing was changed: start again."
            ),
        )
    if error:
        return _sign_in_page(
            request,
            status=400 if error != "access_denied" else 200,
            title="Sign in cancelled" if error == "access_denied" else "Sign in again",
            next_url=started.next,
            problem=(
                "You cancelled signing in with Slack."
                if error == "access_denied"
                else "Slack did not sign you in. Start again."
            ),
        )
    client = slack_sign_in(request)
    if client is None or not code:
        return RedirectResponse("/desk/sign-in", 303)
    try:
        identity = client.identify(code, redirect_uri(request), started.nonce)
    except SignInFailed as exc:
        log.warning("Sign in with Slack refused: %s", exc)
        return _sign_in_page(
            request,
            status=400,
            title="Sign in again",
            next_url=started.next,
            problem=f"{exc} Nothing was changed: start again.",
        )
    except SlackUnreachable as exc:
        log.warning("Sign in with Slack: %s", exc)
        return _sign_in_page(
            request,
            status=502,
            title="Sign in again",
            next_url=started.next,
            problem="Slack's sign-in could not be reached just now. Try again in a minute.",
        )
    now = int(clock.now().timestamp())
    person = session.viewer(runtime, session.Session(identity.user, identity.name, now, now))
    if not person.may_read:
        log.info("Sign in with Slack: %s has no role in the active policy", identity.user)
        return _sign_in_page(request, status=403, title="No role on the desk", no_role=person)
    log.info("Sign in with Slack: %s signed in to the desk", identity.user)
    response = RedirectResponse(started.next, 303)
    session.start(response, request, runtime.settings.secret_value(), identity.user, identity.name)
    return response


@router.post("/desk/sign-out")
def sign_out(
    request: Request, viewer: Viewer = Depends(signed_in), csrf: str = Form("")
) -> Response:
    if not csrf_ok(request, viewer, csrf):
        return page(request, viewer, "forbidden.html", title="Not signed out", status=403)
    response = RedirectResponse("/desk/sign-in", 303)
    session.end(response, request)
    return response
