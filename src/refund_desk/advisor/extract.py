"""Deterministic extraction: the payment reference and the amount a customer asks for.

Read from the raw text (ids and amounts never leave the process); the reference is read from
the redacted text by the caller, so a card or phone number is never mistaken for one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from text_to_num import alpha2digit

from refund_desk.advisor.currencies import MARKERS
from refund_desk.advisor.features import fold as _fold
from refund_desk.advisor.injection import without_injection
from refund_desk.advisor.reference import (
    REFERENCE_BEFORE,
    ascii_forms,
    extract_order_ref,
    iso_currency,
)
from refund_desk.money import exponent, to_minor

__all__ = ["extract_amount", "extract_order_ref"]

# ---------------------------------------------------------------- amounts

_DOLLARS = ("USD", "CAD", "AUD", "NZD", "SGD", "HKD", "MXN")
_PESOS = ("MXN", "ARS", "CLP", "COP", "UYU", "PHP", "DOP")
# Currency markers -> the ISO codes they may stand for. Longest first in the pattern.
_SYMBOLS: dict[str, tuple[str, ...]] = {
    "us$": ("USD",), "c$": ("CAD",), "ca$": ("CAD",), "a$": ("AUD",), "au$": ("AUD",),
    "nz$": ("NZD",), "s$": ("SGD",), "hk$": ("HKD",), "r$": ("BRL",),
    "$": (*_DOLLARS, "ARS", "CLP", "COP", "UYU"),  # the peso countries write "$" too
    "€": ("EUR",), "£": ("GBP",), "¥": ("JPY", "CNY"), "￥": ("JPY", "CNY"), "円": ("JPY",),
    "₩": ("KRW",), "₹": ("INR",), "₺": ("TRY",), "₽": ("RUB",), "zł": ("PLN",),
    "kd": ("KWD",), "د.ك": ("KWD",), "fr.": ("CHF",), "kr": ("SEK", "NOK", "DKK", "ISK"),
    "dollars": _DOLLARS, "dollar": _DOLLARS, "bucks": _DOLLARS, "euros": ("EUR",),
    "euro": ("EUR",), "eur": ("EUR",), "usd": ("USD",), "gbp": ("GBP",), "jpy": ("JPY",),
    "kwd": ("KWD",), "chf": ("CHF",), "cad": ("CAD",), "aud": ("AUD",), "pounds": ("GBP",),
    "quid": ("GBP",), "yen": ("JPY",),
    "dinars": ("KWD", "BHD", "JOD", "IQD", "LYD", "TND", "DZD", "RSD"),
    "dinar": ("KWD", "BHD", "JOD", "IQD", "LYD", "TND", "DZD", "RSD"),
    # written without the diacritic or in words, and lower-case codes ("349 zl", "50 pln")
    "zl": ("PLN",), "zloty": ("PLN",), "zlotych": ("PLN",), "złotych": ("PLN",), "pln": ("PLN",),
    "sek": ("SEK",), "nok": ("NOK",), "dkk": ("DKK",), "brl": ("BRL",), "mxn": ("MXN",),
    "nzd": ("NZD",), "reais": ("BRL",), "franken": ("CHF",), "francs": ("CHF",),
    "kronor": ("SEK",), "kroner": ("NOK", "DKK"), "dólares": _DOLLARS, "dolares": _DOLLARS,
    "dollari": _DOLLARS, "dólares americanos": ("USD",),
    ":-": ("SEK", "NOK", "DKK"),  # "3 499:-", the Scandinavian whole-crown price
    "kč": ("CZK",), "kc": ("CZK",), "czk": ("CZK",),
    "pesos chilenos": ("CLP",), "pesos colombianos": ("COP",), "pesos argentinos": ("ARS",),
    "pesos mexicanos": ("MXN",),
    "pesos": _PESOS, "peso": _PESOS, "s/": ("PEN",), "s/.": ("PEN",), "soles": ("PEN",),
    "rs": ("INR",), "rs.": ("INR",), "rupees": ("INR",), "rupee": ("INR",), "inr": ("INR",),
    "pound": ("GBP",),
    "tl": ("TRY",), "lira": ("TRY",), "liralık": ("TRY",), "liralik": ("TRY",),
    "dh": ("MAD", "AED"), "jd": ("JOD",), "r": ("ZAR",), "rand": ("ZAR",), "zar": ("ZAR",),
    # Arabic currency words in Latin letters, as typed on a phone ("450 riyal", "1800 geneh")
    "riyal": ("SAR", "QAR", "OMR"), "riyals": ("SAR", "QAR", "OMR"), "geneh": ("EGP",),
    "gneh": ("EGP",), "dirham": ("AED", "MAD"), "dirhams": ("AED", "MAD"),
    # Arabic broken plurals CLDR does not list for these currencies
    "دنانير": ("KWD", "JOD", "BHD", "DZD", "TND", "LYD", "IQD"), "دراهم": ("AED", "MAD"),
    # the Maghreb's dinar as written without CLDR's dots ("12 500 دج", "89,500 دت")
    "دج": ("DZD",), "دت": ("TND",),
    # places whose languages are not learned still pay in their own money ("34 990 Ft")
    "ft": ("HUF",), "руб": ("RUB",), "₴": ("UAH",), "грн": ("UAH",), "원": ("KRW",),
    "元": ("CNY",), "rp": ("IDR",), "lei": ("RON",),
    # the CFA franc as written with a plain space or none ("85 000 FCFA", "12 000 F CFA"), one
    # word for the West and the Central African franc; the naira and cedi in words
    "fcfa": ("XOF", "XAF"), "f cfa": ("XOF", "XAF"), "cfa": ("XOF", "XAF"),
    "naira": ("NGN",), "cedis": ("GHS",), "kwanzas": ("AOA",),
}  # fmt: skip
# Markers that are also a unit or a word elsewhere ("a 6 ft cable", Italian "lei", Japanese
# "元の箱"): money only in a payment in their own currency, as "R150" is rand only in a rand one.
_OWN_PAYMENT_ONLY = frozenset({"ft", "lei", "rp", "元"})

# The symbols and currency words each place writes, from CLDR (`advisor/currencies.py`,
# built with Babel into `data/currency_markers.json`): "zł", "R$", "₺", "ر.س", "ريال", "lirası".
for _symbol, _codes in json.loads(MARKERS.read_text(encoding="utf-8")).items():
    _known = _SYMBOLS.get(_symbol, ())
    _SYMBOLS[_symbol] = (*_known, *(c for c in _codes if c not in _known))
_BIDI = dict.fromkeys(map(ord, "\u200e\u200f\u061c\u202a\u202b\u202c"), None)
# Eastern Arabic, Persian and full-width digits, and their separators, are read as the digits
# and separators the patterns know (`reference.ascii_forms`: U+0661 U+0662 U+066B U+0665 is
# 12.5, "５，５００円" 5,500 yen); one for one, so positions in the text do not move.
# "$199.900 COP", "$24.990 pesos chilenos": a dollar sign the code after it makes precise.
_DOLLAR_SIGN_THEN = re.compile(
    r"\s?(?P<code>(?-i:[A-Z]{3})\b|pesos\s+(?:chilenos|colombianos|argentinos|mexicanos))",
    re.IGNORECASE,
)
# A plain space groups thousands only before a trailing marker ("1 234,56 €"); after a leading
# one ("$25 100 times") it would glue two numbers together.
# ("749,-" is a whole amount, as German and Dutch prices are written, also with an en dash)
_NUM = (
    r"\d{1,3}(?:[,.'\u00a0\u202f ]\d{3})+(?:[.,]\d{1,3}|[.,][-\u2013])?"
    r"|\d+(?:[.,]\d{1,3}|[.,][-\u2013])?"
)
# after a leading marker no plain space, unless cents end the number ("R1 899,00")
_NUM_PRE = r"\d{1,3}(?: \d{3})+,\d\d|" + _NUM.replace(" ]", "]")
_MARK = "|".join(
    # a marker ending in a Latin letter ends a word ("zł" is not the start of "złożono")
    # (a one-letter marker may touch its number: "R150")
    rf"{re.escape(s)}(?![A-Za-z{'' if len(s) == 1 else '0-9'}\u00c0-\u024f])"
    if re.search(r"[a-zł]$", s)
    else re.escape(s)
    for s in sorted(_SYMBOLS, key=len, reverse=True)
)
# Before a number: no letter, digit or separator of the Latin script glued to it ("v2", "A4");
# a Japanese word may be ("代金は¥3,980", "今月分の980円").
_EDGE = r"(?<![A-Za-z0-9_.,\u00c0-\u024f])"
# A marker and its number are written on one line: in a pasted statement ("799,00 kr" over
# "11 nov ...") a marker at a line's end is not the next line's number's.
_SP = r"[^\S\n]"
AMOUNT = _AMOUNT = re.compile(
    rf"{_EDGE}(?:(?P<pre>{_MARK}|(?-i:[A-Z]{{3}})\b){_SP}?(?P<n1>{_NUM_PRE})(?![\d]|[.,]\d|[A-Za-z]\d)"
    # a trailing marker followed by a number is that number's leading one ("88271 $95.00")
    rf"|(?P<n2>{_NUM}){_SP}?(?P<post>{_MARK}|(?-i:[A-Z]{{3}})\b)(?!{_SP}?\d))",
    re.IGNORECASE,
)
# Words near an amount that say it is the one asked for, in folded text.
_ASK_WORD = (
    r"refund|reimburs|back|return|credit|owed|owe me|erstatt|zuruck|rembours|reembols|devolu|devolv"
    r"|rimbors|restitu|terugbeta|terugstort|terug|zwrot|zwroc|oddac|aterbetal|tillbaka|estorn"
    r"|\bvuelta\b|\bmanca(?:no|nte|nti)?\b|\bmanquant\w*|\bbrakuj\w*|\bmissing\b|\bfehlend\w*"
    r"|\bfalta[nm]?\b|\bontbre\w*|\bchyb[iíě]\w*|\bowe[ds]?\b|\bdovete\b|\bdeben\b|\bdevem\b"
    r"|\bschulden\b|\bverschuldig\w*|\bwinni\b|\breclam\w*|返金|返して|\bde volta\b"
    # Turkish "iade", "geri"; Arabic "استرداد", "استرجاع", "رجعوا", "ترجعولي" (folded)
    r"|\biade\w*|\bgeri\b|رجع|استرد|ترد"
)
_ASK = re.compile(_ASK_WORD)
# "the difference of 50,00 €": a price drop or a partial refund, the amount asked for
_DIFFERENCE = re.compile(
    r"differen|diferen|verschil|roznic|mellanskillnad|skillnad|差額|prijsverschil"
)
# Roles an amount plays that make it not the one asked for, read from the words around it.
_UNIT_BEFORE = re.compile(
    r"(?:\d\s*(?:x|\u00d7|\*)(?:\s*de)?|\bat|\bje|\bper|\btanesi|\bbirim fiyat\w*|\badedi)\s*:?\s*$"
)  # ("10x de R$ 289,99": an instalment)
# "3 Teller à 14,90 €": read in the text as written, as folding makes "à" the English "a"
_A_UNIT_BEFORE = re.compile(r"\d\s+\w+\s+à\s*$")
_UNIT_AFTER = re.compile(
    r"^\s*(?:each|apiece|per\b|/|a (?:month|piece|unit|year|week)|pro\b|chacun|cada|ciascun"
    r"|l'uno|stuck|stk|x\s*\d|'?(?:den|dan|ten|tan)\b|كل\b|للواحد|للحبة"
    # what is charged each month: "34,90 € chaque mois", "R$ 79,90 todo mês"
    r"|chaque (?:mois|annee|semaine)|par (?:mois|an)\b|every (?:month|year|week)|monthly|al mes\b"
    r"|por mes\b|todo mes\b|todos os meses|ogni mese|al mese|im monat|jeden monat|monatlich"
    r"|elke maand|co miesiac|miesiecznie|i manaden|varje manad|her ay|aylik|毎月)"
)
_TOTAL_BEFORE = re.compile(
    r"(?:=|\btotal(?:e|t)?\b(?: (?:of|was|is|de|di|von|van))?|\binsgesamt(?: von)?|\bin total"
    r"|\bin totaal|\brazem|\bsumma|\bsum(?:me)?(?: von)?|\btoplam(?:da)?|\byani|\bsoit|\bo sea"
    r"|\bou seja|\bcioe|\bczyli"
    r"|الاجمالي|اجمالي|المجموع|مجموع|يعني)[\s.:\u2026_]*$"
)
# A pasted table's line that opens with a total ("Gesamtbetrag inkl. MwSt.    149,92 €")
_TOTAL_LABEL = re.compile(
    r"^\s*[-*\u2022|]?\s*(?:(?:order|grand)\s+)?(?:total[et]?\b|gesamt\w*|insgesamt|summe|totaal"
    r"|razem|suma\b|toplam\w*|totale|الاجمالي|اجمالي|المجموع|合計)"
)
_TOTAL_AFTER = re.compile(r"^\s*(?:total|in total|insgesamt|au total|en total|in totale|razem)")
_BASE_BEFORE = re.compile(r"%\s*(?:of|von|de|di|van|z|av|do)\s*(?:the\s+)?$")  # "15% of $200"
# "the same blender for $40 cheaper", "80 € billiger": a price elsewhere, not the ask
_CHEAPER_AFTER = re.compile(
    r"\s*(?:cheaper|less\b|lower|billiger|gunstiger|goedkoper|mas barat|moins cher|meno\b|in meno"
    r"|mais barat|taniej|billigare|billigere|lagre)"
)
# "cheaper by 60 zł", "taniej o 60 zł", "8 € billiger" said before the amount
_CHEAPER_BEFORE = re.compile(
    r"(?:cheaper|less|lower|billiger|gunstiger|goedkoper|mas barat[oa]|moins cher|meno caro"
    r"|mais barat[oa]|taniej|billigare|billigere|daha ucuz)\s+(?:by|um|met|de|di|por|o|med|de)\s*$"
)
# a free-delivery threshold: "livraison offerte dès 50 €", "free shipping from $35",
# "kostenloser Versand ab 40 €" (folded text)
_FREE_FROM_BEFORE = re.compile(
    r"\b(?:free|offert\w*|gratuit\w*|gratis|kostenlos\w*|ucretsiz|darmow\w*|gratuita)\b"
    r"[^.!?\n]{0,30}\b(?:des|from|ab|vanaf|desde|a partir de|a partire da|od|fran|over|above)\s*$"
)
# "sepet 500 TL'nin üzerindeydi": a Turkish threshold after the amount (folded text)
_LIMIT_AFTER = re.compile(r"^'?(?:n?[iı]n|n?[uü]n)?\s*(?:uzerin\w*|uzeri\b|ustu\w*|ustunde\w*)")
_LIMIT_BEFORE = re.compile(
    r"(?:\bover|\babove|\bmore than|\bup to|\bunder|\bbelow|\bexceeding|\bless than"
    r"|\bmehr als|\bbis zu|\bplus de|\bjusqu'a|\bmas de|\bhasta|\boltre|\bmeer dan|\bpeste"
    r"|\bacima de|\babaixo de|\bpartir de|\bab)"
    r"\s*$"
)

# A number with no currency marker counts only where the customer plainly asks for it, in
# folded text: "refund me 12.99", "Graag 12,99 terug", "rimborsatemi 19,90", "返金 1200".
_ASK_VERB = (
    r"refund(?:ed)?|reimburse|(?:pay|give|send)\s+(?:me\s+|us\s+)?back|amount|total"
    r"|(?:ruck)?erstatt\w*|zuruck(?:zahlen|buchen|uberweisen)?|rembours\w*|reembols\w*"
    r"|devolv\w*|devuelv\w*|rimbors\w*|restitu\w*|terugbetal\w*|terugstorten|zwro\w*"
    r"|oddac|oddajcie|aterbetala|betala\s+tillbaka|estorn\w*|返金\w*|返して"
)
_FILLER = (
    r"(?:(?:me|moi|mi|nos|us|the|of|for|de|di|van|om|mir|uns|mij|mig|mnie|um|o|a|sie|ihr|u|ons"
    r"|jullie|vous|nous|le|la|el|il|lo|los|me\s+the)\s+){0,3}"
)
_NOT_MONEY = r"(?![\d%]|[.,]\d|\s*(?:%|percent|items?|pcs|pieces|days?|weeks?|times?|x\b|h\b))"
# Failing all that, a number written the way prices are ("18.99", "14,99") and nothing else
# in the text: the customer forgot the currency, not the amount. Dates ("12.03.2025"), times
# ("um 14.30 Uhr"), versions ("v2.10") and measures ("2.50 kg") are not prices.
_PRICE_SHAPED = re.compile(
    # (a debit in a pasted statement, " -64,00", is one: a minus after a space, not "SE-6620")
    r"(?<![\w.,:/#])(?<![\w.,:/#]-)(?<!\bv)(?!0\d)(?<!\bat )(?<!\bum )(?<!\bom )(?<!\bkl )"
    r"(?<!\bore )(?<!\blas )(?P<n>\d{1,3}(?:[.,]\d{3})*[.,]\d\d)"
    r"(?![\w%]|[.,:/-]\d|\s*(?:%|h\b|uhr|am\b|pm\b|o'clock|kg|g\b|ml|l\b|cm|mm|km|m\b|gb|tb"
    r"|mb|mah|w\b|v\b|hz|inch|in\b|\"|lbs?\b|oz\b|stars?|/\s*(?:5|10)\b))"
)
_BARE_ASK = re.compile(
    rf"(?:(?<!\w)(?:{_ASK_VERB})\s*:?\s*{_FILLER}(?P<n>{_NUM}){_NOT_MONEY}"
    # "12.99 back" but not "ALL 25 BACK" (all 25 items?); other languages' verbs are plain
    rf"|(?<![\w.,])(?P<m>\d+[.,]\d\d)\s+back\b"
    rf"|(?<![\w.,])(?P<k>{_NUM})\s+(?:terug|zuruck|tillbaka|de volta|indietro|z powrotem"
    r"|erstatt|rembours|reembols|rimbors|zwro|aterbetal)\w*"
    # Japanese puts the verb last: "1900を返金してください"
    rf"|(?<![0-9.,])(?P<j>{_NUM})\s*を\s*(?:返金|返して|払い戻))"
)


# ISO codes that are also English words in shouted text ("I WANT ALL 25 BACK").
_WORDLIKE_CODES = frozenset({"ALL", "TOP", "CUP", "MOP", "BOB", "PEN", "TRY", "MAD", "GEL", "SOS"})


@dataclass(frozen=True)
class _Found:
    value: int
    currency: str
    asked: bool  # near a refund word, or the difference asked for
    role: str = ""  # "unit" price, "total", "fee" (shipping, tax) or "" (a plain amount)
    start: int = -1  # where it is written in the text read
    end: int = -1


# A line of a pasted order table that is not the item: shipping, postage, tax ("Versand: 4,95 €",
# "KDV 18,00 TL", "VAT £3.20"); the ask only when the customer's words say so.
_FEE_BEFORE = re.compile(
    r"^\s*[-*\u2022|]?\s*(?:shipping|postage|delivery|handling|(?:sales\s+|state\s+)?tax|vat|gst|versand\w*|porto|mwst|ust|fracht"
    r"|livraison|frais de port|tva|envio|gastos de envio|iva|spedizione|verzend\w*|btw|frete"
    r"|portes|wysylk\w*|dostaw\w*|kargo|kdv|vergi|frakt|moms|送料|消費税|税|الشحن|الضريبة|ضريبة)"
    r"[^\n\d]{0,12}?[\s.:\u2026_|-]*$"
)
# "9,90 € de frais de port", "$7.95 for shipping": a fee named after its amount
_FEE_WORDS = (
    r"shipping|postage|delivery (?:fee|charge|cost)s?|frais(?: de port| de livraison| d'envoi)?"
    r"|versand\w*|porto\w*|lieferkosten|gastos de envio|costes? de envio|spese di spedizione"
    r"|costi di spedizione|verzendkosten|frete|portes|koszt\w* (?:wysylki|dostawy)|kargo ucret\w*"
    r"|frakt\w*|送料|الشحن|رسوم"
)
_FEE_AFTER = re.compile(
    rf"^\s*(?:(?:de|d'|for|of|in|fur|voor|di|per|za|na)\s*)?(?:the\s+)?(?:{_FEE_WORDS})"
)
# "des frais de livraison de 6,90 €", "a shipping fee of $5.95", "kargo ücreti olarak 59,90
# TL": a fee named just before its amount, in a sentence (folded text)
_FEE_NAMED_BEFORE = re.compile(
    rf"(?:{_FEE_WORDS})\s*(?:fee|charge|costs?)?\s*(?:of|de|von|van|di|olarak|was|were|est|war|:)?\s*$"
)
# "Merci de me rembourser ces frais", "refund the shipping": the customer asks back a fee
_FEE_ASKED = re.compile(
    rf"(?:{_ASK_WORD})[^.!?\n]{{0,30}}?(?:{_FEE_WORDS})|(?:{_FEE_WORDS})[^.!?\n]{{0,30}}?(?:{_ASK_WORD})"
)


_LABEL_LINE = 80


def _role(before: str, after: str, line: str) -> str | None:
    """What the words around an amount say it is (`line`: its line up to it, `after`: the rest
    of its line); None when it is not the customer's ask at all (the base of a percentage, a
    threshold, what another shop charges less)."""
    if (
        _BASE_BEFORE.search(before)
        or _LIMIT_BEFORE.search(before)
        or _CHEAPER_AFTER.match(after)
        or _CHEAPER_BEFORE.search(before)
        or _FREE_FROM_BEFORE.search(before)
        or _LIMIT_AFTER.match(after)
    ):
        return None
    if _FEE_BEFORE.search(line):
        return "fee"
    if _FEE_AFTER.match(after) or _FEE_NAMED_BEFORE.search(before):
        return "fee named"
    if _TOTAL_BEFORE.search(before) or _TOTAL_AFTER.match(after) or _TOTAL_LABEL.match(line):
        return "total"
    if _UNIT_BEFORE.search(before) or _UNIT_AFTER.match(after):
        return "unit"
    return ""


def _candidates(marker: str) -> tuple[str, ...]:
    """ISO codes a marker may mean; an upper-case three-letter code is checked against ISO 4217."""
    known = _SYMBOLS.get(marker.lower())
    if known is not None:
        return known
    if len(marker) == 3 and marker.isalpha() and marker.isupper() and iso_currency(marker):
        return (marker,)
    return ()


def _normalise_number(num: str, currency: str) -> str:
    """'1.234,56' / '1,234.56' / '12,50' / "1'000" -> a plain '1234.56'."""
    s = re.sub(r"[\u00a0\u202f ']|[.,][-\u2013]$", "", num)
    seps = [ch for ch in s if ch in ".,"]
    if not seps:
        return s
    last = max(s.rfind("."), s.rfind(","))
    tail = s[last + 1 :]
    if len(set(seps)) == 2:
        # both kinds: the last one is the decimal separator
        return re.sub(r"[.,]", "", s[:last]) + "." + tail
    if len(seps) > 1:
        return s.replace(seps[0], "")  # repeated separator: thousands
    if len(tail) == 3:
        # "1,500" or "1.500": thousands, unless the currency has three decimals ("12.500 KWD")
        return s.replace(seps[0], ".") if exponent(currency) == 3 else s.replace(seps[0], "")
    return s.replace(seps[0], ".")


def _resolve(candidates: Sequence[str], request_currency: str | None) -> str | None:
    """The currency a marker means here: None when it contradicts the request, "" (not known)
    when no request currency says which of several it is ("$" alone)."""
    if request_currency:
        return request_currency if request_currency in candidates else None
    return candidates[0] if len(candidates) == 1 else ""


def _minor(num: str, currency: str) -> int | None:
    try:
        value = to_minor(_normalise_number(num, currency), currency)
    except ValueError:
        return None
    return value if value > 0 else None


def _bare_minor(num: str, currency: str | None) -> int | None:
    """A bare number in the request's currency, or in hundredths when no currency is known."""
    if currency is not None:
        return _minor(num, currency)
    try:
        value = Decimal(_normalise_number(num, "EUR")).scaleb(2)
    except InvalidOperation:
        return None
    return int(value) if value > 0 and value == value.to_integral_value() else None


