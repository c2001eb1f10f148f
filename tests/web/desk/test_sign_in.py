"""Sign in with Slack, the whole way: the desk (its TestClient) sends the browser to the Slack
emulator served on loopback, a real HTTP client picks a person on its consent page, and the desk
exchanges the code and checks the ID token over HTTP against the emulator. A forged ID token
(another key, audience, issuer or team, expired, another nonce), a replayed code, a wrong or
missing state, a person with no role, a missing CSRF token and an idle session are each refused
with nothing changed: no session, no audit record, no case moved."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient
from joserfc import jwt
from joserfc.jwk import OctKey, RSAKey

from refund_desk import clock
from refund_desk.demo.slack import SlackEmulator, User
from refund_desk.demo.slack.oidc import TEAM_ID
from refund_desk.web.desk import session
from refund_desk.web.desk.auth import STARTED, local_next
from tests.conftest import make_runtime
from tests.helpers import Harness, published
from tests.web.desk.conftest import FINANCE, LEAD, NOBODY, browser

ROOT = Path(__file__).resolve().parents[3]
CALLBACK = "http://127.0.0.1:8000/desk/sign-in/callback"  # the desk's public address + path
PEOPLE = {LEAD: "Lee Park", FINANCE: "Farah Nasser", NOBODY: "Nora Body"}


@pytest.fixture()
def slack() -> Iterator[SlackEmulator]:
    served = SlackEmulator.create(
        users=[User(uid, name, "") for uid, name in PEOPLE.items()], channels=[]
    )
    served.oidc.redirect_urls.append(CALLBACK)
    with served:
        yield served


@pytest.fixture()
def desk(sqlite_url: str, slack: SlackEmulator) -> Iterator[Harness]:
    """The acme desk with Sign in with Slack pointed at the emulator, for its workspace."""
    runtime = make_runtime(
        sqlite_url,
        SLACK_CLIENT_ID=slack.oidc.client_id,
        SLACK_CLIENT_SECRET=slack.oidc.client_secret,
        SLACK_OIDC_ISSUER=slack.issuer,
        SLACK_TEAM_ID=TEAM_ID,
    )
    yield published(runtime)
    runtime.db.dispose()


class Person:
    """One person's browser: the desk's pages, and Slack's pages over real HTTP."""

    def __init__(self, desk: Harness, slack: SlackEmulator) -> None:
        self.desk = TestClient(desk.client.app, follow_redirects=False)
        self.slack = httpx.Client(follow_redirects=False)
        self.emulator = slack

    def start(self, next_url: str = "/desk") -> str:
        """Press "Sign in with Slack": the authorize page's address."""
        sign_in = self.desk.get(f"/desk/sign-in?next={quote(next_url, safe='')}")
        assert sign_in.status_code == 200 and "Sign in with Slack" in sign_in.text
        start = sign_in.text.split('class="button" href="', 1)[1].split('"', 1)[0]
        off = self.desk.get(start.replace("&amp;", "&"))
        assert off.status_code == 303, off.text
        assert off.headers["location"].startswith(self.emulator.issuer + "/openid/connect/")
        assert STARTED in off.headers["set-cookie"] and "HttpOnly" in off.headers["set-cookie"]
        return off.headers["location"]

    def consent(self, authorize: str, user: str, decision: str = "allow") -> str:
        """Pick `user` on Slack's consent page: where Slack sends the browser back (the path)."""
        page = self.slack.get(authorize)
        assert page.status_code == 200, page.text
        request_id = page.text.split('name="request" value="', 1)[1].split('"', 1)[0]
        back = self.slack.post(
            f"{self.emulator.issuer}/openid/connect/authorize",
            data={"request": request_id, "user": user, "decision": decision},
        )
        assert back.status_code == 302
        assert back.headers["location"].startswith(CALLBACK + "?")
        parts = urlsplit(back.headers["location"])
        return f"{parts.path}?{parts.query}"

    def sign_in(self, user: str, next_url: str = "/desk") -> httpx.Response:
        return self.desk.get(self.consent(self.start(next_url), user))

    def has_session(self) -> bool:
        return self.desk.get("/desk").status_code != 303


