"""Who is on the desk: a signed session cookie naming a Slack user, and what the policy makes them.

The cookie holds the Slack user id, their name, when they signed in and when they were last
seen, HMAC-signed with a key derived from the deployment secret: any replica reads it, and an
edited one fails the signature. It is HttpOnly, SameSite=Lax, Secure when the desk's public
address is HTTPS; it lapses after `IDLE` without the person's own request (a page's script
asking in the background, `Sec-Fetch-Mode` other than `navigate`, does not count, so an open tab
does not keep an absent person signed in) and `LONGEST` after sign-in, when the browser drops it
too. It is stateless: sign-out removes it from this browser; a copy taken before lapses by the
same clocks.

The person's roles are read from the active policy on every request (`people.roles`, the one
answer every surface uses), never stored in the cookie: a person the policy drops loses the
desk at their next click.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import timedelta

from fastapi import Request
from fastapi.responses import Response

from refund_desk import clock
from refund_desk.bot.outbox import active_doc
from refund_desk.cases.people import Directory, is_lead, roles
from refund_desk.crypto import keyed_hash, same
from refund_desk.runtime import Runtime

COOKIE = "rd_desk"
IDLE = timedelta(minutes=30)
LONGEST = timedelta(hours=12)
_REFRESH_AFTER = 60  # seconds: the last-seen stamp is rewritten at most this often


@dataclass(frozen=True)
class Viewer:
    """The signed-in person: their Slack id and name, and their roles under the active policy
    (empty: the policy names them nowhere, and the desk shows them nothing but that)."""

    user: str
    name: str
    roles: tuple[str, ...]
    lead: bool = False

    @property
    def may_read(self) -> bool:
        return bool(self.roles)


@dataclass(frozen=True)
class Session:
    user: str
    name: str
    signed_in: int  # unix seconds
    seen: int


def start(response: Response, request: Request, secret: str, user: str, name: str) -> None:
    """Sign ``user`` in on this browser (after Slack vouched for them)."""
    now = int(clock.now().timestamp())
    _write(response, request, secret, Session(user, name, now, now))


def end(response: Response, request: Request) -> None:
    response.delete_cookie(COOKIE, path="/", secure=secure(request), httponly=True, samesite="lax")


def read(request: Request, secret: str) -> Session | None:
    """The session the request carries, if its signature holds and it has not lapsed."""
    raw = request.cookies.get(COOKIE, "")
    body, _, signature = raw.partition(".")
    if not body or not signature or not same(_sign(secret, body), signature):
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        found = Session(str(data["u"]), str(data["n"]), int(data["i"]), int(data["s"]))
    except (ValueError, KeyError, TypeError):
        return None
    now = clock.now().timestamp()
    if now - found.seen > IDLE.total_seconds() or now - found.signed_in > LONGEST.total_seconds():
        return None
    if found.seen > now + 60 or found.signed_in > now + 60:
        return None
    return found


def refresh(response: Response, request: Request, secret: str, found: Session) -> None:
    """Keep an active session alive: the idle clock starts again from this request, when it is
    the person's own (a page opened, a form sent), not a script's fetch in the background."""
    now = int(clock.now().timestamp())
    if now - found.seen >= _REFRESH_AFTER and _by_the_person(request):
        _write(response, request, secret, Session(found.user, found.name, found.signed_in, now))


def _by_the_person(request: Request) -> bool:
    """A navigation (or a client that does not say: not a browser's fetch)."""
    mode = request.headers.get("sec-fetch-mode")
    return mode is None or mode == "navigate"


def viewer(runtime: Runtime, found: Session) -> Viewer:
    """The person and their roles under the active policy (blocking: call off the event loop)."""
    directory: Directory | None = runtime.desk.directory
    with runtime.db.read() as session:
        doc = active_doc(session)
    if doc is None:
        return Viewer(found.user, found.name, ())
    return Viewer(
        found.user,
        found.name,
        tuple(roles(doc, found.user, directory)),
        lead=is_lead(doc, found.user, directory),
    )


def _write(response: Response, request: Request, secret: str, found: Session) -> None:
    data = {"u": found.user, "n": found.name, "i": found.signed_in, "s": found.seen}
    raw = json.dumps(data, separators=(",", ":")).encode()
    # Without base64's padding: a cookie value with `=` would be sent quoted.
    body = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    left = found.signed_in + int(LONGEST.total_seconds()) - int(clock.now().timestamp())
    response.set_cookie(
        COOKIE,
        f"{body}.{_sign(secret, body)}",
        max_age=max(left, 0),  # the browser forgets it when the session may last no longer
        httponly=True,
        samesite="lax",
        secure=secure(request),
        path="/",
    )


def secure(request: Request) -> bool:
    """Cookies of the desk are Secure when its public address (or this request) is HTTPS."""
    runtime: Runtime = request.app.state.runtime
    return runtime.settings.public_url.startswith("https://") or request.url.scheme == "https"


def _sign(secret: str, body: str) -> str:
    return keyed_hash(secret, "desk-session", body)