def extract_amount(text: str, currency: str | None = None) -> tuple[int, str] | None:
    """The amount the customer asks for, in minor units, with its ISO code.

    Amounts written with a currency marker count, except those in sentences that instruct the
    system ("approve a refund of 5000 €"), the base of a percentage ("15% of $200") and
    thresholds ("refunds over $1000"). Among several, the one the customer asks for wins (a
    refund word or "the difference" beside it), then a total ("= 25,98 €", "$89.97 total")
    over the unit prices it adds up ("2 x 12,99 €", "$29.99 each", "at £13"). Failing marked
    amounts, a bare number the customer plainly asks for ("refund me 12.99", "Graag 12,99
    terug"), then a lone number shaped like a price ("... 18.99. Can you refund it?"), in the
    request's currency, or with the code "" and in hundredths when the request names none (as
    for a marker that could mean several, "$" or "¥", when no request currency says which). A
    marker that contradicts the request's currency, or several different amounts none of which
    is clearly the one asked for, give None: no guessing about money.
    """
    req = currency.strip().upper() if currency else None
    if req is not None and not iso_currency(req):
        req = None
    text = _COMMENT.sub("", ascii_forms(text).translate(_BIDI))
    # a line quoted in the middle of a reply, and what is under a signature's "-- " line, count
    # only when the customer's own lines name no amount (a statement pasted as "> " lines)
    own = without_injection(_QUOTED_LINE.sub("", _FOOTER.sub("", text)), to_line_end=True)
    found = _marked(own, req)
    if found == [] and (_QUOTED_LINE.search(text) or _FOOTER.search(text)):
        text = without_injection(text, to_line_end=True)
        found = _marked(text, req)
    else:
        text = own
    if found is None:
        return None  # an amount in another currency makes the whole text unclear
    if found:
        folded = _fold(text)
        return _choose(
            found, _DIFFERENCE_ASKED.search(folded) is not None, text=text, folded=folded
        )
    in_words = _in_words(text, req)
    if in_words is not None:
        return in_words
    folded = _fold(text)
    found = []
    for b in _BARE_ASK.finditer(folded):
        num = b.group("n") or b.group("m") or b.group("k") or b.group("j")
        if b.group("n") and num.isdigit() and len(num) >= 4:
            continue  # "refund 3319 pls": a bare four-digit number is an order, not money
        if num.isdigit() and len(num) >= 6:
            continue  # "7712093 terugbetalen": six digits or more, no grouping, an order's
        at = b.start("n") if b.group("n") else b.start("k") if b.group("k") else b.start()
        if REFERENCE_BEFORE.search(folded[max(0, at - 40) : at]):
            continue  # "die Bestellung 112043 zurückgeben": the order's number
        value = _bare_minor(num, req)
        if value is not None:
            found.append(_Found(value, req or "", True))
    if not found:
        for p in _PRICE_SHAPED.finditer(folded):
            start, end = p.start(), p.end()
            if _a_date(p.group("n"), folded[max(0, start - 12) : start], folded[end : end + 1]):
                continue
            value = _bare_minor(p.group("n"), req)
            if value is not None:
                found.append(_Found(value, req or "", False))
    return _choose(found)


