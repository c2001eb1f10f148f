"""The currency markers CLDR knows, for `advisor.extract`.

`python -m refund_desk.advisor.currencies` writes them to `data/currency_markers.json` (Babel
is a development dependency; reading the locales' data takes about two seconds, too long for
every start of the advisor; `tests/advisor/test_local_formats.py` checks the file is current).

A marker is written lower case, without bidi marks, and stands for the ISO codes listed; the
payment's currency says which of several ("ريال" is SAR, QAR or OMR). Symbols come from each
place's own currency and the euro, dollar and pound as that place writes them ("zł", "R$", "₺",
"ر.س", "د.إ", "ج.م", "د.ك", "Kč"); currency words from the names CLDR gives in Arabic and
Turkish, whose words the hand-written table in `advisor.extract` does not hold: whole names
in every plural form ("جنيهات مصرية") and the word of them that names the unit, when several
currencies' names share it ("ريال", "دينار", "lirası").
"""

from __future__ import annotations

import json
import re
from pathlib import Path

__all__ = ["MARKERS", "build", "main"]

MARKERS = Path(__file__).with_name("data") / "currency_markers.json"

# The symbols each place writes, from CLDR (Babel): "zł", "R$", "₺", "ر.س", "د.إ", "ج.م", "د.ك",
# "Kč", "kr.", "CHF"... for the currencies of the countries whose customers write to us.
_LOCALES = [
    "en_US",
    "en_GB",
    "en_IE",
    "en_AU",
    "en_CA",
    "en_IN",
    "de_DE",
    "de_AT",
    "de_CH",
    "fr_FR",
    "fr_BE",
    "fr_CH",
    "fr_CA",
    "es_ES",
    "es_MX",
    "es_AR",
    "es_CO",
    "es_CL",
    "es_PE",
    "pt_PT",
    "pt_BR",
    "it_IT",
    "it_CH",
    "nl_NL",
    "nl_BE",
    "pl_PL",
    "sv_SE",
    "da_DK",
    "nb_NO",
    "cs_CZ",
    "ja_JP",
    "tr_TR",
    "ar_SA",
    "ar_AE",
    "ar_EG",
    "ar_KW",
    "ar_QA",
    "ar_BH",
    "ar_OM",
    "ar_JO",
    "ar_MA",
    "ar_DZ",
    "ar_TN",
    "ar_LY",
    "ar_IQ",
    "ar_LB",
    # where the learned languages are also written: West and Central Africa's French, Angola's
    # and Mozambique's Portuguese, Nigeria's, Kenya's, Ghana's and South Africa's English
    "fr_SN",
    "fr_CI",
    "fr_CM",
    "pt_AO",
    "pt_MZ",
    "en_NG",
    "en_KE",
    "en_GH",
    "en_ZA",
]
_BIDI = dict.fromkeys(map(ord, "\u200e\u200f\u061c\u202a\u202b\u202c"), None)


def _cldr_symbols() -> dict[str, tuple[str, ...]]:
    """symbol (lower case, without bidi marks or a closing dot) -> the ISO codes it stands for,
    each place's own currency and the euro, dollar and pound, as CLDR writes them there."""
    from babel import Locale
    from babel.numbers import get_currency_symbol

    found: dict[str, list[str]] = {}
    for name in _LOCALES:
        locale = Locale.parse(name)
        for code in (*_OWN_CURRENCY.get(locale.territory or "", ()), "EUR", "USD", "GBP"):
            symbol = get_currency_symbol(code, locale).translate(_BIDI).strip().lower()
            # "kr." is "kr" at the end of a sentence; "ر.س." and "ر.س" are both written
            dotted = {symbol} if not re.search("[a-z]", symbol) else set()
            for written in sorted({symbol.rstrip("."), *dotted}):
                if written and written != code.lower() and code not in found.get(written, []):
                    found.setdefault(written, []).append(code)
    return {symbol: tuple(codes) for symbol, codes in found.items()}


