"""Text features for the learned reason classifier: folded text, hashed character n-grams.

The same code builds the features at training time (`advisor.train`) and at inference
(`advisor.model`), so the two can never drift apart. Character n-grams inside word
boundaries (2 to 5 characters, each word padded with a space) carry across typos, inflections
and the ten languages without a word list; words and word pairs add the phrases ("not
received"). All are hashed into `BUCKETS` columns with
CRC-32, which is stable across processes and machines (Python's own `hash` is not).
"""

from __future__ import annotations

import math
import re
import unicodedata
import zlib
from collections import Counter

__all__ = ["BITS", "BUCKETS", "DIGIT_RUN", "NGRAMS", "fold", "hashed_counts", "tfidf"]

BITS = 18
BUCKETS = 1 << BITS
NGRAMS = (2, 5)
_MASK = BUCKETS - 1
_WORD = re.compile(r"\w+|[^\w\s]")
DIGIT_RUN = 3  # a run of this many digits or more is read as "000"
_DIGITS = re.compile(rf"\d{{{DIGIT_RUN},}}")


def fold(text: str) -> str:
    """Lower-case, straighten quotes and drop accents so one pattern covers 'reçu'/'recu'."""
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("`", "'")
    decomposed = unicodedata.normalize("NFKD", text.lower().replace("ß", "ss"))
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def hashed_counts(text: str) -> Counter[int]:
    """How often each hashed feature occurs in the folded text: character n-grams, plus words
    and word pairs (marked apart, so the word "kaputt" is not the n-gram "kaputt")."""
    low, high = NGRAMS
    counts: Counter[int] = Counter()
    crc = zlib.crc32
    # a long run of digits reads as "000": order numbers and prices say nothing about the
    # reason, and as n-grams they would tie a reason to whatever numbers one writer chose
    words = _WORD.findall(_DIGITS.sub("000", fold(text)))
    for word in words:
        padded = f" {word} "
        size = len(padded)
        for n in range(low, min(high, size) + 1):
            for start in range(size - n + 1):
                counts[crc(padded[start : start + n].encode()) & _MASK] += 1
    for i, word in enumerate(words):
        counts[crc(f"\x01{word}".encode()) & _MASK] += 1
        if i:
            counts[crc(f"\x02{words[i - 1]} {word}".encode()) & _MASK] += 1
    return counts


def tfidf(counts: Counter[int], idf: dict[int, float], unseen_idf: float) -> dict[int, float]:
    """Sublinear term frequency times idf, scaled to unit length (as in training)."""
    weights = {b: (1.0 + math.log(c)) * idf.get(b, unseen_idf) for b, c in counts.items()}
    norm = math.sqrt(sum(w * w for w in weights.values()))
    if norm == 0.0:
        return {}
    return {b: w / norm for b, w in weights.items()}