# "refund the difference", "die Differenz erstatten": the gap between the two prices named
_DIFFERENCE_ASKED = re.compile(
    r"(?:the|die|la|el|a|het|de|różnic\w*|roznic\w*|fark\u0131|farki)?\s*"
    r"(?:difference|differenz|difference|diferencia|diferenca|differenza|verschil|roznic\w*"
    r"|mellanskillnad|prisskillnad|fark\w*|差額|差价|差價|الفرق)"
)
# text2num reads amounts in words in these languages ("twenty dollars", "vingt euros")
_WORD_LANGUAGES = ("en", "fr", "es", "pt", "de", "nl", "it", "da")
# a currency marker the text names with no number beside it: its number may be in words
_A_MARKER = re.compile(rf"(?<![A-Za-z\u00c0-\u024f])(?:{_MARK})", re.IGNORECASE)


def _in_words(text: str, req: str | None) -> tuple[int, str] | None:
    """An amount written in words with a currency ("twenty dollars", "zwanzig Euro"): the text
    read by text2num in each language it knows, else by the Turkish table below, the first
    reading with a marked amount."""
    if not _A_MARKER.search(text):
        return None
    readings = [alpha2digit(text, lang) for lang in _WORD_LANGUAGES]
    if req == "TRY" or _TURKISH_LETTERS.search(text):
        readings.append(_turkish_digits(text))
    if req == "PLN" or _POLISH_LETTERS.search(text):
        readings.append(_polish_digits(text))
    if _ARABIC_LETTERS.search(text):
        readings.append(_arabic_digits(text))
    # the language that reads the most words as numbers is the text's: its reading is shortest
    for digits in sorted(readings, key=len):
        if digits == text:
            continue
        found = _marked(_CENTS_IN_WORDS.sub(r"\1,\3 \2", digits), req)
        if found:
            return _choose(found)
    return None


