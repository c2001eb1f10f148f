"""Amounts read from the customer's words, in forms an independent review found misread.

The amount read here becomes `advice.amount_minor`, and `cases/advisory.amount_asked_in_words`
makes it the case's amount when the request's fields named none (decide.py: set_amount).
"""

from __future__ import annotations

from refund_desk.advisor.extract import extract_amount
from refund_desk.advisor.offline import OfflineAdvisor
from refund_desk.cases.ports import AdviceRequest


def _advice_amount(message: str, currency: str) -> int | None:
    advice = OfflineAdvisor().advise(AdviceRequest(message=message, currency=currency))
    return advice.amount_minor


# --- _UNIT_BEFORE `\d\s+\w+\s+a\s*$` (extract.py:94): meant for a folded "à" unit price
# ("3 Teller à 14,90 €"), it also matches the English article "a" after any number and a word,
# so the amount the customer asks for is dropped as a "unit price" and the price paid wins.


def test_asked_amount_after_item_number_and_article_is_not_a_unit_price() -> None:
    text = "Item 2 needs a $30 refund. For the record, the whole set cost me $100."
    # an English "a" before the amount is no unit price ("3 Teller à 14,90 €" is)
    assert extract_amount(text, "USD") == (3000, "USD")


def test_asked_amount_after_order_number_and_article_offline_advice() -> None:
    text = "Order 5521 needs a €30 refund. For the record, the whole set cost me €100."
    assert _advice_amount(text, "EUR") == 3000


def test_article_a_after_a_number_is_not_a_unit_price_when_nothing_is_asked() -> None:
    # "2 weeks a €15 credit": no unit price; the price paid must not become the ask
    assert extract_amount("After 2 weeks a €15 credit is fine. I paid €60 for the set.", "EUR") != (
        6000,
        "EUR",
    )


# --- _ASK_WORD gained a bare "owe" (extract.py:85) and `_ASK.search` has no word boundary, so
# "lower", "however", "flowers", "power", "allowed" mark the next amount as the one asked for.


def test_lower_is_not_an_ask_word_price_drop() -> None:
    text = (
        "I paid €100 for the jacket. A week later the price is lower: €80. "
        "Please refund the difference."
    )
    # "lower" holds "owe": read as an ask word, the new price €80 would become the case's
    # amount (< €100 left) instead of the €20 difference.
    assert extract_amount(text, "EUR") != (8000, "EUR")
    assert _advice_amount(text, "EUR") != 8000


def test_flowers_is_not_an_ask_word() -> None:
    text = "The flowers cost me €45 and the vase €30. The vase arrived broken."
    # nothing is asked in words; "flowers" holds "owe" and must not make €45 the ask
    assert extract_amount(text, "EUR") != (4500, "EUR")
