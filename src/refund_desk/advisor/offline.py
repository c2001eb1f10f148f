"""The offline advisor: a learned reason classifier and deterministic extraction, no network.

The reason comes from the linear model over character n-grams shipped with the package
(`advisor.model`, trained on `data/train.jsonl`); the keyword rules below are kept as
`keyword_classify`, the reference the benchmark and the datasheet compare against, and their
vocabulary still feeds the speller used to spot policy questions.

It is the default when no model is configured and the fallback the tests rely on. Like any
advisor its output is `model_inference` data (DESIGN invariant 1): it can send a case to a
person, never approve one. It redacts the message first (invariant 7); the summary is built
only from the redacted text and fixed templates. Ids and amounts are read from the raw text,
which never leaves the process.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from refund_desk.advisor.features import fold as _fold
from refund_desk.advisor.intent import cite_rules, is_policy_question
from refund_desk.advisor.model import load_model
from refund_desk.advisor.redact import KINDS, redact
from refund_desk.advisor.spelling import Speller
from refund_desk.cases.ports import REASONS, Advice, AdviceRequest
from refund_desk.money import exponent, format_money, to_minor

__all__ = [
    "OfflineAdvisor",
    "classify",
    "detect_injection",
    "extract_amount",
    "extract_order_ref",
    "keyword_classify",
]


# ---------------------------------------------------------------- classification


@dataclass(frozen=True)
class _Cue:
    pattern: re.Pattern[str]
    weight: int
    negatable: bool  # a plain adjective like "damaged": "not damaged" cancels it


def _cues(*specs: tuple[int, bool, str]) -> tuple[_Cue, ...]:
    """Compile (weight, negatable, alternatives) specs; alternatives are separated by " | "."""
    return tuple(
        _Cue(re.compile(r"\b(?:" + "|".join(alts.split(" | ")) + r")\b"), w, n)
        for w, n, alts in specs
    )


_NT = r"(?:n't|not|never)"  # inside phrases that carry their own negation
_ARRIVED = r"(?:arrived|came|was delivered)"
# Patterns run on folded text (lower case, no accents). Weights: 3 unmistakable phrase,
# 2 strong word, 1 weak hint. Negatable cues are cancelled by "not", "nicht", "pas", "no"...
# fmt: off
_CUES: dict[str, tuple[_Cue, ...]] = {
    "damaged": _cues(
        (3, True, rf"{_ARRIVED} (?:broken|cracked|smashed|shattered|damaged|dented|crushed|torn)"),
        (3, False, r"(?:broken|cracked|smashed|shattered|damaged|crushed) (?:in|during) "
                   r"(?:transit|shipping|delivery|the post|the mail)"),
        (2, True, r"damaged? | broken | cracked | smashed | shattered | dented | crushed"
                  r" | scratched | torn | ripped | leak(?:ed|ing)"),
        (2, True, r"beschadigt | kaputt | zerbrochen | gebrochen | endommagee? | cassee?"
                  r" | abimee? | brisee? | danad[oa] | rot[oa] | estropead[oa]"),
        (3, False, rf"{_ARRIVED} (?:in pieces|chipped|snapped) | in pieces | shattered"),
        (2, True, r"chipped | snapped | bent | rott[oa] | quebrad[oa] | danneggiat[oa]"
                  r" | beschadigd | kapot"),
    ),
    "defective": _cues(
        (3, False, r"stopped working | quit working | dead on arrival | malfunction(?:s|ing|ed)?"),
        (3, False, rf"(?:does|do|did|will|wo|won|can)\s?{_NT} (?:turn on|power on|switch on"
                   r"|start|boot|charge|work)"),
        (3, False, r"(?:is|are|was|it's|its)\s?(?:n't|not) working | not working"),
        (2, True, r"faulty | defective | defect | broke after | keeps (?:crashing|shutting"
                  r" off|turning off|restarting|disconnecting)"),
        (3, False, r"funktioniert (?:nicht|nicht mehr) | geht nicht(?: an)? | defekt"
                   r" | ne (?:fonctionne|marche|s'allume) (?:pas|plus) | defectueux"
                   r" | no funciona | no enciende | defectuos[oa] | dejo de funcionar"),
        (2, False, r"non funziona | si spegne | nao funciona | werkt niet | (?:has|have) a defect"
                   r" | came apart | fell apart | (?:jams|crashes|overheats) | no sound"),
    ),
    "not_received": _cues(
        (3, False, rf"(?:has|have|had|did|does|was|were|is)?\s?{_NT} (?:yet )?(?:been )?"
                   r"(?:arrived?|received|delivered|come|shown up|turned up)"
                   r"(?! (?:a|my|the|any) (?:refund|reply|response|answer))"),
        (3, False, r"lost in (?:transit|the mail|the post|shipping) | never (?:got|came|showed up)"
                   r" | still waiting for (?:my|the) (?:order|package|parcel|delivery)"),
        (2, False, r"where is my (?:order|package|parcel) | (?:package|parcel) (?:was )?"
                   r"(?:lost|stolen|missing) | missing (?:package|parcel|delivery)"),
        (3, False, r"nicht (?:angekommen|erhalten|geliefert) | nie angekommen"
                   r" | (?:jamais|pas) (?:recue?s?|arrivee?s?|livree?s?)"
                   r" | n'est (?:jamais|pas) arrivee?s?"
                   r" | no (?:ha )?llega(?:do|o) | nunca llego | no (?:he )?recib(?:i|ido)"
                   r" | no me ha llegado"),
        (3, False, r"(?:lost|misplaced) (?:my|the) (?:package|parcel|order|delivery)"
                   r" | (?:arrived|came) empty | (?:box|parcel|package) (?:was |is )?empty"
                   r" | nothing (?:was )?inside | (?:order|package|parcel|items?) (?:is |are )?"
                   r"missing | (?:is|are|was|were) missing | nooit aangekomen | niet ontvangen"
                   r" | nunca chegou | non (?:e )?(?:mai )?arrivat[oa]"),
    ),
    "wrong_item": _cues(
        (3, False, r"wrong (?:size|colou?r|item|product|model|one|thing|version|book|shoes?"
                   r"|part|article)"),
        (3, False, r"(?:sent|shipped|received|got|delivered) (?:me )?(?:the |a )?"
                   r"(?:wrong|different|incorrect) | not what i ordered"
                   r" | different (?:item|product) than"),
        (1, False, r"incorrect (?:item|size|colou?r) | doesn't fit | does not fit"
                   r" | too (?:small|big|large|tight)"),
        (3, False, r"falsche[rns]? (?:grosse|farbe|artikel|produkt)"
                   r" | mauvaise? (?:taille|couleur|article|produit)"
                   r" | (?:talla|color|articulo|producto) (?:equivocad[oa]|incorrect[oa])"),
        (2, False, r"instead of | different (?:edition|version|model|size|colou?r|item|product)"
                   r" | ordered (?:\S+ ){1,8}(?:and|but) (?:got|received|was sent|they sent)"
                   r" | (?:tamanho|cor|produto|taglia) (?:errad[oa]|sbagliat[oa])"
                   r" | verkeerde (?:maat|kleur)"),
    ),
    "late": _cues(
        (3, True, r"(?:too|very|way) late | (?:arrived|came|delivered) (?:late|after)"
                  r" | late delivery"),
        (3, False, r"(?:days|weeks|a week|a day) late | after the (?:wedding|birthday|event"
                   r"|party|holiday|deadline) | missed the (?:event|wedding|birthday|party"
                   r"|date|deadline|trip)"),
        (1, True, r"delayed | delay | late"),
        (3, False, r"zu spat | verspatet | trop tard | en retard | demasiado tarde"
                   r" | llego tarde | con retraso"),
        (2, False, r"(?:took|takes|taken) (?:a week|weeks|\d+ days|(?:two|three|ten) days)"
                   r" | only (?:came|arrived) | (?:overnight|next[- ]day|express) (?:delivery"
                   r"|shipping)"),
    ),
    "changed_mind": _cues(
        (3, False, rf"changed my mind | (?:do|did)\s?{_NT} (?:want|need|like) (?:it|this|them"
                   r"|these|the) | no longer (?:need|want) | don't need it anymore"),
        (2, False, rf"(?:do|did)\s?{_NT} (?:want|need|like) | not needed | found (?:it )?"
                   r"cheaper | found a better | (?:ordered|bought) (?:it |this )?by"
                   r" (?:mistake|accident)"),
        (1, False, r"cancel my order | return (?:it|this|them) for a refund"),
        (3, False, r"anders uberlegt | brauche (?:es |ihn |sie )?nicht mehr"
                   r" | gefallt mir nicht | change d'avis | plus besoin"
                   r" | cambie de (?:opinion|idea) | ya no lo (?:necesito|quiero)"),
        (2, False, r"decided to keep | take (?:it|this|them) back | (?:regret|impulse)"
                   r" | don't want (?:it|this|them)"),
    ),
    "duplicate_charge": _cues(
        (3, False, r"charged (?:me )?(?:twice|two times|2 times|2x|double) | paid twice"
                   r" | double[- ]?(?:charged|charge|billed|billing|payment)"
                   r" | billed (?:me )?twice | (?:charged|billed|debited)(?: \S+){1,4} (?:twice"
                   r"|two times|2 times)"),
        (3, False, r"duplicate (?:charge|payment|transaction|order|billing)"
                   r" | two (?:identical )?charges | charged (?:me )?again for the same"),
        (3, False, r"doppelt (?:abgebucht|berechnet|belastet|bezahlt)"
                   r" | zweimal (?:abgebucht|berechnet|belastet)"
                   r" | (?:debite|facture|preleve) deux fois | double prelevement"
                   r" | cobrad[oa] dos veces | (?:cobro|cargo) (?:doble|duplicado)"
                   r" | doble cargo | me cobraron dos veces"),
        (3, False, r"(?:went through|charged|billed|debited|taken|paid|took) twice"
                   r" | (?:two|2) identical | identical (?:charges|transactions|payments)"
                   r" | (?:two|2) times on | (?:two|2) payments for | again (?:on|for) (?:the"
                   r" same|one)"),
        (2, False, r"twice | (?:for|only) (?:one|a single) (?:order|purchase)"),
    ),
    "subscription_cancel": _cues(
        (3, False, r"cancel(?:led|ed|ling)? (?:my |the |this )?(?:subscription|membership"
                   r"|plan|renewal|auto[- ]?renewal) | unsubscribe"),
        (3, False, r"(?:stop|end|terminate) (?:my |the )?(?:subscription|membership|plan)"
                   rf" | (?:did|do)\s?{_NT} want (?:it |this |the subscription )?to renew"),
        (1, False, r"subscription | auto[- ]?renew(?:al|ed|s)? | renewal | renewed"
                   r" | recurring (?:charge|payment|billing) | membership fee"),
        (3, False, r"abo(?:nnement)? kundigen | kundigung"
                   r" | (?:annuler|resilier) (?:mon |l')abonnement"
                   r" | cancelar (?:mi )?suscripcion"),
        (1, False, r"abo | abonnement | verlangerung | renouvellement | suscripcion"
                   r" | renovacion"),
    ),
    "fraud_claim": _cues(
        (3, False, rf"(?:did|do|have)\s?{_NT} (?:make|made|place|placed|authori[sz]e"
                   r"|recogni[sz]e) (?:this|that|the|these|any)"
                   rf" | (?:did|do|have)\s?{_NT} order (?:this|that|these|it|anything)"),
        (3, False, r"unauthori[sz]ed | (?:stolen|compromised) (?:credit |debit )?card"
                   r" | card (?:was |has been |got )?(?:stolen|compromised|hacked)"
                   r" | identity theft | someone (?:else )?used my (?:card|account)"
                   r" | not me who"),
        (2, False, r"fraud(?:ulent)? | hacked | scam | without (?:my )?permission"),
        (3, False, r"nicht autorisiert | betrug | karte (?:wurde )?gestohlen | fraude"
                   r" | non autorise | carte volee | no autorice | no autorizad[oa]"
                   r" | tarjeta robada"),
    ),
}
# fmt: on

# The words the cues spell out, plus a few everyday ones: what the speller corrects towards.
_SPELLER = Speller(
    re.findall(r"[a-z]{5,}", " ".join(c.pattern.pattern for cs in _CUES.values() for c in cs))
    + re.findall(
        r"\w+",
        "received arrived delivered package parcel colour charged subscription opened broken"
        " ordered cancel working refund return damaged",
    )
)

# Break ties by how specific a reason is: a fraud or billing claim outranks product complaints.
_PRIORITY = (
    "fraud_claim",
    "duplicate_charge",
    "subscription_cancel",
    "not_received",
    "wrong_item",
    "defective",
    "damaged",
    "late",
    "changed_mind",
)

_NEGATOR = re.compile(r"\b(?:not|never|no|nicht|kein\w*|pas|jamais|nunca|without)\b|n't\b")
_CLAUSE_BREAK = re.compile(r"[.,;:!?()\n]|\b(?:but|however|aber|mais|pero|though)\b")


def _negated(text: str, start: int) -> bool:
    """A negator among the three words before `start`, within the same clause."""
    window = text[max(0, start - 40) : start]
    breaks = list(_CLAUSE_BREAK.finditer(window))
    if breaks:
        window = window[breaks[-1].end() :]
    words = window.split()[-3:]
    return bool(_NEGATOR.search(" ".join(words)))


def _scores(folded: str) -> dict[str, int]:
    scores: dict[str, int] = {}
    for reason, cues in _CUES.items():
        taken: list[tuple[int, int]] = []
        score = 0
        for cue in cues:
            for m in cue.pattern.finditer(folded):
                if any(m.start() < e and s < m.end() for s, e in taken):
                    continue  # already counted by a stronger cue of the same reason
                if cue.negatable and _negated(folded, m.start()):
                    continue
                taken.append((m.start(), m.end()))
                score += cue.weight
        if score:
            scores[reason] = score
    return scores


def classify(text: str) -> tuple[str, float]:
    """Reason (one of REASONS) and its calibrated probability, from the learned model."""
    if not text.strip():
        return "other", 0.1
    return load_model().predict(text)


def keyword_classify(text: str) -> tuple[str, float]:
    """The keyword rules' reason and confidence (the model's predecessor, kept as a reference).

    One reason alone scores >= 0.8 when its evidence is strong, competing reasons land in
    the middle, and no evidence (or no text) gives `other` below 0.5.
    """
    folded = _SPELLER.correct(_fold(text))
    if not folded.strip():
        return "other", 0.1
    scores = _scores(folded)
    if not scores:
        return "other", 0.3
    ranked = sorted(scores.items(), key=lambda kv: (-kv[1], _PRIORITY.index(kv[0])))
    top_reason, top = ranked[0]
    if len(ranked) == 1:
        if top >= 3:
            return top_reason, min(0.95, 0.85 + 0.03 * (top - 3))
        return top_reason, 0.8 if top == 2 else 0.65
    second = ranked[1][1]
    share = top / (top + second)  # 0.5 (tie) .. <1
    return top_reason, round(0.5 + 0.5 * (share - 0.5), 3)


# ---------------------------------------------------------------- prompt injection

_INJECTION = re.compile(
    r"""
    \b(?:ignore|disregard|forget|skip|override)\s+(?:all\s+|any\s+|the\s+|your\s+|my\s+)?
        (?:previous|prior|above|earlier|preceding|system|existing|other)?\s*
        (?:instructions?|rules|prompts?|directions|guidelines|polic(?:y|ies)|context)
  | \byou\s+are\s+now\b
  | \b(?:act|behave|respond)\s+as\s+(?:if\s+you\s+(?:are|were)|an?\s+(?:admin|system|assistant))
  | \bpretend\s+(?:to\s+be|you\s+are)
  | \bsystem\s+(?:prompt|message|instructions?)
  | \bdeveloper\s+mode\b | \bjailbreak | \bDAN\s+mode\b
  | \bas\s+an?\s+(?:ai|language\s+model|llm|assistant)\b
  | \boverride\s+(?:the\s+)?(?:policy|rules|limits?|decision)
  | \bbypass\s+(?:the\s+)?(?:policy|rules|review|approval|checks?)
  | \b(?:approve|authori[sz]e|accept)\s+(?:this|the|my)\s+refund\b
  | \b(?:auto[- ]?approve|approve\s+(?:it\s+)?(?:immediately|automatically|now))\b
  | \b(?:set|change|mark)\s+(?:the\s+)?(?:reason|amount|confidence|status|category|outcome)
        \s+(?:to|as)\b
  | \bclassify\s+(?:this|it|me)\s+as\b
  | \bnew\s+instructions?\b
  | <\s*/?\s*(?:system|assistant|instructions?)\s*> | \[/?INST\]
  | ^\s*(?:system|assistant)\s*: | \#\#\#\s*instruction
  | \bignorez\s+les\s+instructions | \bignoriere\s+(?:alle\s+)?(?:vorherigen\s+)?anweisungen
  | \bignora\s+(?:las\s+)?instrucciones
  # the other languages customers write in (folded: no accents)
  | \b(?:ignorier\w*|vergiss)\s+(?:alle\s+|die\s+|deine\s+)?(?:bisherigen\s+|vorherigen\s+)?
        (?:anweisungen|regeln|vorgaben)
  | \bignor(?:e|ez|er)\s+(?:toutes\s+)?(?:les\s+|vos\s+)?(?:instructions|regles|consignes)
  | \bignor(?:a|e|ad)\s+(?:todas\s+|tutte\s+)?(?:las\s+|le\s+|as\s+)?(?:instrucciones|istruzioni
        |instrucoes|reglas|regole|regras)
  | \bnegeer\s+(?:alle\s+)?(?:vorige\s+|eerdere\s+)?(?:instructies|regels)
  | \bzignoruj\s+(?:wszystkie\s+)?(?:poprzednie\s+)?(?:instrukcje|polecenia|zasady)
  | \bignorera\s+(?:alla\s+)?(?:tidigare\s+)?(?:instruktioner|regler)
  | \b(?:genehmige|genehmigen\s+sie|approuve[zr]?|aprueba|aprobad|approva(?:te)?|aprove|aprovem
        |keur|zatwierdz\w*|godkann)\s+(?:diese|die|ce|le|este|el|questo|il|o|deze|de|ten
        |denna)?\s*(?:erstattung|ruckerstattung|remboursement|reembolso|rimborso|terugbetaling
        |zwrot|aterbetalning)\b
  | \b(?:du\s+bist\s+jetzt|tu\s+es\s+maintenant|ahora\s+eres|ora\s+sei|je\s+bent\s+nu
        |agora\s+es|jestes\s+teraz|du\s+ar\s+nu)\b
  | (?:以前の|これまでの|上記の)?指示を(?:無視|忘れ) | システムプロンプト
  | 返金を(?:承認|許可)(?:して|しろ|せよ)
    """,
    re.IGNORECASE | re.VERBOSE | re.MULTILINE,
)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*|\n")


def detect_injection(text: str) -> bool:
    """Does the text try to instruct the system rather than describe a problem?"""
    return bool(_INJECTION.search(_fold(text)))


def _without_injection(text: str) -> str:
    """Drop whole sentences that carry an instruction, so they cannot steer the reason."""
    return "".join(
        s.group(0) for s in _SENTENCE.finditer(text) if not _INJECTION.search(s.group(0))
    )


# ---------------------------------------------------------------- order / payment reference

_PAYMENT_ID = re.compile(r"(?<![A-Za-z0-9_])(?:pi|ch|py)_[A-Za-z0-9]{6,}(?![A-Za-z0-9_])")
_ORDER_ID = re.compile(
    r"(?i)(?:\b(?:order|ordr|bestellung|bestellnummer|commande|pedido|invoice|rechnung|bestelling"
    r"|bestelnummer|ordernummer|ordine|encomenda|zam[oó]wieni[ea]|best[aä]llning|ref|reference"
    r"|referencia|riferimento)|注文番号|ご注文番号|注文)"
    r"(?:\s*(?:number|no\.?|nr\.?|num\.?|n[°º]|id|#|:))*\s*#?\s*"
    r"(?P<id>[A-Z]{0,4}-?\d[\dA-Z-]{2,24})(?![\w-])"
    r"|(?<![\w#])#(?P<hash>\d{3,20})\b"
)


def extract_order_ref(text: str) -> str | None:
    """The first processor payment id (pi_/ch_/py_) in the text, else the first order number."""
    m = _PAYMENT_ID.search(text)
    if m:
        return m.group(0)
    o = _ORDER_ID.search(text)
    if o:
        return o.group("id") or o.group("hash")
    return None


# ---------------------------------------------------------------- amounts

_DOLLARS = ("USD", "CAD", "AUD", "NZD", "SGD", "HKD", "MXN")
# Currency markers -> the ISO codes they may stand for. Longest first in the pattern.
_SYMBOLS: dict[str, tuple[str, ...]] = {
    "us$": ("USD",), "c$": ("CAD",), "ca$": ("CAD",), "a$": ("AUD",), "au$": ("AUD",),
    "nz$": ("NZD",), "s$": ("SGD",), "hk$": ("HKD",), "r$": ("BRL",), "$": _DOLLARS,
    "€": ("EUR",), "£": ("GBP",), "¥": ("JPY", "CNY"), "￥": ("JPY", "CNY"), "円": ("JPY",),
    "₩": ("KRW",), "₹": ("INR",), "₺": ("TRY",), "₽": ("RUB",), "zł": ("PLN",),
    "kd": ("KWD",), "د.ك": ("KWD",), "fr.": ("CHF",), "kr": ("SEK", "NOK", "DKK", "ISK"),
    "dollars": _DOLLARS, "dollar": _DOLLARS, "bucks": _DOLLARS, "euros": ("EUR",),
    "euro": ("EUR",), "eur": ("EUR",), "usd": ("USD",), "gbp": ("GBP",), "jpy": ("JPY",),
    "kwd": ("KWD",), "chf": ("CHF",), "cad": ("CAD",), "aud": ("AUD",), "pounds": ("GBP",),
    "yen": ("JPY",), "dinars": ("KWD", "BHD", "JOD", "IQD", "LYD", "TND", "DZD", "RSD"),
    "dinar": ("KWD", "BHD", "JOD", "IQD", "LYD", "TND", "DZD", "RSD"),
}  # fmt: skip
# A plain space groups thousands only before a trailing marker ("1 234,56 €"); after a leading
# one ("$25 100 times") it would glue two numbers together.
_NUM_PRE = r"\d{1,3}(?:[,.'\u00a0\u202f]\d{3})+(?:[.,]\d{1,3})?|\d+(?:[.,]\d{1,3})?"
_NUM = r"\d{1,3}(?:[,.'\u00a0\u202f ]\d{3})+(?:[.,]\d{1,3})?|\d+(?:[.,]\d{1,3})?"
_MARK = "|".join(
    rf"{re.escape(s)}\b" if s.isascii() and s.isalpha() else re.escape(s)
    for s in sorted(_SYMBOLS, key=len, reverse=True)
)
_AMOUNT = re.compile(
    rf"(?<![\w.,])(?:(?P<pre>{_MARK}|(?-i:[A-Z]{{3}})\b)\s?(?P<n1>{_NUM_PRE})(?![\d]|[.,]\d)"
    rf"|(?P<n2>{_NUM})\s?(?P<post>{_MARK}|(?-i:[A-Z]{{3}})\b))",
    re.IGNORECASE,
)
_ASK = re.compile(
    r"(?i)(?:refund|reimburse|back|return|credit|erstatt|zuruck|rembours|reembols|devolu)"
)
# A number with no currency marker counts only where the customer plainly asks for it, in
# folded text: "refund me 12.99", "Graag 12,99 terug", "rimborsatemi 19,90", "返金 1200".
_ASK_VERB = (
    r"refund(?:ed)?|reimburse|(?:pay|give|send)\s+(?:me\s+|us\s+)?back|amount|total"
    r"|(?:ruck)?erstatt\w*|zuruck(?:zahlen|buchen|uberweisen)?|rembours\w*|reembols\w*"
    r"|devolv\w*|devuelv\w*|rimbors\w*|restitu\w*|terugbetal\w*|terugstorten|zwro\w*"
    r"|oddac|oddajcie|aterbetala|betala\s+tillbaka|返金\w*|返して"
)
_FILLER = (
    r"(?:(?:me|moi|mi|nos|us|the|of|for|de|di|van|om|mir|uns|mij|mig|mnie|um|o|a|sie|ihr|u|ons"
    r"|jullie|vous|nous|le|la|el|il|lo|los|me\s+the)\s+){0,3}"
)
_NOT_MONEY = r"(?![\d%]|[.,]\d|\s*(?:%|percent|items?|pcs|pieces|days?|weeks?|times?|x\b|h\b))"
_BARE_ASK = re.compile(
    rf"(?:(?<!\w)(?:{_ASK_VERB})\s*:?\s*{_FILLER}(?P<n>{_NUM}){_NOT_MONEY}"
    # "12.99 back" but not "ALL 25 BACK" (all 25 items?); other languages' verbs are plain
    rf"|(?<![\w.,])(?P<m>\d+[.,]\d\d)\s+back\b"
    rf"|(?<![\w.,])(?P<k>{_NUM})\s+(?:terug|zuruck|tillbaka|de volta|indietro|z powrotem"
    r"|erstatt|rembours|reembols|rimbors|zwro|aterbetal)\w*)"
)


# ISO codes that are also English words in shouted text ("I WANT ALL 25 BACK").
_WORDLIKE_CODES = frozenset({"ALL", "TOP", "CUP", "MOP", "BOB", "PEN", "TRY", "MAD", "GEL", "SOS"})


@dataclass(frozen=True)
class _Found:
    value: int
    currency: str
    asked: bool  # near a refund word: what the customer asks for


def _candidates(marker: str) -> tuple[str, ...]:
    """ISO codes a marker may mean; an upper-case three-letter code is checked against ISO 4217."""
    known = _SYMBOLS.get(marker.lower())
    if known is not None:
        return known
    if len(marker) == 3 and marker.isalpha() and marker.isupper():
        try:
            exponent(marker)
        except ValueError:
            return ()
        return (marker,)
    return ()


def _normalise_number(num: str, currency: str) -> str | None:
    """'1.234,56' / '1,234.56' / '12,50' / "1'000" -> a plain '1234.56'; None if unclear."""
    s = re.sub(r"[\u00a0\u202f ']", "", num)
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
    """The currency a marker means here; None when it contradicts the request or is ambiguous."""
    if request_currency:
        return request_currency if request_currency in candidates else None
    return candidates[0] if len(candidates) == 1 else None


def _minor(num: str, currency: str) -> int | None:
    normalised = _normalise_number(num, currency)
    if normalised is None:
        return None
    try:
        value = to_minor(normalised, currency)
    except ValueError:
        return None
    return value if value > 0 else None


def _bare_minor(num: str, currency: str | None) -> int | None:
    """A bare number in the request's currency, or in hundredths when no currency is known."""
    if currency is not None:
        return _minor(num, currency)
    normalised = _normalise_number(num, "EUR")
    if normalised is None:
        return None
    try:
        value = Decimal(normalised).scaleb(2)
    except InvalidOperation:
        return None
    return int(value) if value > 0 and value == value.to_integral_value() else None