# "89 reais e 90 centavos", "19 euro e 90": the cents of an amount written in words
_CENTS_IN_WORDS = re.compile(
    r"(\d+)\s+([^\W\d_]+)\s+(?:e|and|und|et|y|en|i|ve)\s+(\d{2})(?!\d)(?:\s+(?:centavos|centimes"
    r"|c[ée]ntimos|centesimi|eurocent|cents?|groszy|öre|kuruş)\b)?",
    re.IGNORECASE,
)


# Turkish numbers in words, which no maintained parser reads: "yüz yirmi dokuz lira" is 129,
# "seksen dokuz lira doksan kuruş" 89,90.
_TURKISH_LETTERS = re.compile("[ıİşŞğĞ]")
_TR_NUMBERS = {
    "bir": 1, "iki": 2, "üç": 3, "dört": 4, "beş": 5, "altı": 6, "yedi": 7, "sekiz": 8,
    "dokuz": 9, "on": 10, "yirmi": 20, "otuz": 30, "kırk": 40, "elli": 50, "altmış": 60,
    "yetmiş": 70, "seksen": 80, "doksan": 90, "yüz": 100, "bin": 1000,
}  # fmt: skip
_TR_RUN = re.compile(
    r"(?<!\w)(?:(?:" + "|".join(_TR_NUMBERS) + r")(?:\s+|(?=\W)|$))+", re.IGNORECASE
)
_TR_KURUS = re.compile(r"(\d+)\s+(lira|tl)\s+(\d{1,2})\s+kuru[şs]\w*", re.IGNORECASE)


