"""The payment reference a customer names: the order, invoice, charge or booking to refund.

Read from the redacted text (a card or phone number is masked there, so it never becomes a
reference). The label convention (docs/advisor-data.md): the order, invoice, charge, payment,
transaction or booking reference of what is refunded; for a subscription, the subscriber,
member or account number when nothing else names what was billed; never a tracking, parcel,
return, ticket, phone, card, tax or model number, a postcode or a coupon.

Tiers, first found wins: a processor's own id ("pi_...", "ch_..."); a reference a word
introduces ("order 1234", "Rechnung RE-2201", "fatura FT 2026/3381", "transakcja 7713-2290");
a reference that opens the message or follows "#" / "n°"; then a subscriber or account number;
then a code standing alone ("the suit (SO-20391)", "refund 3319 pls"). Among two orders named
together ("orders 55120 and 55121"), the one named again, else the second if the text says so
("cancel the second"), else the first.
"""

from __future__ import annotations

import json
import re

from refund_desk.advisor.currencies import MARKERS
from refund_desk.money import exponent

__all__ = ["REFERENCE_BEFORE", "ascii_forms", "extract_order_ref", "iso_currency"]

_PROCESSOR_ID = re.compile(
    r"(?<![A-Za-z0-9_])(?:pi|ch|py|pay|sub|in|txn|re)_[A-Za-z0-9]{6,}(?![A-Za-z0-9_])"
)
# What a reference looks like: digits, maybe after a short upper-case prefix ("RE-", "FT ",
# "ORD", "MK-CA-"), then letters, digits and inner separators ("2026/PT/7781", "8812-3390-1177",
# "000.123.456", "8a1f22c0-55d1"), or a long mixed code ("8AB12345CD6789012", "GPA.3391-0021").
_ID = (
    r"(?:(?-i:[A-Z]{1,8})(?:[-_.](?-i:[A-Z]{1,8}))*(?:[-_.]|(?-i:\s(?=\d)))?\d|\d)"
    r"[\dA-Za-z]*(?:(?:[-/_]|\.(?=\d{3}))[\dA-Za-z]+)*"
)
_END = r"(?![A-Za-z0-9_\u00c0-\u024f-])(?![.,]\d)"
# A word among them is a whole word: "Commande NOEL-88213" is not "Commande no. EL-88213".
_MARKERS = (
    r"(?:\s*(?:(?:number|nummer|numero|n[uú]mero|numaras[ıi]|no|nr|num|id|code|ref|is|ist|est|es"
    r"|era|was|war|jest|[äa]r)"
    r"(?:\.|(?![A-Za-z\u00c0-\u024f]))|n\.?\s?[°º]|n\.|رقم|#|:|,|\uff1a|\(|\uff08|番号|は))*\s*#?\s*"
)
_AND = (
    r"\s*(?:,|&|/|and|e|y|et|und|en|i|a|och|og|oraz|ou|o|or|oder|of|lub|eller|ve|و)\s*"
    r"(?:(?:o|a|el|la|le|il|the|de|het|die|der|das)\s+)?"
)
# Words that introduce the reference of a purchase or a charge, in the customers' languages.
_ORDER_WORDS = (
    r"orders?|ordr|bestellung(?:en)?|bestellnummer|bestellnr|best|auftrag|auftragsnummer"
    r"|auftragsnr|commandes?|cde|pedidos?|encomendas?|invoice|rechnung|factura|facture|fattura"
    r"|fatura|faktur[ay]?|factuur|factuurnr|nf|nota\s+fiscal|fv|ft|bestellingen|bestelling"
    r"|bestelnummer|ordernummers?|ordernr|ordin[ei]|zam[oó]wieni\w*|zam|best[aä]llning\w*"
    r"|ordern?|ordre|objedn[aá]v\w*|booking|reservation|r[ée]servation|buchung|buchungsnummer"
    r"|reserva|prenotazione|boeking|rezerwacj[ai]|bokning|bokningsnummer|ref|reference"
    r"|r[ée]f[ée]rence|referencia|riferimento|refer[eê]ncia|referentie"
    r"|(?:payment|transaction)\s+(?:reference|ref|id|number|code)|zahlungsreferenz"
    r"|betalingskenmerk|kenmerk|transaktionsnummer|transactienummer|transactiecode|transacties?"
    r"|transa[cç][aã]o|transacci[oó]n|transazione|transakcj[ai]|transaktion|transaction"
    r"|transaktionen|numer\s+zam[oó]wienia|numero\s+(?:d[ie]\s+)?(?:ordine|pedido)"
    r"|nr\s+zakupu|zakup\w*|aankoop|purchase|compra|operaci[oó]n|opera[cç][aã]o"
    # Turkish; Arabic, whose article and "and" are written on the word ("والطلب")
    r"|sipari[şs]\w*|rezervasyon\w*|i[şs]lem"
    r"|[وبف]?(?:ال)?(?:طلب(?:ية)?|فاتورة|حجز|أوردر|اوردر|عملية|معاملة|مرجع)"
)
_ORDER_REF = re.compile(
    rf"(?i)(?:\b(?:{_ORDER_WORDS})\b\.?(?:/[^\W\d_]+)?(?:\s+(?:paypal|google\s+play|stripe|klarna))?"
    rf"|注文番号|ご注文番号|注文|予約番号){_MARKERS}"
    rf"(?P<id>{_ID}){_END}(?:{_AND}(?P<other>{_ID}){_END})?"
)
# For a subscription, the number of the subscriber, member or account that was billed.
_ACCOUNT_WORDS = (
    r"abonn\w*|abonent\w*|abonee\w*|abbonat\w*|abbonament\w*|member(?:ship)?|mitglied\w*"
    r"|socio|lid(?:maatschap)?(?:s?nummer)?|lidnummer|klient\w*|client[ei]?|cliente|kunde\w*"
    r"|kundennr|kundenr|customer|account|konto|subscriber|subscription|assinatura|assinante"
    r"|suscripci[oó]n|suscriptor|medlem\w*|membre|adh[ée]rent|abo|karnet\w*|plan"
    r"|kundnummer|kundnr|matr[ií]cula|abone\w*|[üu]ye\w*|m[üu][şs]teri|(?:ال)?(?:عضوية|اشتراك|حساب|عميل)"
    r"|会員番号|お客様番号|顧客番号|契約番号"
)
# (a Japanese word ends where the code begins: "会員番号K-00771234です")
_ACCOUNT_REF = re.compile(
    rf"(?i)\b(?:{_ACCOUNT_WORDS})(?:\b|(?<=番号))\.?{_MARKERS}(?P<id>{_ID}){_END}"
)
# Text ending in a word that introduces a reference: what follows is no phone number. An
# account word counts only with a number marker ("Kundennummer", "customer no."): "Customer:"
# or "a customer, 0176..." may well be followed by a phone number.
REFERENCE_BEFORE = re.compile(
    rf"(?i)(?:\b(?:{_ORDER_WORDS})\b\.?(?:/[^\W\d_]+)?{_MARKERS}"
    rf"|\b(?:{_ACCOUNT_WORDS})\b\.?\s*(?:number|nummer|numero|n[uú]mero|no\.|nr\.?|n\.?\s?[°º]|#|id)"
    r"\.?\s*:?\s*"
    r"|\b(?:kunden?nummer|kundnummer|kundnr|kundennr|kundenr|abonnentennr|abonnentennummer|abonneenummer|lidnummer"
    r"|klantnummer|medlemsnummer|mitgliedsnummer|mitgliedsnr)\b\.?\s*:?\s*"
    r"|(?:会員番号|お客様番号|顧客番号|契約番号|注文番号)\s*[:\uff1a]?\s*"
    r"|\bmatr[ií]cula\b(?:\s+d[eo]\s+\w+)?\s*:?\s*"
    r"|رقم\s+(?:ال)?(?:عضوية|اشتراك|حساب|عميل|طلب(?:ية)?|فاتورة|حجز|عملية)\s*:?\s*"
    rf"|\b(?:nr|no|numer|numero|n[uú]mero)\.?\s+(?:d[e']\s*)?(?:{_ACCOUNT_WORDS})\b\.?\s*:?\s*"
    rf"|n\.?\s?[°º]\s*(?:d[eo']\s*)?(?:{_ACCOUNT_WORDS})\b\.?\s*:?\s*)$"
)
# "#55231" or "Nº 77120" with no word before it.
_HASH_REF = re.compile(
    rf"(?i)(?:(?<![\w#])#|(?<![\w.-])(?:n[°º]|n\.\s?º|nr\.?|n\.)\s*)(?P<id>\d{{3,20}}"
    rf"(?:[-/][\dA-Z]+)*){_END}"
)
# A reference the message opens with, as a subject line would: "D-44102 double payment".
_LEADING_REF = re.compile(r"\s*(?P<id>[A-Z]{1,4}-\d{3,12})(?![\w-])")
# A code standing alone: upper-case letters with digits, or a run of digits.
_CODE = re.compile(
    r"(?<![\w.,:/$€£¥*-])(?P<id>"
    r"[A-Z][A-Z0-9]{0,19}(?:[-_][A-Z0-9]+)*(?:/[A-Z0-9]+)*"
    r"|\d[\dA-Z]*(?:[-_][A-Z0-9]+)+"
    r"|\d[0-9A-Z]{2,}"
    r")(?![\w\u00c0-\u024f-])(?![.,:]\d)(?!\s?(?:%|x\s?\d|[-\u2013]\s?\d))"
)
# Words that claim the number after them for something other than a payment.
_CLAIMED = re.compile(
    r"(?i)\b(?:ticket|case|issue|incident|tracking|track|trackingnummer|sendung\w*|suivi|seguimiento"
    r"|rastreio|rastreamento|[sś]ledzeni\w*|przesy[lł]k\w*|paczk\w*|colis|relay|parcel|package"
    r"|pakket|zending|envio|spedizion\w*|rma|retoure|retour|retourn\w*|return|devoluci[oó]n"
    r"|devolu[cç][aã]o|reso|zwrot\w*|label|etiket\w*|model\w*|modell\w*|mod[eè]le|art(?:ikel)?"
    r"|art\.-nr|sku|part|serial|seriennummer|seryjn\w*|s[ée]rie|s/?n|imei|isbn|ean|error"
    r"|fehler\w*|erreur|errore|b[lł][aą]d|code|kod|cod|c[oó]digo|coupon|gutschein|voucher|vale"
    r"|buono|bon|promo|zip|plz|postcode|postal|postale|cap|cp|cep|tel|phone|telefon\w*|handy"
    r"|mobile|cel|celular|iban|bic|nip|nif|cpf|cnpj|pesel|vat|ust|ending|ends|endet|terminant"
    r"|termin\w*|final|finisce|ko[nń]c[oó]wk\w*|ko[nń]cz\w*|eindig\w*|slutar|size|gr[öo]ße"
    r"|taille|talla|rozmiar|maat|room|flight|vol|version|firmware|v|confirmation|bestätigung"
    r"|bestatigung|confirmaci[oó]n|confirma[cç][aã]o|conferma|potwierdzeni\w*|bevestiging"
    r"|rezygnacj\w*|k[uü]ndigung\w*|annulation|cancellation|cancelamento|cancelaci[oó]n"
    r"|zg[lł]oszeni\w*|melding|reklamac\w*|protok[oó][lł]\w*|pocztowy|postleitzahl|paczkomat"
    r"|locker|kunden\w*|customer|account|konto|police|policja|politie|polizei|denuncia"
    r"|boletim|mandat\w*|creditor|gl[aä]ubiger|tracciamento|trace|barcode|gu[ií]a|registo"
    r"|protocol[oe]?|protocollo|caso|nachforschung\w*|retouren\w*|\w*label|terminant\s+par"
    r"|termina\s+con|finisce\s+(?:con|in)|terminante|endet\s+(?:auf|mit)|ending\s+in|terminada\s+en|terminado\s+em|\*[\w.-]+|追跡番号"
    r"|takip|g[öo]nderi|posta\s+kodu|(?:ال)?(?:شحنة|تتبع|بلاغ|شكوى|تذكرة|جوال|هاتف|موبايل|بوليصة)"
    r"|شحنتك)"
    r"(?:\s+(?:in|en|em|op|auf|on|na|de|di|du|a|à|z|par|por|with|met|mit|n[°º]|no\.?|nr\.?"
    r"|number|nummer|id))*"
    # a full stop and a space after a whole word (not "Art.", "Tel.") end the sentence it
    # claims in ("zwrot. 88-1093")
    r"(?!(?<=[^\W\d_]{4})\.\s)\W{0,3}(?:no\.?|nr\.?|number|n[°º])?\W{0,3}$|郵便番号\W{0,2}$|(?:問い合わせ|伝票|追跡)番号は?\W{0,2}$"
)
_UNIT = re.compile(r"(?i)\d+(?:[.,]\d+)?(?:v|w|kw|kwh|gb|tb|mb|mah|mm|cm|km|kg|ml|hz|l|g|k|p|x)")
_QUANTITY_AFTER = re.compile(
    r"(?i)\s?-?(?:pieces?|pcs|stk|st[üu]ck\w*|teile?|stukjes?|pi[eè]ces|pezzi|piezas|pe[çc]as"
    r"|szt|sztuk|bitar|ml|mm|cm|kg|g|mah|w|v|gb|tb)\b"
)
_DATE = re.compile(r"\d{1,2}[-/.]\d{1,2}(?:[-/.]\d{2,4})?|\d{4}[-/.]\d{1,2}[-/.]\d{1,2}")
_YEAR = re.compile(r"(?:19|20)\d\d")
# a number followed by a currency word of CLDR's ("3200 درهم", "450 lirası") is a price
_CLDR_WORDS = sorted(
    (m for m in json.loads(MARKERS.read_text(encoding="utf-8")) if not m.isascii()),
    key=len,
    reverse=True,
)
_PRICE_AFTER = re.compile(
    r"(?i)\s?(?:[$€£¥円₺₹]|zł|zl|kr|kč|chf|eur|usd|gbp|pln|sek|dkk|brl|mxn|(?:tl|try|lira\w*|"
    + "|".join(map(re.escape, _CLDR_WORDS))
    + r")(?!\w))"
)
_PRICE_BEFORE = re.compile(r"(?i)(?:[$€£¥]|(?<![a-z])(?:zł|kr|chf|eur|usd|gbp|r\$))\s?$")
# "cancel the second one", "die zweite stornieren": of two orders named, the later is meant.
_SECOND = (
    r"(?:second|latter|segund[oa]|secondo|seconda|zweite\w*|deuxi[eè]me|seconde|drug\w+|tweede"
    r"|andra|anden|druh\w+|[uú]ltim[oa]|letzte\w*|dernier|derni[eè]re|ostatni\w*|laatste"
    r"|now\w+|nuev[oa]|nuov[oa]|nieuwe|neue\w*|other|otra|otro|altro|andere|ikinci\w*|sonuncu\w*"
    r"|الثاني|الثانية|التاني|التانية|الأخير|الاخير)"
)
_CANCEL = (
    r"(?:cancel\w*|\w*annul\w*|anul\w*|storn\w*|return|retourn\w*|devolv\w*|devolu\w*|restitu\w*"
    r"|zwr[oó]c\w*|odesl\w*|odeśl\w*|keep|behalte?|houd|quedo|tengo|tenho|fico|tengo|iptal\w*"
    r"|لغي|الغي|ألغي|الغاء|إلغاء|الغوا|ألغوا|بلغي)"
)
_CANCEL_THE_SECOND = re.compile(
    rf"(?i)\b{_CANCEL}\b[^.!?\n]{{0,40}}\b{_SECOND}\b|\b{_SECOND}\b[^.!?\n]{{0,40}}\b{_CANCEL}\b"
)