def extract_amount(text: str, currency: str | None = None) -> tuple[int, str] | None:
    """The amount the customer asks for, in minor units, with its ISO code.

    Amounts written with a currency marker count; failing those, a bare number the customer
    plainly asks for ("refund me 12.99", "Graag 12,99 terug"), in the request's currency, or
    with the code "" and in hundredths when the request names none. A marker that contradicts the
    request's currency, an ambiguous one ("$" with no currency given), or several different
    amounts none of which is clearly the one asked for, give None: no guessing about money.
    """
    req = currency.strip().upper() if currency else None
    if req is not None:
        try:
            exponent(req)
        except ValueError:
            req = None
    found: list[_Found] = []
    for m in _AMOUNT.finditer(text):
        marker = m.group("pre") or m.group("post") or ""
        num = m.group("n1") or m.group("n2") or ""
        cands = _candidates(marker)
        if not cands or (marker in _WORDLIKE_CODES and marker != req):
            continue
        cur = _resolve(cands, req)
        if cur is None:
            return None  # a contradicting or ambiguous amount makes the whole text unclear
        value = _minor(num, cur)
        if value is None:
            continue
        before = text[max(0, m.start() - 30) : m.start()]
        after = text[m.end() : m.end() + 12]
        asked = bool(_ASK.search(before) or re.match(r"(?i)\s*(?:back|refund)", after))
        found.append(_Found(value, cur, asked))
    if not found:
        for b in _BARE_ASK.finditer(_fold(text)):
            value = _bare_minor(b.group("n") or b.group("m") or b.group("k"), req)
            if value is not None:
                found.append(_Found(value, req or "", True))
    if not found:
        return None
    distinct = {(f.value, f.currency) for f in found}
    if len(distinct) == 1:
        return next(iter(distinct))
    wanted = {(f.value, f.currency) for f in found if f.asked}
    return next(iter(wanted)) if len(wanted) == 1 else None


