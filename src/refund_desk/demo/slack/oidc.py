"""Sign in with Slack, as the emulator answers it: OpenID Connect as Slack documents it.

Slack serves its configuration at `https://slack.com/.well-known/openid-configuration` (the
document in `shared/slack/openid-configuration.json`); the emulator serves the same document under
its own root, `<base>sandbox/slack`, which is its issuer:

- `GET  .well-known/openid-configuration`: the discovery document, with the emulator's addresses;
- `GET  openid/connect/authorize`: the consent page. The app's client id, a redirect URL
  registered for it (exactly), `response_type=code` and a scope with `openid` are checked; the
  person picks which workspace user signs in (the demo's people are the workspace's users) and
  chooses Allow or Cancel (`POST`); the browser goes back to the redirect URL with `code` and
  the `state` it came with, or `error=access_denied`;
- `POST api/openid.connect.token`: the code for an access token and an ID token, the client
  authenticated by `client_secret_post` or `client_secret_basic`; a code is good once, for
  `CODE_SECONDS`, with the redirect URL it was issued for. A code used twice also revokes what
  it gave the first time. Errors as Slack answers them: `{"ok": false, "error": "invalid_code"}`;
- `GET|POST api/openid.connect.userInfo`: the person's claims for a bearer access token;
- `GET  openid/connect/keys`: the key set. ID tokens are RS256 JWTs signed with the emulator's
  own key (made on first use), with `iss`, `aud`, `sub`, `exp`, `iat`, `auth_time`, `nonce`,
  `at_hash` and Slack's claims (`https://slack.com/team_id`, `.../user_id`, name, email...).

Times come from `clock.now()`, so a test's `clock.travel` ages codes and tokens too.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import secrets
import threading
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from refund_desk import clock
from refund_desk.demo.slack.state import SlackError, User
from refund_desk.demo.slack.web_api import read_params

if TYPE_CHECKING:
    from joserfc.jwk import RSAKey

    from refund_desk.demo.slack.emulator import SlackEmulator

PREFIX = "/sandbox/slack"
TEAM_ID, TEAM_NAME, TEAM_DOMAIN = "T0DEMO", "Demo Store", "demo-store"
SCOPES = ("openid", "profile", "email")
CODE_SECONDS = 600  # Slack's codes last ten minutes
TOKEN_SECONDS = 3600  # an ID token's life (exp - iat)
PENDING_SECONDS = 900  # a consent page left open this long must be started again
MAX_PENDING = 500
MAX_CODES = 500
MAX_TOKENS = 2000


@dataclass
class Pending:
    """An authorization request waiting for the person's Allow or Cancel."""

    client_id: str
    redirect_uri: str
    scope: tuple[str, ...]
    state: str | None
    nonce: str | None
    team: str | None
    at: datetime


@dataclass
class Grant:
    """What a code (and then its access token) stands for."""

    client_id: str
    redirect_uri: str
    user: str
    scope: tuple[str, ...]
    nonce: str | None
    at: datetime
    used: bool = False
    access_token: str | None = None


@dataclass
class OpenIdProvider:
    """The app registered with the workspace for Sign in with Slack, and what is in flight."""

    client_id: str = field(
        default_factory=lambda: f"{secrets.randbelow(10**12)}.{secrets.randbelow(10**12)}"
    )
    client_secret: str = field(default_factory=lambda: secrets.token_hex(16))
    redirect_urls: list[str] = field(default_factory=list)  # the manifest's oauth_config
    pending: dict[str, Pending] = field(default_factory=dict)
    codes: dict[str, Grant] = field(default_factory=dict)
    tokens: dict[str, Grant] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _key: RSAKey | None = None

    @property
    def key(self) -> RSAKey:
        """The emulator's signing key, made on first use (a 2048-bit RSA key)."""
        from joserfc.jwk import RSAKey

        with self.lock:
            if self._key is None:
                kid = secrets.token_hex(8)
                self._key = RSAKey.generate_key(
                    2048, parameters={"kid": kid, "use": "sig", "alg": "RS256"}
                )
            return self._key

    def key_set(self) -> dict[str, Any]:
        from joserfc.jwk import KeySet

        return dict(KeySet([self.key]).as_dict(private=False))

    def sign(self, claims: dict[str, Any]) -> str:
        from joserfc import jwt

        return jwt.encode({"alg": "RS256", "kid": self.key.kid, "typ": "JWT"}, claims, self.key)