# Polish numbers in words, in the cases a sum of money takes ("zwrot dwustu złotych", "sto
# dwadzieścia zł"), which no maintained parser reads either.
_POLISH_LETTERS = re.compile("[ąćęłńśźżĄĆĘŁŃŚŹŻ]")
_PL_FORMS = {
    1: "jeden jedna jedno jednego jednej", 2: "dwa dwie dwóch dwu dwoma", 3: "trzy trzech trzema",
    4: "cztery czterech", 5: "pięć pięciu", 6: "sześć sześciu", 7: "siedem siedmiu",
    8: "osiem ośmiu", 9: "dziewięć dziewięciu", 10: "dziesięć dziesięciu",
    11: "jedenaście jedenastu", 12: "dwanaście dwunastu", 13: "trzynaście trzynastu",
    14: "czternaście czternastu", 15: "piętnaście piętnastu", 16: "szesnaście szesnastu",
    17: "siedemnaście siedemnastu", 18: "osiemnaście osiemnastu",
    19: "dziewiętnaście dziewiętnastu", 20: "dwadzieścia dwudziestu",
    30: "trzydzieści trzydziestu", 40: "czterdzieści czterdziestu",
    50: "pięćdziesiąt pięćdziesięciu", 60: "sześćdziesiąt sześćdziesięciu",
    70: "siedemdziesiąt siedemdziesięciu", 80: "osiemdziesiąt osiemdziesięciu",
    90: "dziewięćdziesiąt dziewięćdziesięciu", 100: "sto stu", 200: "dwieście dwustu",
    300: "trzysta trzystu", 400: "czterysta czterystu", 500: "pięćset pięciuset",
    600: "sześćset sześciuset", 700: "siedemset siedmiuset", 800: "osiemset ośmiuset",
    900: "dziewięćset dziewięciuset", 1000: "tysiąc tysiąca tysiące tysięcy",
}  # fmt: skip
_PL_NUMBERS = {form: value for value, forms in _PL_FORMS.items() for form in forms.split()}
_PL_WORD = "|".join(sorted(_PL_NUMBERS, key=len, reverse=True))
_PL_RUN = re.compile(rf"(?<!\w)(?:(?:{_PL_WORD})(?:\s+|(?=\W)|$))+", re.IGNORECASE)