# Eastern Arabic and Persian digits, and the full-width digits, letters and signs Japanese
# keyboards type ("５，５００円", "ＰＰ－１２０９３"), read as the ones the patterns know, one for
# one, so a reference found is cut from the text as the customer wrote it ("رقم الطلب ٣٣٠١٩٢٨").
# A full-width comma or full stop is punctuation ("订单号 77103928，299元") except between
# full-width digits ("５，５００円"): `ascii_forms` reads those.
_FULLWIDTH = "".join(chr(0xFF01 + i) for i in range(94) if chr(0xFF01 + i) not in "，．")
DIGITS = str.maketrans(
    "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669"
    "\u06f0\u06f1\u06f2\u06f3\u06f4\u06f5\u06f6\u06f7\u06f8\u06f9\u066b\u066c" + _FULLWIDTH,
    "01234567890123456789.," + "".join(chr(0x21 + i) for i in range(94) if i not in (11, 13)),
)
_WIDE_SEPARATOR = re.compile(r"(?<=[０-９])[，．](?=[０-９])")


def ascii_forms(text: str) -> str:
    """`text` with the digits, separators and signs the patterns read, one for one."""
    text = _WIDE_SEPARATOR.sub(lambda m: "," if m.group(0) == "，" else ".", text)
    return text.translate(DIGITS)


