"""The Slack emulator answers Sign in with Slack as Slack documents it: its discovery document has
the shape of Slack's own (`shared/slack/openid-configuration.json`) with the emulator's
addresses, `slack_sdk`'s own `openid_connect_token` / `openid_connect_userInfo` work against it,
ID tokens are RS256 under its key set, and codes are single-use, short-lived and bound to their
redirect URL and client."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import KeySet
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from refund_desk import clock
from refund_desk.demo.slack import SlackEmulator, User
from refund_desk.demo.slack.oidc import CODE_SECONDS, TEAM_ID, at_hash
from tests.slack_helpers import slack_specs

CALLBACK = "http://desk.test/desk/sign-in/callback"


@pytest.fixture(scope="module")
def slacks_own() -> dict[str, Any]:
    specs = slack_specs()
    if specs is None or not (specs / "openid-configuration.json").exists():
        pytest.skip("Slack's OpenID configuration (shared/slack/) is not beside the project")
    return dict(json.loads((specs / "openid-configuration.json").read_text()))


@pytest.fixture()
def slack() -> Iterator[SlackEmulator]:
    served = SlackEmulator.create(
        users=[User("U0LEAD1", "Lee Park", "lead"), User("U0FIN1", "Farah Nasser", "finance")],
        channels=[],
    )
    served.oidc.redirect_urls.append(CALLBACK)
    with served:
        yield served


@pytest.fixture()
def http(slack: SlackEmulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=slack.issuer + "/", follow_redirects=False) as client:
        yield client


def authorize(http: httpx.Client, slack: SlackEmulator, **over: str) -> httpx.Response:
    query = {
        "response_type": "code",
        "scope": "openid profile email",
        "client_id": slack.oidc.client_id,
        "redirect_uri": CALLBACK,
        "state": "st-123",
        "nonce": "n-456",
        **over,
    }
    return http.get("openid/connect/authorize?" + urlencode(query))


def consent(
    http: httpx.Client, slack: SlackEmulator, user: str = "U0LEAD1", **over: str
) -> dict[str, list[str]]:
    """Open the consent page, pick `user`, Allow: the query the browser brings back."""
    page = authorize(http, slack, **over)
    assert page.status_code == 200, page.text
    request_id = page.text.split('name="request" value="', 1)[1].split('"', 1)[0]
    back = http.post(
        "openid/connect/authorize", data={"request": request_id, "user": user, "decision": "allow"}
    )
    assert back.status_code == 302
    assert back.headers["location"].startswith(CALLBACK + "?")
    return parse_qs(urlsplit(back.headers["location"]).query)


def sdk(slack: SlackEmulator, token: str | None = None) -> WebClient:
    return WebClient(token=token, base_url=slack.api_url)


def test_the_discovery_document_is_slacks_with_the_emulators_addresses(
    slack: SlackEmulator, http: httpx.Client, slacks_own: dict[str, Any]
) -> None:
    ours = http.get(".well-known/openid-configuration").json()
    assert ours.keys() == slacks_own.keys()
    addresses = {k for k, v in slacks_own.items() if isinstance(v, str) and v.startswith("https:")}
    for key, value in slacks_own.items():
        if key in addresses:
            assert ours[key] == value.replace("https://slack.com", slack.issuer), key
        else:
            assert ours[key] == value, key
    keys = http.get(ours["jwks_uri"]).json()
    assert [k["kty"] for k in keys["keys"]] == ["RSA"]
    assert all("d" not in k for k in keys["keys"])  # the public half only


def test_slack_sdk_exchanges_a_code_and_reads_the_person(
    slack: SlackEmulator, http: httpx.Client
) -> None:
    back = consent(http, slack)
    assert back["state"] == ["st-123"]
    answer = sdk(slack).openid_connect_token(
        client_id=slack.oidc.client_id,
        client_secret=slack.oidc.client_secret,
        code=back["code"][0],
        redirect_uri=CALLBACK,
    )  # client_secret_basic: the SDK's own way
    assert answer["ok"] is True and answer["token_type"] == "Bearer"
    keys = KeySet.import_key_set(http.get("openid/connect/keys").json())
    token = jwt.decode(answer["id_token"], keys, algorithms=["RS256"])
    claims = token.claims
    assert token.header["alg"] == "RS256"
    assert claims["iss"] == slack.issuer and claims["aud"] == slack.oidc.client_id
    assert claims["sub"] == claims["https://slack.com/user_id"] == "U0LEAD1"
    assert claims["https://slack.com/team_id"] == TEAM_ID
    assert claims["nonce"] == "n-456" and claims["name"] == "Lee Park"
    assert claims["exp"] > claims["iat"] and claims["at_hash"] == at_hash(answer["access_token"])
    info = sdk(slack, answer["access_token"]).openid_connect_userInfo()
    assert info["sub"] == "U0LEAD1" and info["https://slack.com/team_id"] == TEAM_ID
    assert info["email"] == "lee.park@demo-store.example" and info["name"] == "Lee Park"


def test_client_secret_post_works_too_and_a_code_is_good_once(
    slack: SlackEmulator, http: httpx.Client
) -> None:
    code = consent(http, slack)["code"][0]
    form = {
        "client_id": slack.oidc.client_id,
        "client_secret": slack.oidc.client_secret,
        "code": code,
        "redirect_uri": CALLBACK,
        "grant_type": "authorization_code",
    }
    first = http.post("api/openid.connect.token", data=form).json()
    assert first["ok"] is True
    again = http.post("api/openid.connect.token", data=form).json()
    assert again == {"ok": False, "error": "invalid_code"}
    # the replay withdraws what the code gave the first time
    with pytest.raises(SlackApiError) as refused:
        sdk(slack, first["access_token"]).openid_connect_userInfo()
    assert refused.value.response["error"] == "invalid_auth"


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"client_secret": "wrong"}, "bad_client_secret"),
        ({"client_id": "1.2"}, "invalid_client_id"),
        ({"redirect_uri": "http://desk.test/elsewhere"}, "bad_redirect_uri"),
        ({"code": "1.2.made-up"}, "invalid_code"),
        ({"grant_type": "password"}, "invalid_grant_type"),
    ],
)
def test_the_token_endpoint_refuses_as_slack_does(
    slack: SlackEmulator, http: httpx.Client, change: dict[str, str], error: str
) -> None:
    code = consent(http, slack)["code"][0]
    form = {
        "client_id": slack.oidc.client_id,
        "client_secret": slack.oidc.client_secret,
        "code": code,
        "redirect_uri": CALLBACK,
        **change,
    }
    answer = http.post("api/openid.connect.token", data=form)
    assert answer.status_code == 200
    assert answer.json() == {"ok": False, "error": error}


def test_a_code_lapses(slack: SlackEmulator, http: httpx.Client) -> None:
    code = consent(http, slack)["code"][0]
    with clock.travel(timedelta(seconds=CODE_SECONDS + 1)), pytest.raises(SlackApiError) as late:
        sdk(slack).openid_connect_token(
            client_id=slack.oidc.client_id,
            client_secret=slack.oidc.client_secret,
            code=code,
            redirect_uri=CALLBACK,
        )
    assert late.value.response["error"] == "invalid_code"


def test_basic_auth_with_a_wrong_secret_is_refused(
    slack: SlackEmulator, http: httpx.Client
) -> None:
    code = consent(http, slack)["code"][0]
    basic = base64.b64encode(f"{slack.oidc.client_id}:nope".encode()).decode()
    answer = http.post(
        "api/openid.connect.token",
        data={"code": code, "redirect_uri": CALLBACK},
        headers={"Authorization": f"Basic {basic}"},
    ).json()
    assert answer == {"ok": False, "error": "bad_client_secret"}


def test_the_authorize_page_checks_the_app_and_passes_state_back(
    slack: SlackEmulator, http: httpx.Client
) -> None:
    assert authorize(http, slack, client_id="1.2").status_code == 400
    assert authorize(http, slack, redirect_uri="http://evil.test/cb").status_code == 400
    for over, error in (
        ({"response_type": "token"}, "unsupported_response_type"),
        ({"scope": "profile email"}, "invalid_scope"),
    ):
        back = authorize(http, slack, **over)
        assert back.status_code == 302
        query = parse_qs(urlsplit(back.headers["location"]).query)
        assert query == {"error": [error], "state": ["st-123"]}
    page = authorize(http, slack)
    assert "Lee Park" in page.text and "Farah Nasser" in page.text
    assert "<script" not in page.text and "style=" not in page.text
    request_id = page.text.split('name="request" value="', 1)[1].split('"', 1)[0]
    cancelled = http.post(
        "openid/connect/authorize", data={"request": request_id, "decision": "cancel"}
    )
    query = parse_qs(urlsplit(cancelled.headers["location"]).query)
    assert query == {"error": ["access_denied"], "state": ["st-123"]}


def test_userinfo_needs_a_token(slack: SlackEmulator, http: httpx.Client) -> None:
    assert http.post("api/openid.connect.userInfo").json() == {"ok": False, "error": "not_authed"}
    wrong = http.post("api/openid.connect.userInfo", headers={"Authorization": "Bearer xoxp-no"})
    assert wrong.json() == {"ok": False, "error": "invalid_auth"}
