"""Inbox mail: a pointer at the mail or invoice below, card endings in more languages,
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


def test_a_customer_number_after_n_degree_is_no_phone_and_an_iban_no_reference() -> None:
    text = (
        "Quero cancelar o plano, cliente n.º 0091827. Cobraram 24,90 €.\n"
        "Devolvam para o IBAN PT50 1111 2222 3333 4444 5555 6."  # check digits wrong on purpose
    )
    assert _ref(text) == "0091827"


FORWARD_JA = """\
{said}

---------- 転送メッセージ ----------
From: 雑貨ストア <shop@zakka.example>
件名: ご注文確認 ZK-55031
> 陶器のマグカップ 2点 3,960円
"""


def test_a_japanese_pointer_at_the_order_below_names_its_amount() -> None:
    current = reply.read(
        FORWARD_JA.format(said="割れて届きました。下記の注文の返金をお願いします。")
    ).current
    assert extract_amount(current, "JPY") == (3960, "JPY")
    assert _ref(current) == "ZK-55031"


ARABIC_BELOW = """\
الطلب الموضح تحت وصل ناقص، أرجو استرجاع المبلغ.

---------- رسالة مُعاد توجيهها ----------
من: متجر <shop@store.example>
التاريخ: ١٤ مارس ٢٠٢٦
الموضوع: تأكيد الطلب QA-7710
> شكراً لطلبك، المبلغ الإجمالي 240 ر.ق
"""


def test_an_arabic_pointer_the_order_shown_below() -> None:
    current = reply.read(ARABIC_BELOW).current
    assert _ref(current) == "QA-7710"
    assert extract_amount(current, "QAR") == (24000, "QAR")


def test_a_message_that_is_only_a_forward_keeps_its_subject_line() -> None:
    text = (
        "---------- Forwarded message ---------\n"
        "From: Ana Ruiz <ana@example.org>\n"
        "Date: 3 Feb 2026 20:11\n"
        "Subject: Wrong size, order 7781-B\n\n"
        "I ordered boots in 39 and got 42. I want my money back, 89 €.\n"
    )
    current = reply.read(text).current
    assert _ref(current) == "7781-B"


@pytest.mark.parametrize(
    ("text", "currency", "expected"),
    [
        # a free-delivery threshold is no amount of the customer's
        ("I paid a shipping fee of $6.95 though delivery is free from $50 (my cart was $64.10). "
         "I keep the order, please refund the shipping.", "USD", (695, "USD")),
        ("Sepetim 750 TL'nin üzerindeydi ama kargo ücreti olarak 39,90 TL alındı. "
         "Kargo ücretinin iadesini istiyorum.", "TRY", (3990, "TRY")),
        # a price elsewhere said before the amount ("taniej o 40 zł") is not the ask
        ("Proszę anulować zamówienie 55120, w innym sklepie jest taniej o 40 zł.", "PLN", None),
        ("Please cancel order 55120, I found it cheaper by $15 elsewhere.", "USD", None),
    ],
)  # fmt: skip
def test_thresholds_and_prices_elsewhere_are_not_the_ask(
    text: str, currency: str, expected: tuple[int, str] | None
) -> None:
    assert extract_amount(text, currency) == expected


def test_a_full_stop_ends_what_a_claim_word_claims() -> None:
    # Polish "zwrot" is a refund and a return: after its sentence ends, the number is the order
    assert _ref("Nie dotarło na czas, już nie potrzebuję. Zwrot. 77-2041") == "77-2041"
    assert _ref("Art. 55321 ist kaputt.") is None  # an abbreviation's dot is no sentence end
