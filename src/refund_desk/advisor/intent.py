"""Tier 1: tell a question about the policy from a request for money, and find the rules
whose own words answer it.

"Can I return opened items?" asks about the policy; "My order arrived broken, can I get a
refund?" asks for money. A message is a policy question only when it is phrased as a general
question and names nothing of a purchase of its own (no amount, no order, no "my parcel
arrived ..."), so a real request is never closed as a mere question. The answer itself is
built by the workflow from the cited rules' `say` text, never from the advisor's words.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from refund_desk.cases.ports import PolicyText

__all__ = ["cite_rules", "is_policy_question"]

# Sentence starts and phrases that ask how the policy works (folded text: no accents).
_QUESTION = re.compile(
    r"""
    (?:^|[.!?\n]\s*|¿)\s*(?:
        (?:can|could|may)\s+(?:i|we|you|one|customers?)\b
      | (?:do|does|will|would|are|is|am|should)\s+(?:you|i|we|it|there|they|returns?|refunds?
            |sale|opened|used|gift|items?|products?)\b
      | (?:what|what's|whats|how|which|when)\b
      | if\b[^?]{0,80},\s*(?:do|can|will|would|is|are|does)\s+(?:i|you|we|it)\b
      | (?:kann|darf|muss|wie|was|gibt\s+es|welche)\b
      | (?:est-ce\s+que|puis-je|peut-on|combien|quel(?:le)?s?|comment)\b
      | (?:puedo|se\s+puede|cuanto|cual|hay|como)\b
    )
    """,
    re.VERBOSE,
)
_ABOUT_POLICY = re.compile(
    r"\b(?:refund|return|exchange|cancellation)s?\s+(?:policy|window|period|conditions|rules)\b"
    r"|\bis\s+it\s+possible\b|\bpolitique\s+de\s+(?:retour|remboursement)\b"
    r"|\bpolitica\s+de\s+devoluci|\bruckgaberecht|\bwiderrufsrecht"
)
# Words that tie the message to a purchase of the customer's own.
_INCIDENT = re.compile(
    r"""
    \bi\s+(?:received|got|ordered|bought|paid|purchased|was\s+(?:charged|billed|sent))\b
  | \b(?:my|our)\s+(?:\w+\s+)?(?:order|package|parcel|item|purchase|delivery|payment|
        subscription|account)\b
  | \b(?:arrived|came|stopped|broke|never|haven't|hasn't|didn't)\b
  | \b(?:meine?|mon|ma|mes|mi|mis)\s+(?:bestellung|paket|commande|colis|pedido|paquete)\b
    """,
    re.VERBOSE,
)
_CONDITIONAL = re.compile(r"\b(?:if|wenn|falls|si|in\s+case)\b[^,?.!;]*")


def is_policy_question(folded: str, *, has_amount: bool, has_reference: bool) -> bool:
    """A general question about the rules, not about a purchase of the customer's own."""
    if has_amount or has_reference or not folded.strip():
        return False
    if not (_ABOUT_POLICY.search(folded) or ("?" in folded and _QUESTION.search(folded))):
        return False
    return not _INCIDENT.search(_CONDITIONAL.sub(" ", folded))


# ---------------------------------------------------------------- citing rules

_STOP = frozenset(
    re.findall(
        r"\w+",
        """a an and are as at be been but by can could do does for from get got had has have
        how i if in into is it its me my no not of on or our please than that the their them
        then there these they this to too up us was we what when where which who why will with
        would you your yours any all only just also more most much very being so such one""",
    )
)
# Words every refund text shares: they count a little, never enough alone.
_GENERIC = frozenset({"refund", "return", "item", "order", "product", "money", "policy", "day"})
_TOKEN = re.compile(r"[a-z]+")
_REASON_IN_RULE = re.compile(r"request\.reason\s*==\s*[\"'](\w+)[\"']")


def _stem(word: str) -> str:
    for suffix in ("ations", "ation", "able", "ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def _terms(text: str) -> set[str]:
    return {_stem(w) for w in _TOKEN.findall(text.lower()) if w not in _STOP and len(w) > 2}


def cite_rules(folded: str, topic: str | None, rules: Sequence[PolicyText]) -> tuple[str, ...]:
    """Up to two rules whose text shares the question's words (or whose `when` names its topic)."""
    asked = _terms(folded)
    scored: list[tuple[float, int, str]] = []
    for index, rule in enumerate(rules):
        if not rule.say.strip():
            continue
        shared = asked & _terms(rule.say + " " + rule.rule.replace("-", " "))
        score = sum(0.5 if w in _GENERIC else 1.0 for w in shared)
        if topic and topic in _REASON_IN_RULE.findall(rule.when):
            score += 2.0
        if score >= 2.0:
            scored.append((-score, index, rule.rule))
    return tuple(rule for _, _, rule in sorted(scored)[:2])