_OWN_CURRENCY = {
    "US": ("USD",), "GB": ("GBP",), "IE": ("EUR",), "AU": ("AUD",), "CA": ("CAD",),
    "IN": ("INR",), "DE": ("EUR",), "AT": ("EUR",), "CH": ("CHF",), "FR": ("EUR",),
    "BE": ("EUR",), "ES": ("EUR",), "MX": ("MXN",), "AR": ("ARS",), "CO": ("COP",),
    "CL": ("CLP",), "PE": ("PEN",), "PT": ("EUR",), "BR": ("BRL",), "IT": ("EUR",),
    "NL": ("EUR",), "PL": ("PLN",), "SE": ("SEK",), "DK": ("DKK",), "NO": ("NOK",),
    "CZ": ("CZK",), "JP": ("JPY",), "TR": ("TRY",), "SA": ("SAR",), "AE": ("AED",),
    "EG": ("EGP",), "KW": ("KWD",), "QA": ("QAR",), "BH": ("BHD",), "OM": ("OMR",),
    "JO": ("JOD",), "MA": ("MAD",), "DZ": ("DZD",), "TN": ("TND",), "LY": ("LYD",),
    "IQ": ("IQD",), "LB": ("LBP",), "SN": ("XOF",), "CI": ("XOF",), "CM": ("XAF",),
    "AO": ("AOA",), "MZ": ("MZN",), "NG": ("NGN",), "KE": ("KES",), "GH": ("GHS",),
    "ZA": ("ZAR",),
}  # fmt: skip


# The languages whose currency words the table above does not hold, and where their names put
# the unit: first in Arabic ("ريال سعودي"), last in Turkish ("Suudi Arabistan riyali").
_UNIT_WORD_AT = {"ar": 0, "tr": -1}


def _cldr_unit_words() -> dict[str, tuple[str, ...]]:
    """Currency words as CLDR names them in Arabic and Turkish: a whole name ("Türk lirası",
    "ريال سعودي") and the word of it that names the unit, which several currencies' names
    share ("ريال" of SAR, QAR and OMR; "دينار"; "lirası"), in every plural form CLDR has
    ("جنيهات"). A shared word stands for each of our currencies whose name holds it; the
    payment's currency says which."""
    from babel import Locale

    ours = {code for codes in _OWN_CURRENCY.values() for code in codes} | {"EUR", "USD", "GBP"}
    found: dict[str, list[str]] = {}
    for language, at in _UNIT_WORD_AT.items():
        data = Locale.parse(language)._data
        names: dict[str, set[str]] = {}
        for code, name in data["currency_names"].items():
            names.setdefault(code, set()).add(str(name).lower())
        for code, forms in data["currency_names_plural"].items():
            names.setdefault(code, set()).update(str(form).lower() for form in forms.values())
        holders: dict[str, set[str]] = {}
        for code, forms in names.items():
            for form in forms:
                for word in form.split():
                    holders.setdefault(word, set()).add(code)
        for code in sorted(ours & names.keys()):
            for form in sorted(names[code]):
                words = form.split()
                unit = [words[at]] if len(words) > 1 and len(holders[words[at]]) >= 2 else []
                for written in (form, *unit):
                    if code not in found.setdefault(written, []):
                        found[written].append(code)
    return {word: tuple(codes) for word, codes in found.items()}


def build() -> dict[str, list[str]]:
    """marker -> ISO codes, sorted, as the shipped file holds them."""
    found: dict[str, list[str]] = {}
    for marker, codes in (*_cldr_symbols().items(), *_cldr_unit_words().items()):
        known = found.setdefault(marker, [])
        known += [code for code in codes if code not in known]
    return dict(sorted(found.items()))


def main() -> None:
    MARKERS.write_text(json.dumps(build(), ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"wrote {MARKERS} ({len(build())} markers)")


if __name__ == "__main__":
    main()