def issuer(request: Request) -> str:
    return f"{str(request.base_url).rstrip('/')}{PREFIX}"


def configuration(base: str) -> dict[str, Any]:
    """The discovery document: Slack's, with the emulator's addresses (`base` is its issuer)."""
    return {
        "issuer": base,
        "authorization_endpoint": f"{base}/openid/connect/authorize",
        "token_endpoint": f"{base}/api/openid.connect.token",
        "userinfo_endpoint": f"{base}/api/openid.connect.userInfo",
        "jwks_uri": f"{base}/openid/connect/keys",
        "scopes_supported": list(SCOPES),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "claims_supported": ["sub", "auth_time", "iss"],
        "claims_parameter_supported": False,
        "request_parameter_supported": False,
        "request_uri_parameter_supported": True,
        "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"],
    }


def email_of(user: User) -> str:
    """The demo person's work address: `Lee Park` -> `lee.park@demo-store.example`."""
    local = re.sub(r"[^a-z0-9]+", ".", user.name.lower()).strip(".") or user.id.lower()
    return f"{local}@{TEAM_DOMAIN}.example"


def user_claims(user: User, scope: tuple[str, ...], at: datetime) -> dict[str, Any]:
    """What Slack says of a person: always who and in which team; the name and picture with
    `profile`, the address with `email`."""
    claims: dict[str, Any] = {
        "sub": user.id,
        "https://slack.com/user_id": user.id,
        "https://slack.com/team_id": TEAM_ID,
    }
    if "email" in scope:
        claims.update(
            email=email_of(user), email_verified=True, date_email_verified=int(at.timestamp())
        )
    if "profile" in scope:
        given, _, family = user.name.partition(" ")
        claims.update(
            {
                "name": user.name,
                "picture": f"https://secure.gravatar.example/avatar/{user.id}-512.png",
                "given_name": given,
                "family_name": family,
                "locale": "en-US",
                "https://slack.com/team_name": TEAM_NAME,
                "https://slack.com/team_domain": TEAM_DOMAIN,
            }
        )
    return claims


def at_hash(access_token: str) -> str:
    """The left half of the access token's SHA-256, base64url without padding (OIDC 3.1.3.6)."""
    digest = hashlib.sha256(access_token.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest[:16]).rstrip(b"=").decode()


def _redirect(uri: str, params: dict[str, str | None]) -> RedirectResponse:
    parts = urlsplit(uri)
    query = "&".join(
        q for q in (parts.query, urlencode({k: v for k, v in params.items() if v is not None})) if q
    )
    return RedirectResponse(urlunsplit(parts._replace(query=query)), status_code=302)


def _expired(at: datetime, seconds: int) -> bool:
    return (clock.now() - at).total_seconds() > seconds


def _client(headers: Any, params: dict[str, Any]) -> tuple[str, str]:
    """The client id and secret, from a Basic `Authorization` header or the form."""
    auth = str(headers.get("authorization") or "")
    if auth.lower().startswith("basic "):
        try:
            decoded = base64.b64decode(auth[6:].strip(), validate=True).decode()
        except ValueError:
            raise SlackError("invalid_client_id") from None
        client_id, _, secret = decoded.partition(":")
        return client_id, secret
    return str(params.get("client_id") or ""), str(params.get("client_secret") or "")