def extract_order_ref(text: str) -> str | None:
    """The payment reference the text names, or None (see the module's docstring)."""
    read = ascii_forms(text)
    ref = _reference(read)
    if ref is None or read == text:
        return ref
    at = read.find(ref)
    return text[at : at + len(ref)]


# What the word "IBAN" introduces is an account, also when its check digits are wrong and the
# redaction left it (or masked only a part: "IBAN PT[card] 1122 3344 5"): blanked, one for one.
_AFTER_IBAN = re.compile(r"(?i:\biban\b)\W{0,3}[A-Z]{2}\d\d(?:[ ]?(?:[A-Z0-9]{1,4}|\[\w+\]))+")


def _reference(text: str) -> str | None:
    text = _AFTER_IBAN.sub(lambda m: " " * len(m.group(0)), text)
    m = _PROCESSOR_ID.search(text)
    if m:
        return m.group(0)
    named = [
        o.group(group)
        for o in _ORDER_REF.finditer(text)
        for group in ("id", "other")
        if o.group(group)
        and not _not_a_reference(
            o.group(group), "", text[o.end(group) : o.end(group) + 12], keyed=True
        )
    ]
    if named:
        # "siparişim 2025 model ..., Siparişim SO-2026-88130": a year is the weaker of two
        return _which(text, [ref for ref in named if not _YEAR.fullmatch(ref)] or named)
    lead = _LEADING_REF.match(text)
    if lead:
        return lead.group("id")
    for h in _HASH_REF.finditer(text):
        if not _CLAIMED.search(_before(text, h.start())):
            return _which(text, [h.group("id"), *_partner(text, h.end())])
    for a in _ACCOUNT_REF.finditer(text):
        if not _not_a_reference(a.group("id"), "", text[a.end() : a.end() + 12], keyed=True):
            return a.group("id")
    for c in _CODE.finditer(text):
        code = c.group("id")
        if (
            code.isdigit()
            and len(code) in (4, 5)
            and _POSTCODE_CITY.match(text, c.end())
            and _ADDRESS_BEFORE.search(_before(text, c.start()))
        ):
            continue  # "12 rue des Tanneurs, 69002 Lyon"
        if not _not_a_reference(code, _before(text, c.start()), text[c.end() : c.end() + 12]):
            return _which(text, [code, *_partner(text, c.end())])
    return None


