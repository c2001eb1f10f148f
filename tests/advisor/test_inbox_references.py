"""Payment references as inbox mail names them: prefixes of several parts, marker words that
are whole words, Turkish, Arabic, Japanese and Portuguese words for orders and members,
Eastern Arabic digits, and numbers that are prices or postcodes."""

from __future__ import annotations

import pytest

from refund_desk.advisor.extract import extract_order_ref
from refund_desk.advisor.redact import redact


def _ref(text: str) -> str | None:
    """As the advisor reads it: from the redacted text."""
    return extract_order_ref(redact(text).text)


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        # "No" opening a code is part of it, not the word "number"
        ("Commande NORD-55120 reçue abîmée.", "NORD-55120"),
        ("Order NO-77120 arrived late.", "NO-77120"),
        ("Order no. 77120 arrived late.", "77120"),
        # a prefix of two parts
        ("My account DE-SUB-20931 was billed after I cancelled.", "DE-SUB-20931"),
        # a code whose prefix is a phone word is no phone number
        ("Pedido TEL-2025-4410, 349 €, llegó roto.", "TEL-2025-4410"),
    ],
)
def test_reference_shapes(text: str, ref: str | None) -> None:
    assert _ref(text) == ref


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("Quero cancelar o plano, matrícula 00318822, e o estorno.", "00318822"),
        ("退会します。会員番号 00412277 の今月分を返金してください。", "00412277"),
        ("أريد إلغاء الاشتراك، رقم العضوية 00551902، واسترداد المبلغ.", "00551902"),
        ("Aboneliğimi iptal edin, sipariş no 55-20931 iade lütfen.", "55-20931"),
        ("الطلب رقم 7731905 وصل ناقص.", "7731905"),
        # as written, in Eastern Arabic digits
        ("رقم الطلب ٤٤٢٠٩١٧ والمنتج لا يعمل.", "٤٤٢٠٩١٧"),
    ],
)
def test_order_and_member_words_in_more_languages(text: str, ref: str) -> None:
    assert _ref(text) == ref


def test_of_two_orders_the_second_cancelled_in_turkish_and_arabic() -> None:
    assert _ref("Yanlışlıkla iki sipariş verdim: 30112 ve 30147. İkincisini iptal edin.") == "30147"
    assert _ref("طلبت مرتين، الطلب 30112 والطلب 30147. الغي الثاني لو سمحت.") == "30147"


@pytest.mark.parametrize(
    "text",
    [
        # a price in a currency word, Latin or Arabic
        "دفعت 4500 درهم ولم يصلني شيء.",
        "Siparişte 250 TL indirim olması gerekiyordu, uygulanmadı.",
        # a postcode in the address under the signature
        "Merci de me rembourser.\n\nJeanne Morel\n4 rue des Lilas, 31000 Toulouse",
        "Bitte erstatten.\n\nK. Braun\nLindenweg 12, 80331 München",
    ],
)
def test_what_is_not_a_reference(text: str) -> None:
    assert _ref(text) is None


def test_a_year_beside_a_real_reference_is_not_it() -> None:
    text = "Siparişim 2024 modeldi, gelen eski. Siparişim AK-2026-1187, iade istiyorum."
    assert _ref(text) == "AK-2026-1187"


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        # "the order is ...": a verb between the word and the number (the phone is not it)
        ("I rang 0800 555 123, no answer. My order is 61904, refund please.", "61904"),
        ("Meine Bestellung ist 77120, bitte erstatten.", "77120"),
        # two words for one number
        ("Nº do pedido/assinatura: 00714420\nQuero cancelar.", "00714420"),
        # member and customer numbers as Swedish and Spanish forms write them
        ("Jag säger upp abonnemanget, kundnummer 00318890.", "00318890"),
        ("Doy de baja la cuota (n.º de socio 00227431).", "00227431"),
        # a Japanese inquiry (tracking) number is not the order
        ("届いていません。問い合わせ番号は 4410-2231-9902 です。返金してください。", None),
    ],
)
def test_more_ways_a_reference_is_introduced_or_claimed(text: str, ref: str | None) -> None:
    assert _ref(text) == ref


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("キャンセルをお願いします。注文番号はKT-330912です。", "KT-330912"),
        ("毎月引き落とされています。会員番号M-00412377です。", "M-00412377"),
    ],
)
def test_a_japanese_number_word_with_its_particle_or_glued_to_the_code(text: str, ref: str) -> None:
    assert extract_order_ref(text) == ref
