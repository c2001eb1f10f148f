"""Sign in with Slack, the desk's side: an OpenID Connect client built on Authlib, over httpx.

Slack's configuration is discovered from `<issuer>/.well-known/openid-configuration` (its
`issuer` must be the one configured) and kept for an hour; the key set is kept until an ID token
names a key it does not hold (Slack rotated its key), then read again, at most once a minute.
Authlib makes the authorization URL and the code exchange (`client_secret_post`) and checks the
ID token's claims; joserfc checks its RS256 signature against the key set. An ID token is taken
only with the configured issuer, this app as its audience, not expired, the nonce this browser
was given, an `at_hash` that matches the access token, and, when `SLACK_TEAM_ID` is set, that
team. Every call is blocking: the routes that use this are plain `def`s.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import httpx
from authlib.oauth2.auth import ClientAuth
from authlib.oauth2.base import OAuth2Error
from authlib.oauth2.client import OAuth2Client
from authlib.oidc.core import CodeIDToken
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet

from refund_desk import clock
from refund_desk.settings import Settings

log = logging.getLogger(__name__)

SCOPE = "openid profile email"
TIMEOUT = 10.0
DISCOVERY_SECONDS = 3600.0
KEYS_AGAIN_AFTER = 60.0  # an unknown key id reads the key set again, at most this often
LEEWAY = 60  # seconds of clock difference allowed on exp and iat
TEAM_CLAIM = "https://slack.com/team_id"
USER_CLAIM = "https://slack.com/user_id"
_SLACK_ID = re.compile(r"^[UW][A-Z0-9]{2,20}$")


class SignInFailed(Exception):
    """Slack did not vouch for this person, or not in a way the desk can trust; the message
    is for the person (no secret, no token)."""


class SlackUnreachable(Exception):
    """Slack's sign-in could not be reached or answered nonsense."""


@dataclass(frozen=True)
class Identity:
    """Whom Slack vouched for."""

    user: str
    team: str
    name: str
    email: str | None


class _ClientAuth(httpx.Auth, ClientAuth):
    """Authlib's client authentication (`client_secret_post`/`_basic`) as an httpx auth flow."""

    requires_request_body = True

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
        url, headers, body = self.prepare(
            request.method, str(request.url), headers, request.content.decode()
        )
        yield httpx.Request(request.method, url, headers=headers, content=body)


class _OAuth2Client(OAuth2Client):
    client_auth_class = _ClientAuth


@dataclass(frozen=True)
class _Config:
    issuer: str
    client_id: str
    client_secret: str
    team: str | None


def configured(settings: Settings) -> bool:
    return bool(settings.slack_client_id and settings.slack_client_secret)


