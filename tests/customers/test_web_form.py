"""The customer web form: verified against the system of record, decided like the API."""

from __future__ import annotations

import hashlib
import re

from tests.customers.conftest import PNG, Channels
from tests.helpers import CUSTOMER


def _fields(payment: str, **extra: str) -> dict[str, str]:
    return {
        "email": CUSTOMER,
        "payment": payment,
        "amount": "20.00",
        "reason": "damaged",
        "message": "The vase arrived broken, shattered in the box.",
        **extra,
    }


def test_form_is_accessible_and_needs_no_javascript(channels: Channels) -> None:
    page = channels.client.get("/request")
    assert page.status_code == 200
    html = page.text
    assert "<script" not in html
    assert 'enctype="multipart/form-data"' in html
    for name in ("email", "payment", "amount", "reason", "message", "evidence"):
        assert f'<label for="{name}">' in html and f'id="{name}"' in html
    assert 'aria-describedby="payment-hint"' in html
    assert 'name="csrf_token"' in html
    assert "rd_form" in page.headers["set-cookie"]
    assert "httponly" in page.headers["set-cookie"].lower()


def test_matching_request_becomes_a_case_decided_like_the_api(channels: Channels) -> None:
    payment = channels.payment("30.00")
    response = channels.submit_form(_fields(payment), files=[("vase.png", PNG)])
    assert response.status_code == 201, response.text
    case_id = response.headers["X-Refund-Desk-Case"]
    assert f'id="case-reference">{case_id}<' in response.text
    view = channels.get(case_id)
    assert view["source"] == "web_form" and view["status"] == "refunded"
    assert view["decision"]["rule"] == "damaged-small"
    assert view["customer_verified"] is True
    assert len(channels.refunds_at_processor(payment)) == 1
    sha = hashlib.sha256(PNG).hexdigest()
    [item] = view["evidence"]
    assert item["sha256"] == sha and item["content_type"] == "image/png"
    assert item["provenance"] == "customer_input"
    assert channels.evidence_file(case_id) == PNG
    assert view["facts"]["evidence"] == {"count": 1, "checked": 0}
    assert "evidence.attached" in [r["action"] for r in view["audit"]]


def test_mismatch_gets_a_clear_answer_that_reveals_nothing_and_writes_nothing(
    channels: Channels,
) -> None:
    payment = channels.payment("30.00")
    before = channels.counts()
    wrong_email = channels.submit_form(
        _fields(payment, email="mallory@example.com"), files=[("x.png", PNG)]
    )
    unknown = channels.submit_form(_fields("py_doesnotexist"))
    for response in (wrong_email, unknown):
        assert response.status_code == 422
        assert "could not match this email address" in response.text
        assert 'role="alert"' in response.text
    # The same sentence either way: no hint whether the payment exists.
    assert re.findall(r"<p>(We could not[^<]*)</p>", wrong_email.text) == re.findall(
        r"<p>(We could not[^<]*)</p>", unknown.text
    )
    assert channels.counts() == before
    assert not channels.runtime.settings.evidence_path().exists()


def test_missing_or_forged_csrf_token_is_refused(channels: Channels) -> None:
    payment = channels.payment("30.00")
    before = channels.counts()
    forged = channels.submit_form(_fields(payment), token="1700000000.deadbeef")
    assert forged.status_code == 403 and "expired" in forged.text
    channels.client.cookies.clear()
    token = channels.form_token()
    channels.client.cookies.clear()  # a cross-site post carries no cookie of ours
    no_cookie = channels.submit_form(_fields(payment), token=token)
    assert no_cookie.status_code == 403
    assert channels.counts() == before


def test_invalid_fields_rerender_with_linked_errors(channels: Channels) -> None:
    before = channels.counts()
    response = channels.submit_form({"email": "not-an-email", "payment": "", "amount": "abc"})
    assert response.status_code == 422
    html = response.text
    for name in ("email", "payment", "amount"):
        assert f'<p class="error" id="{name}-error">' in html
        control = re.search(rf'<input[^>]* id="{name}"[^>]*>', html)
        assert control, name
        assert 'aria-invalid="true"' in control.group(0)
        described = re.search(r'aria-describedby="([^"]+)"', control.group(0))
        assert described and f"{name}-error" in described.group(1)
        assert f'href="#{name}"' in html  # the summary links to the field
    assert 'value="not-an-email"' in html  # what the customer typed is kept
    assert channels.counts() == before


def test_file_type_is_decided_by_content_not_by_name(channels: Channels) -> None:
    payment = channels.payment("30.00")
    before = channels.counts()
    response = channels.submit_form(_fields(payment), files=[("photo.png", b"MZ\x90\x00 exe")])
    assert response.status_code == 422
    assert "not a PNG, JPEG, GIF, WebP or PDF" in response.text
    assert channels.counts() == before


def test_the_same_form_posted_twice_is_one_case(channels: Channels) -> None:
    payment = channels.payment("30.00")
    token = channels.form_token()
    first = channels.submit_form(_fields(payment), token=token)
    again = channels.submit_form(_fields(payment), token=token)
    assert first.headers["X-Refund-Desk-Case"] == again.headers["X-Refund-Desk-Case"]
    assert channels.case_count() == 1


def test_rate_limit_per_email(channels: Channels) -> None:
    payment = channels.payment("30.00")
    answers = [
        channels.submit_form(_fields(payment, email="eve@example.com")).status_code
        for _ in range(6)
    ]
    assert answers[:5] == [422] * 5 and answers[5] == 429
    assert channels.case_count() == 0


def test_json_clients_get_the_error_shape(channels: Channels) -> None:
    payment = channels.payment("30.00")
    response = channels.submit_form(
        _fields(payment, email="mallory@example.com"), headers={"Accept": "application/json"}
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "not_matched" and set(error["fields"]) == {"email", "payment"}