# ---------------------------------------------------------------- summary

_SUMMARY = {
    "damaged": "Customer reports the item arrived damaged",
    "defective": "Customer reports the item is defective or stopped working",
    "not_received": "Customer reports the order was not received",
    "wrong_item": "Customer reports receiving the wrong item",
    "late": "Customer reports the order arrived too late",
    "changed_mind": "Customer changed their mind and no longer wants the item",
    "duplicate_charge": "Customer reports being charged more than once",
    "subscription_cancel": "Customer wants to cancel a subscription or renewal",
    "fraud_claim": "Customer says they did not authorize this purchase",
    "other": "Customer's reason does not match a known category",
}
_EXCERPT_CHARS = 160


def _excerpt(redacted: str) -> str:
    flat = " ".join(redacted.split())
    if len(flat) <= _EXCERPT_CHARS:
        return flat
    cut = flat[:_EXCERPT_CHARS].rsplit(" ", 1)[0]
    return cut + "…"


def _summary(
    reason: str, amount: tuple[int, str] | None, order_ref: str | None, redacted: str,
    injection: bool,
) -> str:  # fmt: skip
    first = _SUMMARY[reason]
    if order_ref:
        first += f" (ref {order_ref})"
    if amount is not None:
        value, code = amount
        shown = format_money(value, code) if code else f"{Decimal(value).scaleb(-2)} (no currency)"
        first += f"; asks for {shown}"
    first += "."
    if injection:
        return first + " The message contains instructions aimed at the system; they were ignored."
    excerpt = _excerpt(redacted.replace('"', "'"))
    return f'{first} Message: "{excerpt}"' if excerpt else first