class SlackSignIn:
    """One per app: Slack's configuration and keys, read when first needed and kept."""

    def __init__(self, settings: Settings, http: httpx.Client | None = None) -> None:
        if not configured(settings):
            raise ValueError("SLACK_CLIENT_ID and SLACK_CLIENT_SECRET are needed")
        assert settings.slack_client_id is not None and settings.slack_client_secret is not None
        self.config = _Config(
            settings.slack_oidc_issuer.rstrip("/"),
            settings.slack_client_id,
            settings.slack_client_secret.get_secret_value(),
            settings.slack_team_id or None,
        )
        self.http = http or httpx.Client(timeout=TIMEOUT, follow_redirects=False)
        self._lock = threading.Lock()
        self._metadata: tuple[float, dict[str, Any]] | None = None
        self._keys: tuple[float, KeySet] | None = None

    # ------------------------------------------------------------ Slack's configuration

    def metadata(self) -> dict[str, Any]:
        with self._lock:
            if (
                self._metadata is not None
                and time.monotonic() - self._metadata[0] < DISCOVERY_SECONDS
            ):
                return self._metadata[1]
        found = self._get_json(f"{self.config.issuer}/.well-known/openid-configuration")
        if found.get("issuer", "").rstrip("/") != self.config.issuer:
            raise SlackUnreachable(
                f"the OpenID configuration names issuer {found.get('issuer')!r}, "
                f"not {self.config.issuer!r} (SLACK_OIDC_ISSUER)"
            )
        needed = ("authorization_endpoint", "token_endpoint", "jwks_uri")
        if any(not isinstance(found.get(k), str) for k in needed):
            raise SlackUnreachable("the OpenID configuration lacks an endpoint")
        with self._lock:
            self._metadata = (time.monotonic(), found)
        return found

    def key_set(self, *, again: bool = False) -> KeySet:
        with self._lock:
            kept = self._keys
        if kept is not None and not (again and time.monotonic() - kept[0] > KEYS_AGAIN_AFTER):
            return kept[1]
        try:
            keys = KeySet.import_key_set(self._get_json(self.metadata()["jwks_uri"]))  # type: ignore[arg-type]
        except (JoseError, ValueError, TypeError) as exc:
            raise SlackUnreachable(f"Slack's key set could not be read ({exc})") from None
        with self._lock:
            self._keys = (time.monotonic(), keys)
        return keys

    def _get_json(self, url: str) -> dict[str, Any]:
        try:
            answer = self.http.get(url, headers={"Accept": "application/json"})
            answer.raise_for_status()
            found = answer.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise SlackUnreachable(f"{url} could not be read ({type(exc).__name__})") from None
        if not isinstance(found, dict):
            raise SlackUnreachable(f"{url} did not answer a JSON object")
        return found

    # ------------------------------------------------------------ the flow

    def _client(self, redirect_uri: str) -> _OAuth2Client:
        return _OAuth2Client(
            session=self.http,
            client_id=self.config.client_id,
            client_secret=self.config.client_secret,
            token_endpoint_auth_method="client_secret_post",
            scope=SCOPE,
            redirect_uri=redirect_uri,
        )

    def authorization_url(self, redirect_uri: str, state: str, nonce: str) -> str:
        """Slack's authorize page for this browser's `state` and `nonce` (and the workspace,
        when one is configured, so Slack offers that one)."""
        extra = {"team": self.config.team} if self.config.team else {}
        url, _ = self._client(redirect_uri).create_authorization_url(
            self.metadata()["authorization_endpoint"], state=state, nonce=nonce, **extra
        )
        return str(url)

    def identify(self, code: str, redirect_uri: str, nonce: str) -> Identity:
        """The person a code stands for: the code exchanged once, the ID token checked."""
        endpoint = self.metadata()["token_endpoint"]
        try:
            token = self._client(redirect_uri).fetch_token(
                endpoint, code=code, grant_type="authorization_code"
            )
        except OAuth2Error as exc:
            raise SignInFailed(f"Slack did not accept the sign-in ({exc.error}).") from None
        except (httpx.HTTPError, ValueError) as exc:
            raise SlackUnreachable(f"the token endpoint failed ({type(exc).__name__})") from None
        if token.get("ok") is False or not token.get("id_token") or not token.get("access_token"):
            raise SignInFailed(f"Slack did not accept the sign-in ({token.get('error')}).")
        claims = self.claims(str(token["id_token"]), nonce, str(token["access_token"]))
        user = str(claims.get(USER_CLAIM) or claims.get("sub") or "")
        team = str(claims.get(TEAM_CLAIM) or "")
        if not _SLACK_ID.match(user) or claims.get("sub") != user:
            raise SignInFailed("Slack's answer does not name a Slack user.")
        if self.config.team is not None and team != self.config.team:
            raise SignInFailed("You signed in to another Slack workspace than this desk's.")
        name = str(claims.get("name") or user)[:200]
        email = claims.get("email")
        return Identity(user, team, name, str(email) if email else None)

    def claims(self, id_token: str, nonce: str, access_token: str | None = None) -> CodeIDToken:
        """The ID token's claims, once its signature (RS256, Slack's key set) and claims
        (iss, aud, exp, iat, nonce, at_hash) hold; SignInFailed otherwise."""
        try:
            try:
                token = jwt.decode(id_token, self.key_set(), algorithms=["RS256"])
            except InvalidKeyIdError:
                token = jwt.decode(id_token, self.key_set(again=True), algorithms=["RS256"])
        except (JoseError, ValueError, TypeError) as exc:
            raise SignInFailed(
                f"Slack's answer was not signed by Slack ({type(exc).__name__})."
            ) from None
        options: dict[str, Any] = {
            "iss": {"essential": True, "value": self.config.issuer},
            "aud": {"essential": True, "value": self.config.client_id},
            "exp": {"essential": True},
            "nonce": {"essential": True, "value": nonce},
        }
        params = {"nonce": nonce, "client_id": self.config.client_id}
        if access_token is not None:
            params["access_token"] = access_token
        claims = CodeIDToken(token.claims, token.header, options, params)
        try:
            claims.validate(now=int(clock.now().timestamp()), leeway=LEEWAY)
        except (JoseError, ValueError, TypeError) as exc:
            raise SignInFailed(f"Slack's answer did not hold ({exc}).") from None
        return claims