def exchange(
    provider: OpenIdProvider,
    users: dict[str, User],
    base: str,
    headers: Any,
    params: dict[str, Any],
) -> dict[str, Any]:
    """`openid.connect.token`: a code for the person's tokens (raises SlackError)."""
    client_id, secret = _client(headers, params)
    if client_id != provider.client_id:
        raise SlackError("invalid_client_id")
    if not secrets.compare_digest(secret.encode(), provider.client_secret.encode()):
        raise SlackError("bad_client_secret")
    grant_type = str(params.get("grant_type") or "authorization_code")
    if grant_type != "authorization_code":
        raise SlackError("invalid_grant_type")
    code = str(params.get("code") or "")
    with provider.lock:
        grant = provider.codes.get(code)
        if grant is None or grant.client_id != client_id:
            raise SlackError("invalid_code")
        if grant.used:  # a code used twice: what it gave the first time is withdrawn too
            if grant.access_token is not None:
                provider.tokens.pop(grant.access_token, None)
            raise SlackError("invalid_code")
        grant.used = True
        if _expired(grant.at, CODE_SECONDS):
            raise SlackError("invalid_code")
        if str(params.get("redirect_uri") or "") != grant.redirect_uri:
            raise SlackError("bad_redirect_uri")
        user = users.get(grant.user)
        if user is None:
            raise SlackError("user_not_found")
        access_token = "xoxp-" + secrets.token_hex(24)
        grant.access_token = access_token
        provider.tokens[access_token] = grant
        _trim(provider.tokens, MAX_TOKENS)
    now = clock.now()
    claims = {
        "iss": base,
        "aud": client_id,
        "exp": int(now.timestamp()) + TOKEN_SECONDS,
        "iat": int(now.timestamp()),
        "auth_time": int(grant.at.timestamp()),
        **({"nonce": grant.nonce} if grant.nonce else {}),
        "at_hash": at_hash(access_token),
        **user_claims(user, grant.scope, now),
    }
    return {
        "access_token": access_token,
        "token_type": "Bearer",
        "id_token": provider.sign(claims),
    }


def userinfo(
    provider: OpenIdProvider, users: dict[str, User], headers: Any, params: dict[str, Any]
) -> dict[str, Any]:
    """`openid.connect.userInfo`: the claims for a bearer access token (raises SlackError)."""
    auth = str(headers.get("authorization") or "")
    token = (
        auth[7:].strip() if auth.lower().startswith("bearer ") else str(params.get("token") or "")
    )
    if not token:
        raise SlackError("not_authed")
    with provider.lock:
        grant = provider.tokens.get(token)
    if grant is None:
        raise SlackError("invalid_auth")
    user = users.get(grant.user)
    if user is None:
        raise SlackError("user_not_found")
    return user_claims(user, grant.scope, clock.now())


def _trim(items: dict[str, Any], most: int) -> None:
    while len(items) > most:
        items.pop(next(iter(items)))


# ---------------------------------------------------------------- the consent page


def consent_page(
    emulator: SlackEmulator, request_id: str, pending: Pending, error: str = ""
) -> HTMLResponse:
    """Which workspace user signs in, and Allow or Cancel: one form, no script."""
    host = urlsplit(pending.redirect_uri).netloc
    people = "\n".join(
        '<li><input type="radio" name="user" id="u-{id}" value="{id}"{req}>'
        ' <label for="u-{id}">{name} <span class="role">{role}</span></label></li>'.format(
            id=html.escape(u.id),
            req=" required" if n == 0 else "",
            name=html.escape(u.name),
            role=html.escape(u.role),
        )
        for n, u in enumerate(emulator.workspace.users.values())
    )
    asked = ", ".join(s for s in pending.scope if s in SCOPES)
    alert = f'<p class="error" role="alert">{html.escape(error)}</p>' if error else ""
    body = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in to {TEAM_NAME} · Slack sandbox</title>
<link rel="stylesheet" href="{PREFIX}/openid/connect/consent.css">
</head>
<body>
<main>
<h1>Sign in to {TEAM_NAME}</h1>
<p>The app at <strong>{html.escape(host)}</strong> asks to know who you are in the
{TEAM_NAME} workspace ({html.escape(asked)}).</p>
{alert}
<form method="post" action="{PREFIX}/openid/connect/authorize">
<input type="hidden" name="request" value="{html.escape(request_id)}">
<fieldset>
<legend>Sign in as</legend>
<ul class="people">
{people}
</ul>
</fieldset>
<p class="choices">
<button type="submit" name="decision" value="allow">Allow</button>
<button type="submit" name="decision" value="cancel" formnovalidate>Cancel</button>
</p>
</form>
<p class="note">This is the demo's Slack sandbox: pick any of the workspace's people.</p>
</main>
</body>
</html>
"""
    return HTMLResponse(body, headers={"Cache-Control": "no-store"})


def _error_page(message: str) -> HTMLResponse:
    body = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Sign in refused · Slack sandbox</title>
<link rel="stylesheet" href="{PREFIX}/openid/connect/consent.css">
</head>
<body>
<main>
<h1>Sign in refused</h1>
<p>{html.escape(message)}</p>
</main>
</body>
</html>
"""
    return HTMLResponse(body, status_code=400, headers={"Cache-Control": "no-store"})


