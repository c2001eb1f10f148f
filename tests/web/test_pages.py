"""The customer pages come from Jinja2 templates that escape every value by default."""

from __future__ import annotations

from refund_desk.web import pages
from refund_desk.web.routes.web_form import FIELDS

HOSTILE = '"><script>alert(1)</script>'


def test_every_value_a_customer_typed_is_escaped_when_the_form_comes_back() -> None:
    html = pages.render(
        "request_form.html",
        title="Request a refund",
        fields=FIELDS,
        values={"email": HOSTILE, "message": HOSTILE},
        errors={"email": HOSTILE},
        form_error=HOSTILE,
        csrf="token",
    ).body.decode()
    assert "<script>" not in html
    assert "&lt;script&gt;" in html and "&#34;&gt;" in html


def test_an_appeal_refusal_escapes_the_message() -> None:
    html = pages.render("appeal_refused.html", title="Appeal", message=HOSTILE).body.decode()
    assert "<script>" not in html and '<p role="alert">&#34;&gt;&lt;script&gt;' in html
