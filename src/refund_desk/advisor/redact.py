"""Mask personal data in free text before anything model-facing sees it (DESIGN invariant 7).

Each kind has one precompiled pattern plus, where a pattern alone would over-match, a cheap
check (Luhn for cards, ISO 13616 mod-97 for IBANs, digit counts and context for phones), so
order numbers and amounts survive while real PII does not. Kinds are applied in a fixed order
(emails, IBANs, cards, phones, addresses, names) so that an earlier, more specific kind claims
its digits before a looser pattern can see them. Everything is deterministic.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from refund_desk.advisor.reference import REFERENCE_BEFORE

__all__ = ["KINDS", "Redacted", "iban_valid", "luhn_valid", "redact"]

#: The kinds of data masked, in the order they are applied, with their replacement tokens.
KINDS: Mapping[str, str] = MappingProxyType(
    {
        "email": "[email]",
        "iban": "[iban]",
        "card": "[card]",
        "phone": "[phone]",
        "address": "[address]",
        "name": "[name]",
    }
)


@dataclass(frozen=True)
class Redacted:
    """Masked text plus how many spans of each kind were replaced (for audit, not content)."""

    text: str
    counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


# ---------------------------------------------------------------- patterns

_EMAIL = re.compile(
    r"(?<![\w.%+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+"
)

# Country code, two check digits, then groups of four (spaced or not) and a short tail.
_IBAN = re.compile(
    r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]{4}){2,7}(?:[ ]?[A-Z0-9]{1,4})?(?![A-Za-z0-9])"
)

# 13..19 digits, optionally separated by single spaces or dashes.
_CARD = re.compile(r"(?<![\d.,])\d(?:[ -]?\d){12,18}(?![\d]|[.,]\d)")

_DIGIT_RUN = re.compile(r"\d+")

_PHONE = re.compile(
    r"""
    (?<![\w.+/-])
    (?:
        (?:\+|00)\d{1,3}[\s.-]?(?:\(0?\d{1,4}\)[\s.-]?)?\d{1,4}(?:[\s.-]?\d{2,4}){1,4}
      | \(\d{2,5}\)[\s.-]?\d{2,4}(?:[\s.-]?\d{2,4}){1,3}        # (555) 123-4567
      | \d{3}[.-]\d{3}[.-]\d{4}                                  # 555-123-4567
      | \d{3}[ ]\d{3}[ ]\d{4}                                    # 555 123 4567
      | 0\d{1,4}(?:[\s./-]\d{2,8}){1,4}                          # 030 1234567, 06 12 34 56 78
      | 0\d{9,10}                                                # 07700900123
    )
    (?![\w-]|[.,]\d)
    """,
    re.VERBOSE,
)

# A bare digit run is a phone number only when the customer says so.
_PHONE_KEYWORD = re.compile(
    r"(?i)\b(?:phone|tel|telephone|mobile|cell|call\s+me|text\s+me|whatsapp|reach\s+me|"
    # (not the prefix of a code: "TEL-2026-0091" is an order)
    r"handy|telefon|t[ée]l[ée]phone|portable|tel[ée]fono|m[óo]vil)\b(?!-\d)[^\d\n]{0,15}"
    r"(?<![\d])(\+?\d[\d\s-]{5,17}\d)(?![\d]|[.,]\d)"
)

# Words before a number that make it an order/reference number rather than a phone number.
_REF_CONTEXT = re.compile(
    r"(?i)\b(?:order|invoice|ref|reference|ticket|case|tracking|receipt|transaction|account|"
    r"bestellung|bestellnummer|rechnung|commande|facture|pedido|factura|no|nr|n°|num|number)"
    r"\.?\s*(?:number|no\.?|nr\.?|#)?\s*[:#]?\s*$"
)
_DATE = re.compile(r"\d{1,4}[./-]\d{1,2}[./-]\d{1,4}")

_STREET_WORDS = (
    r"(?i:street|road|avenue|lane|boulevard|drive|court|terrace|place|way|close|crescent|"
    r"highway|parkway|square)"
    r"|(?:St|Rd|Ave|Ln|Blvd|Dr|Ct|Pl|Hwy|Pkwy|Sq)\b\.?"
)
_ADDRESS = re.compile(
    r"""
    # 221B Baker Street / 12 Oak Rd. / 1600 Pennsylvania Ave NW
    \b\d{1,5}[A-Za-z]?,?[ ]{1,3}(?:(?:[A-Z][\w'.-]{0,30}|\d{1,4}(?:st|nd|rd|th))[ ]{1,3}){1,3}
        (?:"""
    + _STREET_WORDS
    + r""")(?![\w])(?:[ ](?:NW|NE|SW|SE|N|S|E|W)\b)?
    # Hauptstraße 5 / Karl-Marx-Str. 7 / Lindenweg 12a / Am Weg 3
  | \b(?:[A-ZÄÖÜ][a-zäöüß]{1,20}[ ])?(?:[A-Za-zÄÖÜäöüß]{1,20}-){0,3}[A-Za-zÄÖÜäöüß]{0,30}
        (?i:straße|strasse|str\.|weg|gasse|platz|allee)[ ]{0,3}\d{1,4}[a-z]?\b
    # 12 rue de la Paix / 3 bis avenue Foch
  | \b\d{1,4}(?:[ ]?(?:bis|ter))?,?[ ]{1,3}
        (?i:rue|avenue|boulevard|bd|chemin|place|all[ée]e|impasse|quai)
        (?:[ ]{1,3}(?:(?:de|du|des|la|le|l'|d')[ ]?){0,3}[A-ZÉÈ][\w'-]{0,30}){1,4}
    # Calle Mayor 5 / Avenida de la Paz, 12
  | \b(?:Calle|C/|Avenida|Avda\.|Paseo|Plaza|Carrer)[ ]{1,3}(?:(?:de|del|la|los|las)[ ]){0,3}
        [A-ZÁÉÍÓÚÑ][\w-]{0,30}(?:[ ][A-ZÁÉÍÓÚÑ][\w-]{0,30}){0,3},?[ ]?(?:n[ºo°]\.?[ ]?)?\d{1,4}\b
    """,
    re.VERBOSE,
)

# Name parts that are also common words: only masked when written like a name (capitalised).
_COMMON_WORD_NAMES = frozenset(
    {
        "will", "may", "mark", "bill", "rose", "june", "april", "grace", "hope", "joy",
        "faith", "art", "pat", "sue", "don", "guy", "max", "jack", "frank", "ray", "rich",
        "summer", "dawn", "sky", "am", "an", "de", "la", "le", "van", "von", "da", "del",
        "di", "du",
    }
)  # fmt: skip

_NAME_SPLIT = re.compile(r"[\s,]+")


# ---------------------------------------------------------------- checks


def luhn_valid(digits: str) -> bool:
    """Card numbers carry a Luhn check digit; an order number almost never passes it."""
    if not digits.isdigit():
        return False
    doubled = (int(ch) * (1 + i % 2) for i, ch in enumerate(reversed(digits)))
    return sum(d - 9 if d > 9 else d for d in doubled) % 10 == 0


def iban_valid(candidate: str) -> bool:
    """ISO 13616 mod-97 check, so SKUs and codes that merely look like IBANs survive."""
    s = candidate.replace(" ", "").upper()
    if not (15 <= len(s) <= 34) or not s[:2].isalpha() or not s[2:4].isdigit():
        return False
    if not s.isalnum() or not s.isascii():
        return False
    rearranged = s[4:] + s[:4]
    number = "".join(str(int(ch, 36)) for ch in rearranged)
    return int(number) % 97 == 1


# ---------------------------------------------------------------- redaction


def _hit(c: Counter[str], kind: str) -> str:
    """Count one replacement of `kind` (from a `re.sub` callback); its mask."""
    c[kind] += 1
    return KINDS[kind]


def _sub_iban(text: str, c: Counter[str]) -> str:
    def repl(m: re.Match[str]) -> str:
        span = m.group(0)
        # The pattern may have run into a following code; shorten at group boundaries.
        cut = len(span)
        while cut > 0:
            if iban_valid(span[:cut]):
                return _hit(c, "iban") + span[cut:]
            cut = span.rfind(" ", 0, cut)
        return span

    return _IBAN.sub(repl, text)


def _sub_card(text: str, c: Counter[str]) -> str:
    def repl(m: re.Match[str]) -> str:
        span = m.group(0)
        # Separated groups may have picked up a neighbouring number ("4242 ... 4242 10"):
        # try every run of whole groups, longest first, for one that is a valid card number.
        groups = list(_DIGIT_RUN.finditer(span))
        all_digits = "".join(g.group(0) for g in groups)
        offsets = [0]
        for g in groups:
            offsets.append(offsets[-1] + len(g.group(0)))
        best: tuple[int, int] | None = None
        for i in range(len(groups)):
            for j in range(len(groups) - 1, i - 1, -1):
                start, end = groups[i].start(), groups[j].end()
                if not 13 <= offsets[j + 1] - offsets[i] <= 19:
                    continue
                if luhn_valid(all_digits[offsets[i] : offsets[j + 1]]):
                    if best is None or end - start > best[1] - best[0]:
                        best = (start, end)
                    break
        if best is None:
            return span
        return span[: best[0]] + _hit(c, "card") + span[best[1] :]

    return _CARD.sub(repl, text)


def _looks_like_phone(text: str, m: re.Match[str]) -> bool:
    span = m.group(0)
    digits = sum(ch.isdigit() for ch in span)
    if not 7 <= digits <= 15:
        return False
    if _DATE.fullmatch(span):
        return False
    if span.lstrip().startswith("+"):
        return True  # an international number is a phone whatever word comes before it
    before = text[max(0, m.start() - 30) : m.start()]
    return not (_REF_CONTEXT.search(before) or REFERENCE_BEFORE.search(before))


def _sub_phone(text: str, c: Counter[str]) -> str:
    def repl(m: re.Match[str]) -> str:
        return _hit(c, "phone") if _looks_like_phone(text, m) else m.group(0)

    text = _PHONE.sub(repl, text)

    def repl_kw(m: re.Match[str]) -> str:
        whole, start, end = m.group(0), m.start(1) - m.start(0), m.end(1) - m.start(0)
        digits = sum(ch.isdigit() for ch in m.group(1))
        if not 7 <= digits <= 15 or _REF_CONTEXT.search(whole[:start]):
            return whole
        return whole[:start] + _hit(c, "phone") + whole[end:]

    return _PHONE_KEYWORD.sub(repl_kw, text)


def _name_pattern(names: Sequence[str]) -> tuple[re.Pattern[str] | None, frozenset[str]]:
    """One alternation: full names first (longest wins), then each part of >= 2 characters."""
    full: set[str] = set()
    parts: set[str] = set()
    for name in names:
        tokens = [t for t in _NAME_SPLIT.split(name.strip()) if t]
        if not tokens:
            continue
        if len(tokens) > 1:
            full.add(r"\s+".join(re.escape(t) for t in tokens))
        for t in tokens:
            # "Anne-Marie" also yields "Anne" and "Marie"
            for piece in {t, *t.split("-")}:
                if len(piece) >= 2:
                    parts.add(piece)
    if not full and not parts:
        return None, frozenset()
    common = frozenset(p.lower() for p in parts if p.lower() in _COMMON_WORD_NAMES)
    alternatives = sorted(full, key=len, reverse=True) + sorted(
        (re.escape(p) for p in parts), key=len, reverse=True
    )
    pattern = re.compile(r"(?<![\w\[])(?:" + "|".join(alternatives) + r")(?![\w\]])", re.IGNORECASE)
    return pattern, common


def known_email(email: str) -> str:
    """The pattern (IGNORECASE) of a known email written as a whole address in a text."""
    return r"(?<![\w.%+-])" + re.escape(email) + r"(?![\w-])"


def may_contain(text: str, email: str) -> bool:
    """False only where `known_email(email)` cannot match `text`: both ASCII (IGNORECASE is
    then `lower()`) and the email nowhere in the text in any case. Spares a pattern compiled
    for each customer (each is new to `re`'s cache) for most messages, which name no email."""
    return not (email.isascii() and text.isascii()) or email.lower() in text.lower()


def redact(text: str, *, names: Sequence[str] = (), emails: Sequence[str] = ()) -> Redacted:
    """Mask emails, IBANs, card numbers, phone numbers, street addresses and known names.

    `names` and `emails` are what the system of record knows about the customer; known emails
    are masked even when oddly written (case), names case-insensitively as whole words.
    """
    c: Counter[str] = Counter()
    out = text

    for email in sorted({e.strip() for e in emails if e and e.strip()}, key=len, reverse=True):
        if not may_contain(out, email):
            continue
        out, n = re.subn(known_email(email), KINDS["email"], out, flags=re.I)
        c["email"] += n
    out = _EMAIL.sub(lambda _m: _hit(c, "email"), out)
    out = _sub_iban(out, c)
    out = _sub_card(out, c)
    out = _sub_phone(out, c)
    out = _ADDRESS.sub(lambda _m: _hit(c, "address"), out)

    pattern, common = _name_pattern(names)
    if pattern is not None:

        def repl_name(m: re.Match[str]) -> str:
            word = m.group(0)
            if word.lower() in common and not word[:1].isupper():
                return word
            return _hit(c, "name")

        out = pattern.sub(repl_name, out)

    counts = {k: c[k] for k in KINDS if c[k]}
    return Redacted(text=out, counts=MappingProxyType(counts))
