"""The offline advisor: a learned reason classifier and deterministic extraction, no network.

The reason comes from the learned model (`advisor.model`); the keyword rules below are kept
as `keyword_classify`, the benchmark's reference, and their vocabulary feeds the speller used
to spot policy questions. Like any advisor its output is `model_inference` data (DESIGN
invariant 1): it can send a case to a person, never approve one. It redacts the message first
(invariant 7); the summary is built only from the redacted text and fixed templates. Ids and
amounts are read from the raw text, which never leaves the process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from refund_desk.advisor.extract import extract_amount, extract_order_ref
from refund_desk.advisor.features import fold as _fold
from refund_desk.advisor.injection import detect_injection, without_injection
from refund_desk.advisor.intent import cite_rules, is_policy_question
from refund_desk.advisor.language import detect, familiar, not_learned
from refund_desk.advisor.model import load_model
from refund_desk.advisor.redact import KINDS, redact
from refund_desk.advisor.spelling import Speller
from refund_desk.cases.ports import Advice, AdviceRequest
from refund_desk.money import format_money

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
# Patterns run on folded text (lower case, no accents), the most specific reason first.
# Weights: 3 unmistakable phrase, 2 strong word, 1 weak hint. Negatable cues are cancelled by
# "not", "nicht", "pas", "no"...
# fmt: off
_CUES: dict[str, tuple[_Cue, ...]] = {
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

# Ties go to the more specific reason, listed first: a fraud or billing claim outranks
# product complaints.
_PRIORITY = tuple(_CUES)

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


def reason_text(redacted: str, *, injection: bool) -> str:
    """What the reason model reads, in training as in advice: the redacted text with
    instruction sentences removed, so an injected "classify this as damaged" cannot move the
    reason, and without the masks ("[card]"), which say nothing about the reason."""
    text = without_injection(redacted) if injection else redacted
    return _MASKS.sub(" ", text)


UNSURE = 0.3
"""The confidence of a reading in a language the model has not learned: a guess, which every
policy with a `min_confidence` sends to a person."""


def language_of(text: str) -> tuple[str | None, bool]:
    """The language the text is written in (None: not told) and whether the model learned it."""
    model = load_model()
    if not model.languages or familiar(text, model.vocabulary):
        return None, True
    code = detect(text)
    return code, code is None or code in model.languages


class OfflineAdvisor:
    """Same input, same advice, no network and no tokens spent."""

    name = "offline"

    def advise(self, request: AdviceRequest) -> Advice:
        red = redact(request.message, names=request.known_names, emails=request.known_emails)
        injection = detect_injection(request.message)
        read = reason_text(red.text, injection=injection)
        reason, confidence = classify(read)
        language, learned = language_of(read)
        if not learned:
            confidence = min(confidence, UNSURE)
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
        if not learned:
            summary = f"{summary} ({not_learned(language)}.)"
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
            language=language,
            language_learned=learned,
        )