# A postcode: four or five digits after a street's comma, then only the place's name on the line
_POSTCODE_CITY = re.compile(
    r"(?<=\d)[ \t]+[A-ZÀ-Ý][a-zà-ÿ'-]+(?:[ -]+(?:[A-ZÀ-Ý]|sur\b|am\b|an\b|de\b)[\w'-]*){0,3}"
    r"[ \t]*(?:\n|$)"
)
_ADDRESS_BEFORE = re.compile(r"(?:[^\W\d_]{2,}\.?|\[address\]),[ \t]*$")  # masked or not


def _before(text: str, start: int) -> str:
    return text[max(0, start - 40) : start]


_PARTNER = re.compile(rf"(?i){_AND}#?(?P<id>{_ID}){_END}")  # "#100234 and #100241"


def _partner(text: str, end: int) -> list[str]:
    """The second of two references named together ("40213 i 40219")."""
    p = _PARTNER.match(text, end)
    return [p.group("id")] if p and sum(ch.isdigit() for ch in p.group("id")) >= 3 else []


def _which(text: str, named: list[str]) -> str:
    """Of two orders named, the one named again, else the second if the text cancels "the
    second", else the first (of a purchase charged twice, the first is the reference)."""
    distinct = list(dict.fromkeys(named))
    if len(distinct) == 1:
        return distinct[0]
    again = [
        ref
        for ref in distinct
        if len(re.findall(rf"(?<![\w-]){re.escape(ref)}(?![\w-])", text)) > 1
    ]
    if len(again) == 1:
        return again[0]
    if _CANCEL_THE_SECOND.search(text):
        return distinct[1]
    return distinct[0]