def router(emulator: SlackEmulator) -> APIRouter:
    provider = emulator.oidc
    users = emulator.workspace.users
    api = APIRouter(prefix=PREFIX, include_in_schema=False)

    @api.get("/.well-known/openid-configuration")
    async def discovery(request: Request) -> JSONResponse:
        return JSONResponse(configuration(issuer(request)))

    @api.get("/openid/connect/keys")
    async def keys() -> JSONResponse:
        return JSONResponse(provider.key_set())

    @api.get("/openid/connect/consent.css")
    async def consent_css() -> Response:
        css = resources.files("refund_desk.demo.slack").joinpath("static", "consent.css")
        return Response(css.read_text(), media_type="text/css")

    @api.get("/openid/connect/authorize")
    async def authorize(request: Request) -> Response:
        q = request.query_params
        client_id, redirect_uri = q.get("client_id", ""), q.get("redirect_uri", "")
        if client_id != provider.client_id:
            return _error_page("No app has this client_id in this workspace (invalid_client_id).")
        if redirect_uri not in provider.redirect_urls:
            return _error_page(
                "The redirect_uri is not one of the app's redirect URLs (bad_redirect_uri)."
            )
        state = q.get("state")
        if q.get("response_type") != "code":
            return _redirect(redirect_uri, {"error": "unsupported_response_type", "state": state})
        scope = tuple(q.get("scope", "").replace(",", " ").split())
        if "openid" not in scope:
            return _redirect(redirect_uri, {"error": "invalid_scope", "state": state})
        if any(s not in SCOPES for s in scope):
            return _redirect(redirect_uri, {"error": "invalid_scope", "state": state})
        pending = Pending(
            client_id, redirect_uri, scope, state, q.get("nonce"), q.get("team"), clock.now()
        )
        request_id = secrets.token_urlsafe(18)
        with provider.lock:
            provider.pending[request_id] = pending
            _trim(provider.pending, MAX_PENDING)
        return consent_page(emulator, request_id, pending)

    @api.post("/openid/connect/authorize")
    async def decide(request: Request) -> Response:
        form = await read_params(request, json_body=False)
        request_id = str(form.get("request") or "")
        with provider.lock:
            pending = provider.pending.get(request_id)
        if pending is None or _expired(pending.at, PENDING_SECONDS):
            return _error_page("This sign-in page has expired: start again from the app.")
        if form.get("decision") != "allow":
            with provider.lock:
                provider.pending.pop(request_id, None)
            return _redirect(
                pending.redirect_uri, {"error": "access_denied", "state": pending.state}
            )
        user = str(form.get("user") or "")
        if user not in users:
            return consent_page(emulator, request_id, pending, "Pick who signs in.")
        code = f"{secrets.randbelow(10**12)}.{secrets.randbelow(10**12)}.{secrets.token_hex(16)}"
        with provider.lock:
            provider.pending.pop(request_id, None)
            provider.codes[code] = Grant(
                pending.client_id,
                pending.redirect_uri,
                user,
                pending.scope,
                pending.nonce,
                clock.now(),
            )
            _trim(provider.codes, MAX_CODES)
        return _redirect(pending.redirect_uri, {"code": code, "state": pending.state})

    @api.api_route("/api/openid.connect.token", methods=["POST"])
    async def token(request: Request) -> JSONResponse:
        try:
            params = await read_params(request, json_body=False)
            answer = exchange(provider, users, issuer(request), request.headers, params)
        except SlackError as exc:
            return JSONResponse({"ok": False, "error": exc.code})
        return JSONResponse({"ok": True, **answer}, headers={"Cache-Control": "no-store"})

    @api.api_route("/api/openid.connect.userInfo", methods=["GET", "POST"])
    async def user_info(request: Request) -> JSONResponse:
        try:
            params = await read_params(request, json_body=False)
            answer = userinfo(provider, users, request.headers, params)
        except SlackError as exc:
            return JSONResponse({"ok": False, "error": exc.code})
        return JSONResponse({"ok": True, **answer}, headers={"Cache-Control": "no-store"})

    return api
