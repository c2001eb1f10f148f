"""Which language a message is written in, to tell a language the advisor has learned from one
it has not.

The learned languages are the training corpus's (each with at least `LEARNED_LINES` written
lines), stored in the reason model's file at training time (`ReasonModel.languages`). A text
in another script is told by its letters (Arabic, kana, Hangul, Han, Cyrillic, Greek, Hebrew,
Thai, Devanagari; Persian from Arabic and Ukrainian from Russian by their own letters); a text
in Latin letters by `py3langid` (a naive Bayes over byte n-grams,
trimmed to the Latin-script languages in `_LATIN`), loaded on first use: it holds about 60 MB.
An ASCII text whose words are nearly all in the corpus's vocabulary is a learned language
without asking it (`familiar`), so a desk whose customers write English never loads it.

`lingua-language-detector` was measured first (`docs/advisor-data.md`): its high-accuracy
models need about 1 GB for the 45 languages we tell apart, and its low-accuracy mode (35-51 MB
for 16-27 Latin languages) read a Turkish sentence as Norwegian and took 18-76 ms on a first
sentence.
"""

from __future__ import annotations

import re
import threading
from typing import Any

__all__ = [
    "FAMILIAR_SHARE",
    "LEARNED_LINES",
    "NAMES",
    "detect",
    "familiar",
    "not_learned",
    "words",
]

LEARNED_LINES = 150  # written lines a language needs in the corpus to count as learned
# of an ASCII text's words in the learned languages' vocabulary: one of them. Measured on the
# sets never trained on: 334 of 390 ASCII texts of 4 words or more in a learned language reach
# it; Danish, Norwegian, Finnish, Czech, Hungarian, Romanian, Croatian, Indonesian, Catalan
# and Afrikaans sentences of ours reach 0.0-0.83.
FAMILIAR_SHARE = 0.9
_FAMILIAR_WORDS = 4  # ... and at least this many words

NAMES = {
    "af": "Afrikaans", "ar": "Arabic", "bg": "Bulgarian", "ca": "Catalan", "cs": "Czech",
    "da": "Danish", "de": "German", "el": "Greek", "en": "English", "es": "Spanish",
    "et": "Estonian", "eu": "Basque", "fa": "Persian", "fi": "Finnish", "fr": "French",
    "ga": "Irish", "gl": "Galician", "he": "Hebrew", "hi": "Hindi", "hr": "Croatian",
    "hu": "Hungarian", "id": "Indonesian", "is": "Icelandic", "it": "Italian", "ja": "Japanese",
    "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian", "ms": "Malay", "mt": "Maltese",
    "nl": "Dutch", "no": "Norwegian", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian",
    "ru": "Russian", "sk": "Slovak", "sl": "Slovenian", "sq": "Albanian", "sv": "Swedish",
    "sw": "Swahili", "th": "Thai", "tl": "Tagalog", "tr": "Turkish", "uk": "Ukrainian",
    "ur": "Urdu", "vi": "Vietnamese", "zh": "Chinese",
}  # fmt: skip
# Written in Latin letters: told apart by py3langid.
_LATIN = [
    "af",
    "ca",
    "cs",
    "da",
    "de",
    "en",
    "es",
    "et",
    "eu",
    "fi",
    "fr",
    "ga",
    "gl",
    "hr",
    "hu",
    "id",
    "is",
    "it",
    "lt",
    "lv",
    "ms",
    "mt",
    "nl",
    "no",
    "pl",
    "pt",
    "ro",
    "sk",
    "sl",
    "sq",
    "sv",
    "sw",
    "tl",
    "tr",
    "vi",
]

_WORDS = re.compile(r"[^\W\d_]{2,}")
# Scripts by their letters; the order matters where scripts share letters (kana before Han).
_SCRIPTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ja", re.compile(r"[\u3040-\u30ff]")),
    ("ko", re.compile(r"[\uac00-\ud7af\u1100-\u11ff]")),
    ("zh", re.compile(r"[\u4e00-\u9fff]")),
    ("ar", re.compile(r"[\u0600-\u06ff\u0750-\u077f]")),
    ("ru", re.compile(r"[\u0400-\u04ff]")),
    ("el", re.compile(r"[\u0370-\u03ff]")),
    ("he", re.compile(r"[\u0590-\u05ff]")),
    ("th", re.compile(r"[\u0e00-\u0e7f]")),
    ("hi", re.compile(r"[\u0900-\u097f]")),
)
# Within a script, a language its own letters tell apart, however few of the text's letters
# they are: Persian writes پ چ ژ گ and its own yeh and kaf (ی ک, never in Arabic), Ukrainian
# і ї є ґ (never in Russian); one in `_OWN_SHARE` of the script's letters is enough.
_OWN_LETTERS: dict[str, tuple[str, re.Pattern[str]]] = {
    "ar": ("fa", re.compile(r"[\u067e\u0686\u0698\u06af\u06cc\u06a9]")),
    "ru": ("uk", re.compile(r"[\u0456\u0457\u0454\u0491\u0406\u0407\u0404\u0490]")),
}
_OWN_SHARE = 40
_LETTER = re.compile(r"[^\W\d_]")


def words(text: str) -> list[str]:
    """The words of a text as the vocabulary holds them: lower case, letters only."""
    return _WORDS.findall(text.lower())


def familiar(text: str, vocabulary: frozenset[str]) -> bool:
    """An ASCII text nearly all of whose words the corpus holds: one of its languages."""
    if not text.isascii():
        return False
    found = words(text)
    if len(found) < _FAMILIAR_WORDS:
        return False
    return sum(w in vocabulary for w in found) >= FAMILIAR_SHARE * len(found)


_LOCK = threading.Lock()
_DETECTOR: list[Any] = []


def _latin_detector() -> Any:
    with _LOCK:
        if not _DETECTOR:
            import numpy as np
            from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier
            from py3langid.modelio import load_model

            ptc, pc, classes, nextmove, row, output = load_model(MODEL_DIR / MODEL_FILE)
            keep = [i for i, code in enumerate(classes) if code in _LATIN]
            # only the Latin columns are kept: the other languages' weights are freed
            _DETECTOR.append(
                LanguageIdentifier(
                    np.ascontiguousarray(np.asarray(ptc)[:, keep]),
                    np.asarray(pc)[keep],
                    [classes[i] for i in keep],
                    nextmove,
                    output,
                    norm_probs=True,
                    tk_row=row,
                )
            )
        return _DETECTOR[0]


def detect(text: str) -> str | None:
    """The ISO 639-1 code of the language `text` is written in; None when it has no letters."""
    letters = _LETTER.findall(text)
    if not letters:
        return None
    for code, script in _SCRIPTS:
        # a script counts when a fifth of the letters are in it ("注文番号 A-1234" is Japanese)
        in_script = len(script.findall(text))
        if in_script * 5 >= len(letters):
            own = _OWN_LETTERS.get(code)
            if own is not None and len(own[1].findall(text)) * _OWN_SHARE >= in_script:
                return own[0]
            return code
    code, _ = _latin_detector().classify(text)
    return str(code)


def not_learned(code: object) -> str:
    """What a person reads: "written in Finnish, which the advisor has not learned"."""
    name = NAMES.get(str(code), str(code)) if code else "a language"
    return f"written in {name}, which the advisor has not learned"