def _polish_digits(text: str) -> str:
    def number(m: re.Match[str]) -> str:
        total = current = 0
        for word in m.group(0).lower().split():
            value = _PL_NUMBERS[word]
            if value == 1000:
                total += (current or 1) * 1000
                current = 0
            else:
                current += value
        trailing = m.group(0)[len(m.group(0).rstrip()) :]
        return f"{total + current}{trailing}"

    return _PL_RUN.sub(number, text)


# Arabic numbers in words, standard and spoken ("ثلاثمئة وخمسون ريالاً", "المية وخمسين جنيه"):
# units before tens joined by "و", the article and "and" written on the word; read on a copy
# with the hamza seats and short vowels written plainly.
_ARABIC_LETTERS = re.compile("[\u0621-\u064a]")
_AR_PLAIN = str.maketrans({"أ": "ا", "إ": "ا", "آ": "ا", "ئ": "ي", "ؤ": "و", "ى": "ي", "ـ": None})
_AR_FORMS = {
    1: "واحد واحدة", 2: "اثنين اتنين اثنان", 3: "ثلاثة تلاتة ثلاث تلات", 4: "اربعة اربع",
    5: "خمسة خمس", 6: "ستة", 7: "سبعة سبع", 8: "ثمانية تمانية ثماني", 9: "تسعة تسع",
    10: "عشرة عشر", 11: "حداشر احدعشر", 12: "اتناشر", 13: "تلتاشر", 14: "اربعتاشر",
    15: "خمستاشر", 16: "ستاشر", 17: "سبعتاشر", 18: "تمنتاشر", 19: "تسعتاشر",
    20: "عشرين عشرون", 30: "ثلاثين تلاتين ثلاثون", 40: "اربعين اربعون", 50: "خمسين خمسون",
    60: "ستين ستون", 70: "سبعين سبعون", 80: "ثمانين تمانين ثمانون", 90: "تسعين تسعون",
    100: "مية ماية ميه مية مائة مايه", 200: "ميتين ماتين مايتين",
    300: "ثلاثماية ثلاثمية تلتمية تلاتمية", 400: "اربعماية اربعمية", 500: "خمسماية خمسمية",
    600: "ستماية ستمية", 700: "سبعماية سبعمية", 800: "ثمانماية ثمنماية تمنمية",
    900: "تسعماية تسعمية", 1000: "الف", 2000: "الفين", -1000: "الاف",
}  # fmt: skip
_AR_NUMBERS = {form: value for value, forms in _AR_FORMS.items() for form in forms.split()}
_AR_WORD = rf"(?:و|ب|وب)?(?:ال)?(?:{'|'.join(sorted(_AR_NUMBERS, key=len, reverse=True))})"
_AR_RUN = re.compile(
    rf"(?<![\u0621-\u064a])(?:{_AR_WORD})(?:\s+(?:{_AR_WORD}))*(?![\u0621-\u064a])"
)


def _ar_readings(word: str) -> list[str]:
    """The word, without "و" or "ب", then without the article too ("والمية": "مية")."""
    bare = word[2:] if word.startswith("وب") else word[1:] if word[:1] in "وب" else word
    return [word, bare, bare[2:] if bare.startswith("ال") else bare]


def _arabic_digits(text: str) -> str:
    def number(m: re.Match[str]) -> str:
        total = current = 0
        for word in m.group(0).split():
            value = next(v for v in map(_AR_NUMBERS.get, _ar_readings(word)) if v is not None)
            if value in (1000, -1000):
                total += (current or 1) * 1000
                current = 0
            elif value == 100 and 0 < current < 10:
                current *= 100  # "ثلاث مية"
            else:
                current += value
        return str(total + current)

    plain = re.sub("[\u064b-\u0652]", "", text.translate(_AR_PLAIN))
    return _AR_RUN.sub(number, plain)


def _turkish_value(words: list[str]) -> int:
    total = current = 0
    for word in words:
        value = _TR_NUMBERS[word]
        if value == 100:
            current = (current or 1) * 100
        elif value == 1000:
            total += (current or 1) * 1000
            current = 0
        else:
            current += value
    return total + current


def _turkish_digits(text: str) -> str:
    def number(m: re.Match[str]) -> str:
        words = m.group(0).lower().split()
        trailing = m.group(0)[len(m.group(0).rstrip()) :]
        return f"{_turkish_value(words)}{trailing}"

    digits = _TR_RUN.sub(number, text.replace("İ", "i"))
    return _TR_KURUS.sub(lambda m: f"{m.group(1)},{int(m.group(3)):02d} {m.group(2)}", digits)


def _marked(text: str, req: str | None) -> list[_Found] | None:
    """The amounts written with a currency marker; None when one contradicts the request's
    currency."""
    found: list[_Found] = []
    for m in _AMOUNT.finditer(text):
        marker = m.group("pre") or m.group("post") or ""
        num = m.group("n1") or m.group("n2") or ""
        end = m.end()
        if marker == "$" and m.group("pre"):
            precise = _DOLLAR_SIGN_THEN.match(text, m.end())
            if precise and _candidates(precise.group("code")):
                marker, end = precise.group("code"), precise.end()
        cands = _candidates(marker)
        if not cands or (marker in _WORDLIKE_CODES and marker != req):
            continue
        if req not in cands and (
            (len(marker) == 1 and marker.isascii() and marker.isalpha())
            or marker.lower() in _OWN_PAYMENT_ONLY
        ):
            continue  # "R150" is rand only in a rand payment's message
        cur = _resolve(cands, req)
        if cur is None:
            return None  # an amount in another currency makes the whole text unclear
        value = _minor(num, cur) if cur else _bare_minor(num, None)
        if value is None:
            continue
        before = _fold(text[max(0, m.start() - 40) : m.start()])
        # what is said of an amount after it is said on its own line
        after = _fold(text[end : end + 24]).split("\n", 1)[0]
        # a label opening its line (a table's "Versand", "Total"): a line of a sentence or two
        # has none
        line_start = text.rfind("\n", 0, m.start()) + 1
        line = _fold(text[line_start : m.start()]) if m.start() - line_start <= _LABEL_LINE else ""
        role = _role(before, after, line)
        if role is None:
            continue
        if not role and _A_UNIT_BEFORE.search(text[max(0, m.start() - 40) : m.start()]):
            role = "unit"
        asked = bool(
            _ASK.search(before[-30:])
            or re.match(rf"(?:'\w+)?\s*(?:de\s+)?(?:{_ASK_WORD})", after)
            or _DIFFERENCE.search(before[-25:] + " " + after[:14])
        )
        found.append(_Found(value, cur, asked, role, m.start(), m.end()))
    return found


