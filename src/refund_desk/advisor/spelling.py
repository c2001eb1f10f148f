"""Undo the commonest typing slips before the keyword rules read a message.

Customers type fast on phones: "recieved", "brokn", "subscripton", "hasnt". A rule that only
knows the right spelling misses them, and the case lands in `other` for a person. Two cheap
repairs: missing apostrophes in negations, and a word one edit away (two for long words) from
a word the rules know, with the same first letter. Only words the rules do not know change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["Speller"]

_NEGATIONS = {
    "dont": "don't", "doesnt": "doesn't", "didnt": "didn't", "isnt": "isn't", "wasnt": "wasn't",
    "arent": "aren't", "werent": "weren't", "hasnt": "hasn't", "havent": "haven't",
    "hadnt": "hadn't", "cant": "can't", "wont": "won't", "couldnt": "couldn't",
    "wouldnt": "wouldn't", "shouldnt": "shouldn't", "aint": "ain't",
}  # fmt: skip

# Right words that sit one edit from a rule word and must not be "corrected" into it.
_KEEP = frozenset(
    {"charge", "change", "stated", "posted", "locked", "looked", "booked", "cooked", "rated",
     "dated", "hosted", "wanted", "waited", "planned", "placed", "spaced", "traced", "tracked",
     "parked", "marked", "worked", "ticked", "picked", "packed", "backed", "hacker", "brake",
     "leaves", "leaned", "leaked", "later", "latest", "lasted", "larger", "delayed", "relayed",
     "return", "returns", "refund", "refunds", "items", "order", "orders", "ordered"}
)  # fmt: skip

_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def _within(a: str, b: str, limit: int) -> bool:
    """Optimal string alignment distance (adjacent swaps count one) is at most `limit`."""
    if abs(len(a) - len(b)) > limit:
        return False
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        if min(cur) > limit:
            return False
        prev2, prev = prev, cur
    return prev[-1] <= limit


class Speller:
    """Corrects words towards a fixed vocabulary (the words the keyword rules use)."""

    def __init__(self, vocabulary: Iterable[str]) -> None:
        self.vocabulary = frozenset(w for w in vocabulary if len(w) >= 5)
        self._by_initial: dict[str, list[str]] = {}
        for word in sorted(self.vocabulary):
            self._by_initial.setdefault(word[0], []).append(word)
        self._cache: dict[str, str] = {}

    def _word(self, word: str) -> str:
        if word in _NEGATIONS:
            return _NEGATIONS[word]
        if len(word) < 5 or word in self.vocabulary or word in _KEEP:
            return word
        if word not in self._cache:
            limit = 2 if len(word) >= 9 else 1
            best = word
            for candidate in self._by_initial.get(word[0], ()):
                if word.startswith(candidate):
                    break  # a longer form of a known stem ("equivocado" of "equivocad")
                if _within(word, candidate, limit):
                    best = candidate
                    break
            self._cache[word] = best
        return self._cache[word]

    def correct(self, folded: str) -> str:
        """Text already folded (lower case, no accents) with slips repaired."""
        return _WORD.sub(lambda m: self._word(m.group(0)), folded)