def waiting_case(desk: Harness) -> None:
    """A case waiting for a person: a refused sign-in must not move it."""
    filed = desk.post(desk.request(desk.payment("120.00"), "120.00"))
    assert filed.status_code in (200, 201, 202), filed.text
    desk.sweep()


def no_session_set(answer: httpx.Response) -> bool:
    return session.COOKIE not in answer.headers.get("set-cookie", "")


def test_a_person_signs_in_through_slacks_consent_page(desk: Harness, slack: SlackEmulator) -> None:
    person = Person(desk, slack)
    unsigned = person.desk.get("/desk")
    assert unsigned.status_code == 303
    assert unsigned.headers["location"] == "/desk/sign-in?next=%2Fdesk"
    authorize = person.start("/desk?since=1")
    query = parse_qs(urlsplit(authorize).query)
    assert query["scope"] == ["openid profile email"] and query["response_type"] == ["code"]
    assert query["client_id"] == [slack.oidc.client_id] and query["redirect_uri"] == [CALLBACK]
    assert query["team"] == [TEAM_ID] and query["state"] and query["nonce"]
    before = desk.counts()
    back = person.desk.get(person.consent(authorize, LEAD))
    assert back.status_code == 303, back.text
    assert back.headers["location"] == "/desk?since=1"
    cookie = back.headers["set-cookie"]
    assert session.COOKIE in cookie and "HttpOnly" in cookie and "SameSite=lax" in cookie
    queue = person.desk.get("/desk")
    assert queue.status_code == 200 and "Lee Park" in queue.text
    assert desk.counts() == before  # signing in writes nothing to the record


def test_cancel_on_slacks_page_signs_nobody_in(desk: Harness, slack: SlackEmulator) -> None:
    person = Person(desk, slack)
    back = person.desk.get(person.consent(person.start(), LEAD, "cancel"))
    assert back.status_code == 200 and "You cancelled" in back.text
    assert no_session_set(back) and not person.has_session()


def test_only_a_local_desk_path_is_followed() -> None:
    assert local_next("/desk/cases?status=denied") == "/desk/cases?status=denied"
    for elsewhere in (
        "https://evil.test/desk",
        "//evil.test/desk",
        "/\\evil.test",
        "/desk\\@evil.test",
        "/desktop",
        "/request",
        "/desk/../request",
        "javascript:alert(1)",
        "/desk/sign-out",
        "/desk\r\nSet-Cookie: x=1",
        "",
    ):
        assert local_next(elsewhere) == "/desk", elsewhere


def test_the_next_of_another_site_goes_to_the_queue(desk: Harness, slack: SlackEmulator) -> None:
    person = Person(desk, slack)
    back = person.sign_in(LEAD, "https://evil.test/steal")
    assert back.status_code == 303 and back.headers["location"] == "/desk"


# ---------------------------------------------------------------- forged ID tokens


Forge = Callable[[dict[str, Any]], str]


def resigned(slack: SlackEmulator, **change: Any) -> Forge:
    """The emulator's own key, the claims changed."""
    sign = slack.oidc.sign
    return lambda claims: sign({**claims, **change})


def without(slack: SlackEmulator, claim: str) -> Forge:
    sign = slack.oidc.sign
    return lambda claims: sign({k: v for k, v in claims.items() if k != claim})


def other_key(slack: SlackEmulator, same_kid: bool) -> Forge:
    kid = slack.oidc.key.kid if same_kid else "forger"
    key = RSAKey.generate_key(2048, parameters={"kid": kid})
    return lambda claims: jwt.encode({"alg": "RS256", "kid": kid}, claims, key)


def hmac_with_the_client_secret(slack: SlackEmulator) -> Forge:
    key = OctKey.import_key(slack.oidc.client_secret.encode() * 4)
    return lambda claims: jwt.encode({"alg": "HS256", "kid": slack.oidc.key.kid}, claims, key)