_DATE_WORD = re.compile(
    r"\b(?:on|from|since|until|vom|am|seit|bis|du|le|depuis|desde|del|dal|il|van|sinds|op|em|z|od|do"
    r"|den|fran|sedan)\s*$"
)


def _a_date(num: str, before: str, next_char: str) -> bool:
    """ "am 12.01." or "z 12.01" (the 12th of January) rather than a price of 12.01."""
    day, _, month = num.replace(",", ".").partition(".")
    if not (day.isdigit() and month.isdigit() and 1 <= int(day) <= 31 and 1 <= int(month) <= 12):
        return False
    return next_char == "." or bool(_DATE_WORD.search(before))


# "it is now 299", "صار سعرها 299", "jetzt kostet es 79": the new price, written without the
# currency sign the price paid had
_NOW = re.compile(
    r"(?:\bnow\b|\bjetzt\b|maintenant|\bahora\b|\bagora\b|\bora\b|\bnu\b|\bteraz\b"
    r"|\b[şs]imdi\b|\bprice\b|\bpreis\b|\bprix\b|\bprecio\b|\bpre[çc]o\b|\bprezzo\b|\bprijs\b"
    r"|\bcena\b|\bfiyat\w*|الحين|الآن|الان|دلوقتي|هلق|سعر\w*|السعر)"
    r"[^\d\n.!?]{0,20}?(?<![\d.,])(?P<n>\d+(?:[.,]\d{1,2})?)(?![\d]|[.,]\d)",
    re.IGNORECASE,
)


def _price_now(text: str, found: Sequence[_Found], paid: tuple[int, str]) -> tuple[int, str] | None:
    """The difference between the one price marked and a lower one written after "now" or
    "price" without a marker."""
    marked = {f.start for f in found} | {f.end for f in found}
    for m in _NOW.finditer(text):
        if m.start("n") in marked or m.end("n") in marked:
            continue
        value = _minor(m.group("n"), paid[1]) if paid[1] else _bare_minor(m.group("n"), None)
        if value is not None and 0 < value < paid[0]:
            return paid[0] - value, paid[1]
    return None


def _choose(
    found: Sequence[_Found],
    difference: bool = False,
    *,
    text: str = "",
    folded: str = "",
) -> tuple[int, str] | None:
    """The one amount asked for among those found (unit prices only when nothing else is
    there; shipping and tax only when asked, and then the one fee named), then, in a text
    with a pasted table (`text`), the line the customer's words name, or the one amount of
    their own sentences; else the one total when no fee line is there, else None: that is
    not clear. When the text asks for "the difference" and no amount is asked for itself: the
    gap between its two prices, the one amount named ("it went down $10"), or None among
    more. Charged twice with two amounts, one double the other: the smaller, one charge.
    (`folded`: the text folded, where the fee asked and "twice" are read.)"""
    everything = found
    fees = any(f.role == "fee" for f in found)
    found = [f for f in found if f.role != "fee" or f.asked]
    if any(f.role != "unit" for f in found):
        found = [f for f in found if f.role != "unit"]
    if difference and not any(f.asked for f in found):
        prices = sorted({(f.value, f.currency) for f in found})
        if len(prices) == 2 and prices[0][1] == prices[1][1]:
            return prices[1][0] - prices[0][0], prices[0][1]
        if len(prices) > 2:
            return None
        if len(prices) == 1 and text:
            now = _price_now(text, found, prices[0])
            if now is not None:
                return now
    asked = {(f.value, f.currency) for f in found if f.asked}
    if len(asked) == 1:
        return next(iter(asked))
    from_table = _table(text, everything) if text else None
    if from_table is not None:
        return from_table
    distinct = {(f.value, f.currency) for f in found}
    if len(distinct) == 1:
        return next(iter(distinct))
    if _FEE_ASKED.search(folded):
        charged = {(f.value, f.currency) for f in everything if f.role.startswith("fee")}
        if len(charged) == 1:
            return next(iter(charged))
    distinct = {(f.value, f.currency) for f in found}
    if len(distinct) == 2 and _TWICE.search(folded):
        (low, code), (high, other) = sorted(distinct)
        if code == other and high == 2 * low:
            return low, code
    if text:
        mine = _own_amount(text, everything)
        if mine is not None:
            return mine
    # over a table with a fee line, the total only when the whole is asked ("the entire
    # order", "siparişin tamamını"): the fee is then refunded with the rest
    whole = fees and text and _WHOLE.search(_fold(text)) is not None
    totals = (
        {(f.value, f.currency) for f in everything if f.role == "total"}
        if not fees or whole
        else set()
    )
    return next(iter(totals)) if len(totals) == 1 else None


# "charged twice", "zweimal abgebucht", "iki kere çekti": a duplicate, each charge the same
_TWICE = re.compile(
    r"\btwice\b|\b(?:two|2) (?:times|charges|payments)|\bdouble|\bdoppelt|\bzweimal|deux fois"
    r"|\bdos veces|\bduas vezes|\bdue volte|\btwee keer|\bdwa razy|\bdwukrotnie|\btva ganger"
    r"|\biki (?:kere|kez|defa)|مرتين|二重|2回"
)
# A quoted line of an earlier mail left in the middle of a reply; a signature's "-- " line and
# what follows it (a name, a title, a note in brackets); an HTML comment, which no reader sees.
_QUOTED_LINE = re.compile(r"(?m)^[^\S\n]*>.*$")
_FOOTER = re.compile(r"(?m)^--[^\S\n]?$[\s\S]*")
_COMMENT = re.compile(r"<!--[\s\S]*?(?:-->|$)")


def _rows(text: str, found: Sequence[_Found]) -> tuple[dict[int, list[_Found]], set[int]]:
    """The amounts by the line they are on (its start), and which of those lines make a pasted
    order table or statement: lines that end with an amount, when there are two or more."""
    rows: dict[int, list[_Found]] = {}
    for f in found:
        rows.setdefault(text.rfind("\n", 0, f.start) + 1, []).append(f)
    table = {
        at
        for at, amounts in rows.items()
        if not text[amounts[-1].end : _line_end(text, at)].strip(" \t|")
    }
    return rows, table if len(table) >= 2 else set()


