"""Every desk page answers a signed-in reader, sends the page headers, and keeps others out."""

from __future__ import annotations

from tests.helpers import Harness
from tests.web.desk.conftest import LEAD, NOBODY, browser


def test_the_queue_answers_a_reader_with_the_page_headers(desk: Harness) -> None:
    page = browser(desk, LEAD).get("/desk")
    assert page.status_code == 200, page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["referrer-policy"]


def test_without_a_session_the_desk_sends_you_to_sign_in(desk: Harness) -> None:
    page = desk.client.get("/desk?status=denied", follow_redirects=False)
    assert page.status_code == 303
    assert page.headers["location"] == "/desk/sign-in?next=%2Fdesk%3Fstatus%3Ddenied"


def test_a_person_with_no_role_sees_only_that(desk: Harness) -> None:
    page = browser(desk, NOBODY).get("/desk")
    assert page.status_code == 403
    assert "names you in none of" in page.text


def test_head_answers_as_get_without_a_body(desk: Harness) -> None:
    got = desk.client.get("/request")
    head = desk.client.head("/request")
    assert head.status_code == got.status_code == 200
    assert head.content == b""
    assert head.headers["content-security-policy"] == got.headers["content-security-policy"]


def test_the_api_docs_may_load_their_viewer_and_nothing_else_may(desk: Harness) -> None:
    docs = desk.client.get("/docs").headers["content-security-policy"]
    assert "https://cdn.jsdelivr.net" in docs and "frame-ancestors 'none'" in docs
    form = desk.client.get("/request").headers["content-security-policy"]
    assert "cdn" not in form and "unsafe-inline" not in form
