"""The customer's web form and the intake API say what is wrong in the words a person typed:
what they typed, quoted, what is wrong with it and an example, the form's summary naming each
field by its label; never a validator's own words ("String should have at most 3 characters",
"amount '-5' is negative")."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest

from refund_desk.runtime import Runtime
from tests.helpers import CUSTOMER, Harness, published


@pytest.fixture()
def desk(runtime: Runtime) -> Iterator[Harness]:
    yield published(runtime)


def send_form(desk: Harness, **fields: str) -> str:
    """The form as a customer sends it; the page that comes back, as text."""
    page = desk.client.get("/request")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token, page.text
    answer = desk.client.post("/request", data={"csrf_token": token.group(1), **fields})
    assert answer.status_code == 422, answer.text
    return html.unescape(answer.text)


def summary(page: str) -> list[str]:
    """The lines of the form's "There is a problem" list."""
    found = re.search(r'<div class="summary".*?</ul>', page, re.S)
    assert found, page
    return [re.sub(r"<[^>]+>", "", item) for item in re.findall(r"<li>(.*?)</li>", found.group(0))]


def test_the_form_names_each_field_and_quotes_what_was_typed(desk: Harness) -> None:
    page = send_form(desk, email="ada@", payment="py 1", amount="abc")
    assert summary(page) == [
        "Your email address: “ada@” is not an email address; one reads like name@example.com.",
        "Payment or order reference: “py 1” is not a reference from a receipt; one has "
        "letters, digits, - and _ only, such as py_1a2b3c.",
        "Amount to refund: letters are not an amount (“abc”); type digits, such as 12.50.",
    ]


@pytest.mark.parametrize(
    ("amount", "words"),
    [
        ("-5", "“-5” is below zero; type the amount to give back, such as 12.50."),
        ("$12", "“$12” has a currency in it; type the number alone, such as 12.50."),
        ("0.00", "“0.00” refunds nothing; type more than zero, such as 12.50."),
        ("1.234", "“1.234” has more decimals than USD has (2); type, for example, 12.50."),
    ],
)
def test_the_forms_amount_is_refused_in_words(desk: Harness, amount: str, words: str) -> None:
    """1.234 reads as an amount until the payment says it is in USD: the same words."""
    payment = desk.payment("30.00")
    page = send_form(desk, email=CUSTOMER, payment=payment, amount=amount)
    assert summary(page) == [f"Amount to refund: {words}"]
    assert f'<p class="error" id="amount-error">{words}</p>' in page
    assert "negative" not in page and "allows" not in page
    assert desk.counts()[0] == 0


def test_the_api_says_the_same_words_by_field(desk: Harness) -> None:
    body = {**desk.request(desk.payment("30.00"), "-5"), "currency": "USDX"}
    fields = desk.post(body).json()["error"]["fields"]
    assert fields == {
        "currency": "“USDX” is not a currency; type its three-letter code, such as USD."
    }
    fields = desk.post(desk.request(desk.payment("30.00"), "12.505")).json()["error"]["fields"]
    assert fields == {
        "amount": "“12.505” has more decimals than USD has (2); type, for example, 12.50."
    }