def _table(text: str, found: Sequence[_Found]) -> tuple[int, str] | None:
    """In a text with a pasted order table or statement: the one item line the customer's own
    words name ("refund the glasses", "nur die Feuerwache"), first where they ask for a refund,
    else anywhere but where they say they keep something; not when they ask for the whole."""
    rows, table = _rows(text, found)
    if not table:
        return None
    own = "\n".join(line for at, line in _lines(text) if at not in table)
    if _WHOLE.search(_fold(own)):
        return None
    items = {
        at: _item_words(text[at : rows[at][0].start])
        for at in table
        if not any(f.role == "fee" for f in rows[at])
        and not _TOTAL_LABEL.match(label := _fold(text[at : rows[at][0].start]))
        and not _SUBTOTAL_LABEL.match(label)
    }
    shared = {
        w for words in items.values() for w in words if sum(w in o for o in items.values()) > 1
    }
    for said in _own_words(own):
        named = [at for at, words in items.items() if _names(words - shared, said)]
        if len(named) == 1:
            line = _line_amount(text, rows[named[0]])
            if (
                line is not None
                and rows[named[0]][-1].role != "unit"
                and _priced_per_unit(text, rows, table, list(items))
            ):
                return _quantity(text, rows[named[0]]) * line[0], line[1]
            return line
        if named:
            return None
    return None


_SUBTOTAL_LABEL = re.compile(
    r"^\s*[-*\u2022|]?\s*(?:sub-?\s?total\w*|zwischensumme|sous-total|subtotaal|ara toplam|小計"
    r"|المجموع الفرعي)"
)
# a quantity standing alone in its column ("| 2 |", "   2   ")
_QUANTITY = re.compile(r"(?:^|[|\s])(\d{1,3})(?=\s*(?:\||\s{2,}|\t|x\b|\u00d7))")


def _quantity(text: str, amounts: Sequence[_Found]) -> int:
    """The quantity written in a table's line before its price, else 1."""
    quantities = _QUANTITY.findall(
        text[text.rfind("\n", 0, amounts[0].start) + 1 : amounts[-1].start]
    )
    return int(quantities[-1]) if quantities and int(quantities[-1]) > 0 else 1


def _priced_per_unit(
    text: str, rows: dict[int, list[_Found]], table: set[int], items: list[int]
) -> bool:
    """The table's own sum says its prices are per unit: its lines' quantities times their
    prices add up to a sum it writes (a subtotal or total), and the prices alone do not."""
    if not any(_quantity(text, rows[at]) > 1 for at in items):
        return False
    each = sum(_quantity(text, rows[at]) * rows[at][-1].value for at in items)
    alone = sum(rows[at][-1].value for at in items)
    sums = {f.value for at in table if at not in items for f in rows[at]}
    return each in sums and alone not in sums


def _own_amount(text: str, found: Sequence[_Found]) -> tuple[int, str] | None:
    """Beside a pasted table or statement, the one amount the customer writes in their own
    sentences ("a charge of R$ 3.200,00 I did not make" over the statement's lines)."""
    rows, table = _rows(text, found)
    mine = {
        (f.value, f.currency)
        for at, amounts in rows.items()
        if table and at not in table
        for f in amounts
        if f.role in ("", "total")
    }
    return next(iter(mine)) if len(mine) == 1 else None


def _line_end(text: str, at: int) -> int:
    end = text.find("\n", at)
    return len(text) if end < 0 else end


def _lines(text: str) -> list[tuple[int, str]]:
    out, at = [], 0
    for line in text.split("\n"):
        out.append((at, line))
        at += len(line) + 1
    return out


# "I'm keeping the pillowcases", "le reste je le garde": what the customer keeps is not asked
_KEEP = re.compile(
    r"\bkeep\w*|\bbehalt\w*|\bgarde\w*|\bquedo\b|\bquedarme|\bfico com|\bficar com|\bhoud\w*"
    r"|\bzatrzym\w*|\bzostawi\w*|\bbehall\w*|\btenere\b|\btengo\b|\btutac\w*|\bkalsin|احتفظ|خلي"
)
# "refund the whole invoice", "tutarın tamamını": the customer asks for all of it
_WHOLE = re.compile(
    r"\b(?:whole|entire|full (?:amount|order|refund|price)|complete refund|totalit\w*|integral\w*"
    r"|inteir\w*|intero|intera|gesamte\w*|ganze\w*|volledig\w*|hele|ca[lł](?:a|ej|o[sś][cć]\w*)"
    r"|tamam[ıi]\w*)\b|كامل|全額"
)
_CLAUSE = re.compile(r"[.,;:!?()\n]|\b(?:but|aber|mais|pero|maar|ale|men|ama)\b|لكن")
_ITEM_WORD = re.compile(r"[^\W\d_]{4,}")


def _own_words(own: str) -> tuple[set[str], set[str]]:
    """The words of the customer's own sentences: those of clauses that ask for a refund, and
    of all clauses but those that say what they keep."""
    asking: set[str] = set()
    said: set[str] = set()
    for clause in _CLAUSE.split(_fold(own)):
        if _KEEP.search(clause):
            continue
        words = {_stem(w) for w in _ITEM_WORD.findall(clause)}
        said.update(words)
        if _ASK.search(clause):
            asking.update(words)
    return asking, said


def _item_words(label: str) -> set[str]:
    return {_stem(w) for w in _ITEM_WORD.findall(_fold(label))}


def _stem(word: str) -> str:
    """Arabic writes the article on the word ("السماعة" is "the سماعة")."""
    for article in ("وال", "بال", "فال", "لل", "ال"):
        if word.startswith(article) and len(word) - len(article) >= 3:
            return word[len(article) :]
    return word


def _names(item: set[str], own: set[str]) -> bool:
    """A word of the item's line is one of the customer's, or one is the other's start
    ("glass" / "glasses", "nevresim" / "nevresimin"), or the customer's ends a compound of the
    line ("Lampe" / "Stehlampe")."""
    return any(
        a.startswith(b) or b.startswith(a) or (len(b) >= 5 and a.endswith(b))
        for a in item
        for b in own
    )


_TIMES_BEFORE = re.compile(r"(\d+)\s*[x\u00d7*]\s*$")


def _line_amount(text: str, amounts: Sequence[_Found]) -> tuple[int, str] | None:
    """What a table's line costs: its last amount; a unit price only times its quantity
    ("1 x 650")."""
    last = amounts[-1]
    if last.role != "unit":
        return last.value, last.currency
    times = _TIMES_BEFORE.search(text[: last.start])
    return (int(times.group(1)) * last.value, last.currency) if times else None