FORGERIES: dict[str, Callable[[SlackEmulator], Forge]] = {
    "another key under Slack's key id": lambda s: other_key(s, True),
    "another key of its own": lambda s: other_key(s, False),
    "HS256 with the client secret": hmac_with_the_client_secret,
    "another audience": lambda s: resigned(s, aud="9999.8888"),
    "another issuer": lambda s: resigned(s, iss="https://evil.test"),
    "expired": lambda s: resigned(
        s, exp=int(clock.now().timestamp()) - 3600, iat=int(clock.now().timestamp()) - 7200
    ),
    "another nonce": lambda s: resigned(s, nonce="not-this-browsers"),
    "no nonce": lambda s: without(s, "nonce"),
    "another workspace": lambda s: resigned(s, **{"https://slack.com/team_id": "T0OTHER"}),
    "another access token": lambda s: resigned(s, at_hash="AAAAAAAAAAAAAAAAAAAAAA"),
    "sub is not the user": lambda s: resigned(s, sub="U0MGR1"),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_forged_id_token_signs_nobody_in(
    desk: Harness, slack: SlackEmulator, monkeypatch: pytest.MonkeyPatch, forgery: str
) -> None:
    waiting_case(desk)
    before = desk.counts()
    monkeypatch.setattr(slack.oidc, "sign", FORGERIES[forgery](slack))
    person = Person(desk, slack)
    back = person.sign_in(LEAD)
    assert back.status_code == 400, back.text
    assert "Nothing was changed" in back.text
    assert no_session_set(back) and not person.has_session()
    assert desk.counts() == before


# ---------------------------------------------------------------- state, codes, roles


def test_a_replayed_code_signs_nobody_in(desk: Harness, slack: SlackEmulator) -> None:
    person = Person(desk, slack)
    callback = person.consent(person.start(), LEAD)
    assert person.desk.get(callback).status_code == 303  # signed in, once
    again = person.desk.get(callback)  # the same answer again: its state is spent
    assert again.status_code == 400 and no_session_set(again)
    # an attacker's browser with a sign-in of its own started, and the stolen code
    thief = Person(desk, slack)
    state = parse_qs(urlsplit(thief.start()).query)["state"][0]
    code = parse_qs(urlsplit(callback).query)["code"][0]
    stolen = thief.desk.get(f"/desk/sign-in/callback?code={code}&state={state}")
    assert stolen.status_code == 400 and "invalid_code" in stolen.text
    assert no_session_set(stolen) and not thief.has_session()


@pytest.mark.parametrize("state", ["wrong", "", None])
def test_a_wrong_or_missing_state_signs_nobody_in(
    desk: Harness, slack: SlackEmulator, state: str | None
) -> None:
    person = Person(desk, slack)
    callback = person.consent(person.start(), LEAD)
    query = parse_qs(urlsplit(callback).query)
    given = "" if state is None else f"&state={state}"
    back = person.desk.get(f"/desk/sign-in/callback?code={query['code'][0]}{given}")
    assert back.status_code == 400 and "did not start in this browser" in back.text
    assert no_session_set(back) and not person.has_session()


def test_an_answer_to_another_browsers_sign_in_signs_nobody_in(
    desk: Harness, slack: SlackEmulator
) -> None:
    """Login CSRF: the attacker's own code and state, opened in the victim's browser."""
    attacker = Person(desk, slack)
    callback = attacker.consent(attacker.start(), NOBODY)
    victim = Person(desk, slack)
    back = victim.desk.get(callback)
    assert back.status_code == 400 and no_session_set(back) and not victim.has_session()


def test_a_sign_in_started_long_ago_is_refused(desk: Harness, slack: SlackEmulator) -> None:
    person = Person(desk, slack)
    authorize = person.start()
    with clock.travel(timedelta(minutes=11)):
        back = person.desk.get(person.consent(authorize, LEAD))
    assert back.status_code == 400 and no_session_set(back)


def test_a_person_with_no_role_gets_no_session(desk: Harness, slack: SlackEmulator) -> None:
    waiting_case(desk)
    before = desk.counts()
    person = Person(desk, slack)
    back = person.sign_in(NOBODY)
    assert back.status_code == 403
    assert "names you in none of its roles" in back.text and "Nora Body" in back.text
    assert no_session_set(back) and not person.has_session()
    assert desk.counts() == before


def test_without_the_settings_the_page_says_how_to_set_it_up(sqlite_url: str) -> None:
    runtime = make_runtime(sqlite_url)
    try:
        client = TestClient(published(runtime).client.app, follow_redirects=False)
        page = client.get("/desk/sign-in")
        assert page.status_code == 200
        for words in ("SLACK_CLIENT_ID", "SLACK_CLIENT_SECRET", "/desk/sign-in/callback"):
            assert words in page.text
        assert client.get("/desk/sign-in/slack").headers["location"] == "/desk/sign-in"
    finally:
        runtime.db.dispose()


# ---------------------------------------------------------------- the session


def csrf_of(page: httpx.Response) -> str:
    return page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]


