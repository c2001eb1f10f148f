"""Tier-1 intent, rule citation and the typo repair behind the offline advisor."""

from __future__ import annotations

import pytest

from refund_desk.advisor import OfflineAdvisor
from refund_desk.advisor.intent import cite_rules
from refund_desk.advisor.spelling import Speller
from refund_desk.cases.ports import AdviceRequest, PolicyText

RULES = (
    PolicyText("opened-items", "Opened items can be returned within 30 days if unused.",
               'request.reason == "changed_mind"'),
    PolicyText("damaged-shipping", "When an item arrives damaged we refund it and the shipping.",
               'request.reason == "damaged" and request.amount <= 50'),
    PolicyText("exceeds-refundable", "The requested amount is more than what is left to refund."),
)  # fmt: skip


def advise(message: str) -> tuple[str, str, tuple[str, ...]]:
    advice = OfflineAdvisor().advise(AdviceRequest(message=message, currency="USD", policy=RULES))
    return advice.intent, advice.reason, advice.cited_rules


@pytest.mark.parametrize(
    ("message", "cited"),
    [
        ("Can I return opened items?", ("opened-items",)),
        ("Do you refund shipping costs if an item arrives damaged?", ("damaged-shipping",)),
        ("What is your return policy for gift cards?", ()),
        ("Kann ich geöffnete Artikel zurückgeben?", ()),
    ],
)
def test_policy_questions_cite_the_rules_that_answer_them(
    message: str, cited: tuple[str, ...]
) -> None:
    assert advise(message) == ("policy_question", "other", cited)


@pytest.mark.parametrize(
    "message",
    [
        "My order arrived broken, can I get a refund?",
        "Can I get my $25 back for the broken mug?",
        "Can I return order #5521? I changed my mind.",
        "Where is my parcel?? Ordered two weeks ago.",
        "I received the wrong size. What now?",
    ],
)
def test_requests_about_a_purchase_are_not_questions(message: str) -> None:
    assert advise(message)[0] == "refund"


def test_a_rule_without_say_is_never_cited() -> None:
    silent = (PolicyText("opened-items", "", 'request.reason == "changed_mind"'),)
    assert cite_rules("can i return opened items?", "changed_mind", silent) == ()


def test_speller_repairs_slips_towards_known_words_only() -> None:
    speller = Speller(["received", "broken", "subscription", "equivocad"])
    assert speller.correct("i recieved it brokn") == "i received it broken"
    assert speller.correct("cancel my subscripton") == "cancel my subscription"
    assert speller.correct("it hasnt come and i dont know") == "it hasn't come and i don't know"
    assert speller.correct("producto equivocado") == "producto equivocado"  # a longer form
    assert speller.correct("the charge was wanted") == "the charge was wanted"