def _not_a_reference(code: str, before: str, after: str, *, keyed: bool = False) -> bool:
    """A date, a year, a measure, a price, a currency code or a number claimed for something
    else; `keyed` when a word introduced it (then only its shape is checked)."""
    digits = sum(ch.isdigit() for ch in code)
    if digits < (2 if keyed else 3) or len(code) < 3 or len(code) > 32:
        return True
    if _a_date(code) or _UNIT.fullmatch(code):
        return True
    if not keyed and _YEAR.fullmatch(code):
        return True
    prefix = re.match(r"[A-Z]{3}(?=\s?\d)", code)
    if prefix and iso_currency(prefix.group(0)):
        return True  # "EUR49"
    if keyed:
        # "siparişte 250 TL indirim", "SO-2026-88130, 3.750 TL'nin": a number, with its
        # thousands or decimals, that a currency follows is a price
        return bool(re.fullmatch(r"\d+(?:[.,]\d+)*", code)) and _priced(after)
    if code.isdigit() and (
        not 4 <= len(code) <= 20
        or _QUANTITY_AFTER.match(after)  # "1000 pieces"
        or _priced(after)  # "1249 €"
        or _PRICE_BEFORE.search(before)
    ):
        return True
    return bool(_CLAIMED.search(before))


def _priced(after: str) -> bool:
    """A currency marker follows, of this number, not the next one ("250 TL", not "$45.00")."""
    marker = _PRICE_AFTER.match(after)
    return marker is not None and not re.match(r"\s?\d|\w", after[marker.end() :])


def _a_date(code: str) -> bool:
    """ "12-10", "03/04/2026", "2026-04-03", but not "22-81" or "118/2025"."""
    if not _DATE.fullmatch(code):
        return False
    parts = re.split(r"[-/.]", code)
    if len(parts[0]) == 4:  # the year first
        parts = parts[1:]
    first, second = int(parts[0]), int(parts[1])
    return 1 <= first <= 31 and 1 <= second <= 31 and min(first, second) <= 12


def iso_currency(code: str) -> bool:
    """`code` is an ISO 4217 code `money` knows."""
    try:
        exponent(code)
    except ValueError:
        return False
    return True