def test_sign_out_needs_its_csrf_token(desk: Harness, slack: SlackEmulator) -> None:
    person = Person(desk, slack)
    person.sign_in(FINANCE)
    queue = person.desk.get("/desk")
    for token in ("", "1.2.3", csrf_of(queue)[:-2] + "00"):
        refused = person.desk.post("/desk/sign-out", data={"csrf": token})
        assert refused.status_code == 403 and person.has_session()
    other = browser(desk, LEAD)  # another person's token does not sign this one out
    stolen = csrf_of(other.get("/desk"))
    assert person.desk.post("/desk/sign-out", data={"csrf": stolen}).status_code == 403
    assert person.has_session()
    out = person.desk.post("/desk/sign-out", data={"csrf": csrf_of(person.desk.get("/desk"))})
    assert out.status_code == 303 and not person.has_session()


def test_an_idle_session_lapses(desk: Harness) -> None:
    lead = browser(desk, LEAD)
    queue = lead.get("/desk")
    token = csrf_of(queue)
    with clock.travel(session.IDLE + timedelta(minutes=1)):
        assert lead.get("/desk").status_code == 303
        refused = lead.post("/desk/sign-out", data={"csrf": token})
        assert refused.status_code == 401 and "nothing was changed" in refused.text


def test_the_pages_script_does_not_keep_an_absent_person_signed_in(desk: Harness) -> None:
    lead = browser(desk, LEAD)
    fetch = {"Sec-Fetch-Mode": "cors"}
    with clock.travel(timedelta(minutes=20)):
        assert lead.get("/desk", headers=fetch).status_code == 200  # the page refetched
    with clock.travel(timedelta(minutes=35)):
        assert lead.get("/desk", headers=fetch).status_code == 303
    lead = browser(desk, LEAD)
    with clock.travel(timedelta(minutes=20)):
        assert lead.get("/desk", headers={"Sec-Fetch-Mode": "navigate"}).status_code == 200
    with clock.travel(timedelta(minutes=35)):
        assert lead.get("/desk").status_code == 200  # the person was there at 20 minutes


def test_no_session_outlives_its_cap(desk: Harness) -> None:
    lead = browser(desk, LEAD)
    seen = timedelta(0)
    while seen < session.LONGEST - timedelta(minutes=20):
        seen += timedelta(minutes=20)
        with clock.travel(seen):
            assert lead.get("/desk").status_code == 200
    with clock.travel(session.LONGEST + timedelta(minutes=1)):
        assert lead.get("/desk").status_code == 303


def test_the_manifest_registers_the_redirect_url_and_the_user_scopes() -> None:
    for name in ("manifest.yml", "manifest.socket-mode.yml"):
        manifest = yaml.safe_load((ROOT / name).read_text())
        oauth = manifest["oauth_config"]
        assert "https://refund-desk.example.com/desk/sign-in/callback" in oauth["redirect_urls"]
        assert oauth["scopes"]["user"] == ["openid", "profile", "email"]