# ---------------------------------------------------------------- the advisor


_MASKS = re.compile("|".join(re.escape(mask) for mask in KINDS.values()))


class OfflineAdvisor:
    """Keyword advisor: same input, same advice, no network and no tokens spent."""

    name = "offline"

    def advise(self, request: AdviceRequest) -> Advice:
        red = redact(request.message, names=request.known_names, emails=request.known_emails)
        injection = detect_injection(request.message)
        # Classify on redacted text with instruction sentences removed, so an injected
        # "classify this as damaged" cannot move the reason; the masks themselves ("[card]")
        # are left out, as they say nothing about the reason.
        text = _without_injection(red.text) if injection else red.text
        reason, confidence = classify(_MASKS.sub(" ", text))
        if reason not in REASONS:  # pragma: no cover - classify only returns REASONS
            reason = "other"
        # Read the reference from the redacted text: a "reference" that is really a card
        # number or phone number is masked there and so never becomes advice.
        order_ref = extract_order_ref(red.text)
        amount = extract_amount(request.message, request.currency)
        currency = (amount[1] or None) if amount else (request.currency or "").upper() or None
        folded = _SPELLER.correct(_fold(red.text))
        cited: tuple[str, ...] = ()
        question = is_policy_question(
            folded, has_amount=amount is not None, has_reference=order_ref is not None
        )
        if question:
            # A question has no refund reason; its topic only helps find the rules to cite.
            cited = cite_rules(folded, reason if reason != "other" else None, request.policy)
            reason, confidence = "other", 0.8
        summary = _summary(reason, amount, order_ref, red.text, injection)
        if question:
            summary = (
                "Customer asks about the refund policy"
                + (f" (rules {', '.join(cited)})." if cited else "; no published rule answers it.")
                + summary.partition(".")[2]
            )
        return Advice(
            reason=reason,
            confidence=confidence,
            order_ref=order_ref,
            amount_minor=amount[0] if amount else None,
            currency=currency,
            summary=summary,
            injection_suspected=injection,
            provider=self.name,
            tokens_used=0,
            intent="policy_question" if question else "refund",
            cited_rules=cited,
        )
