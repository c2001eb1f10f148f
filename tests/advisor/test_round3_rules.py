"""Issue 39, round 3: a pointer at the mail or invoice below, card endings in more languages,
"#A and #B" naming two orders, a price after a reference's comma. Examples of our own."""

from __future__ import annotations

import pytest

from refund_desk.advisor import reply
from refund_desk.advisor.extract import extract_amount, extract_order_ref
from refund_desk.advisor.redact import redact


def _ref(text: str) -> str | None:
    return extract_order_ref(redact(text).text)


INVOICE_BELOW = """\
{said}

From: Gym Online <billing@gymonline.example>
Sent: Monday, 2 March 2026 08:00
To: me@example.org
Subject: Your March invoice

Invoice GY-2026-3310
Monthly plan: € 29,90
"""


@pytest.mark.parametrize(
    "said",
    [
        "Please cancel my plan and refund this month, see the invoice below.",
        "Bitte kündigen und den Monat erstatten, siehe Rechnung unten.",
        "Proszę o anulowanie i zwrot za ten miesiąc, faktura poniżej.",
        "Merci d'annuler et de rembourser ce mois, voir le mail ci-dessous.",
    ],
)
def test_a_pointer_at_the_mail_or_invoice_below_names_its_amount(said: str) -> None:
    current = reply.read(INVOICE_BELOW.format(said=said)).current
    assert extract_amount(current, "EUR") == (2990, "EUR")
    assert _ref(current) == "GY-2026-3310"


def test_a_bare_see_below_still_gives_no_amount() -> None:
    current = reply.read(INVOICE_BELOW.format(said="Cancel my plan please, see below.")).current
    assert extract_amount(current, "EUR") is None


@pytest.mark.parametrize(
    "text",
    [
        "Ik zie een afschrijving van € 80,00, mijn kaart eindigend op 5521 is geblokkeerd.",
        "Un débit de 80,00 € que je ne connais pas, ma carte se termine par 5521.",
        "A charge of $80.00 I never made, on the card ending with 5521.",
    ],
)
def test_a_card_ending_is_no_reference(text: str) -> None:
    assert _ref(text) is None


def test_two_orders_each_with_a_hash_the_one_named_again() -> None:
    text = "I bought the lamp twice (#552301 and #552318). Please cancel 552318 and refund it."
    assert _ref(text) == "552318"


def test_a_price_with_thousands_after_the_order_is_no_second_reference() -> None:
    text = (
        "Siparişim KP-2026-4410, 2.499 TL'nin iadesini istiyorum. Onay mailinde 2.499 TL yazıyor."
    )
    assert _ref(text) == "KP-2026-4410"


@pytest.mark.parametrize(
    ("text", "currency", "expected"),
    [
        ("Le casque n'est jamais arrivé à Abidjan. J'ai payé 42 500 FCFA, remboursez-moi.",
         "XOF", (42500, "XOF")),
        ("The blender came broken, I paid ₦24,900. Please refund.", "NGN", (2490000, "NGN")),
        ("A mochila chegou rasgada. Paguei Kz 18.900, quero o reembolso.", "AOA", (1890000, "AOA")),
        ("The kettle leaks, it was Ksh 3,450. Refund please.", "KES", (345000, "KES")),
    ],
)  # fmt: skip
def test_the_money_of_more_places_where_learned_languages_are_written(
    text: str, currency: str, expected: tuple[int, str]
) -> None:
    assert extract_amount(text, currency) == expected


def test_full_width_digits_letters_and_separators_are_read_as_written() -> None:
    text = "ケトルが二つ届きました。注文番号はＫＴ－４４０８です。３，２８０円を返金してください。"
    assert _ref(text) == "ＫＴ－４４０８"
    assert extract_amount(text, "JPY") == (3280, "JPY")


def test_a_full_width_comma_between_ascii_numbers_is_punctuation() -> None:
    # a Chinese comma after an order number does not glue it to the price
    text = "订单号 55120417，189元，申请退款。"
    assert extract_amount(text, "CNY") == (18900, "CNY")
