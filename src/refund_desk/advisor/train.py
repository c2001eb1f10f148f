"""Rebuild the shipped reason model from the corpus: `python -m refund_desk.advisor.train`.

Reads `data/train.jsonl` (each text redacted and stripped as the advisor does before it
classifies), fits a linear support-vector classifier (liblinear, fixed seed) on
hashed character n-grams (`advisor.features`), rounds the weights to float16 as shipped, then
fits the softmax temperature on text by writers the model has not seen: each writer's lines
(`writer` in the corpus; lines without one are the first writer's) are scored by a model
trained without that writer, and the temperature minimises the log loss of all those scores.
So "0.8" is calibrated for a new writer, not for the phrasing the model was trained on. The
same input gives the same file. Needs scikit-learn (a development dependency); inference needs
numpy only.
"""

from __future__ import annotations

import argparse
import io
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.sparse import csr_matrix
from sklearn.linear_model import LogisticRegression
from sklearn.svm import LinearSVC

from refund_desk.advisor import reply
from refund_desk.advisor.features import (
    BITS,
    BUCKETS,
    DIGIT_RUN,
    NGRAMS,
    hashed_counts,
    tfidf,
)
from refund_desk.advisor.injection import injection_patterns
from refund_desk.advisor.language import LEARNED_LINES, words
from refund_desk.advisor.model import INJECTION_CLASSES, INJECTION_WEIGHTS, WEIGHTS, read
from refund_desk.advisor.offline import reason_text
from refund_desk.advisor.redact import redact
from refund_desk.cases.ports import REASONS

__all__ = ["build", "main"]

DATA = Path(__file__).with_name("data")
C = 1.0  # liblinear's regularisation, chosen among 0.1-2 on 5 folds of train (see the datasheet)
SEED = 0
INJECTION_ATTACKS = DATA / "injection_first_writer.jsonl"
FIRST_WRITER = "w0"  # the corpus's first writer wrote the lines that name none
TEMPERATURES = np.exp(np.linspace(math.log(0.02), math.log(2.0), 400))


@dataclass(frozen=True)
class _Row:
    text: str
    reason: str
    writer: str
    written: bool  # by hand, not a lexicon phrase or a generated variant
    lang: str = ""


def _as_advised(text: str) -> str:
    # what the customer wrote now, as the intake keeps it (`advisor.reply`); the patterns
    # decide which sentences are dropped, in training as in advice
    text = reply.read(text).current
    return reason_text(redact(text).text, injection=injection_patterns(text))


def _lines(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _rows(path: Path) -> list[_Row]:
    return [
        _Row(
            _as_advised(data["text"]),
            data["reason"],
            data.get("writer") or FIRST_WRITER,
            data.get("source", "written") == "written",
            str(data.get("lang") or ""),
        )
        for data in _lines(path)
    ]


def _idf(counts: Sequence[Counter[int]]) -> tuple[dict[int, float], float]:
    df: Counter[int] = Counter()
    for c in counts:
        df.update(c.keys())
    n = len(counts)
    # rounded to float32 as shipped, so the temperature is fitted on the shipped numbers
    idf = {b: float(np.float32(math.log((1 + n) / (1 + d)) + 1.0)) for b, d in df.items()}
    return idf, math.log(1 + n) + 1.0


def _matrix(counts: Sequence[Counter[int]], idf: dict[int, float], unseen: float) -> csr_matrix:
    data: list[float] = []
    cols: list[int] = []
    indptr = [0]
    for c in counts:
        for b, w in sorted(tfidf(c, idf, unseen).items()):
            cols.append(b)
            data.append(w)
        indptr.append(len(cols))
    return csr_matrix((data, cols, indptr), shape=(len(counts), BUCKETS))


def _log_loss(margins: npt.NDArray[np.float64], y: npt.NDArray[np.int64], t: float) -> float:
    z = margins / t
    z = z - z.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-log_p[np.arange(len(y)), y].mean())


@dataclass(frozen=True)
class _Fit:
    svm: LinearSVC
    idf: dict[int, float]
    unseen: float


def _fit(rows: Sequence[_Row], classes: tuple[str, ...]) -> _Fit:
    counts = [hashed_counts(row.text) for row in rows]
    idf, unseen = _idf(counts)
    y = np.array([classes.index(row.reason) for row in rows])
    svm = LinearSVC(C=C, random_state=SEED, max_iter=20000)
    svm.fit(_matrix(counts, idf, unseen), y)
    return _Fit(svm, idf, unseen)


def _unseen_writer_margins(
    rows: Sequence[_Row], classes: tuple[str, ...], report: dict[str, float] | None = None
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Each writer's hand-written lines, scored by a model trained without that writer (and
    that model's reason accuracy on them into `report`). Only lines in a language the others'
    lines teach (`_learned`) are returned for the calibration: a language no other writer
    wrote is one the advisor says it has not learned, with a confidence of its own
    (`offline.UNSURE`), and would only make the confidence of every other language too low."""
    margins, labels = [], []
    for writer in sorted({row.writer for row in rows}):
        held = [row for row in rows if row.writer == writer and row.written]
        if not held:
            continue
        rest = [row for row in rows if row.writer != writer]
        fit = _fit(rest, classes)
        counts = [hashed_counts(row.text) for row in held]
        # the shipped weights are float16: score held-out text with rounded weights too
        coef = fit.svm.coef_.astype(np.float16).astype(np.float64)
        x = _matrix(counts, fit.idf, fit.unseen)
        margins.append(x @ coef.T + fit.svm.intercept_)
        labels.append(np.array([classes.index(row.reason) for row in held]))
        if report is not None:
            report[writer] = float((margins[-1].argmax(axis=1) == labels[-1]).mean())
        taught = np.array([row.lang in _learned(rest) for row in held])
        margins[-1], labels[-1] = margins[-1][taught], labels[-1][taught]
    return np.vstack(margins), np.concatenate(labels)


def _learned(rows: Sequence[_Row]) -> set[str]:
    """The languages with at least `LEARNED_LINES` written lines among `rows`."""
    written = Counter(row.lang for row in rows if row.written and row.lang)
    return {lang for lang, n in written.items() if n >= LEARNED_LINES}


def build(train: Path, report: dict[str, float] | None = None) -> bytes:
    """The weights file's bytes for this corpus; `report` gets each writer's reason accuracy
    by a model trained without them."""
    rows = _rows(train)
    classes = tuple(sorted(REASONS))
    fit = _fit(rows, classes)
    buckets = np.array(sorted(fit.idf), dtype=np.int32)
    coef = fit.svm.coef_.T[buckets].astype(np.float16)
    intercept = fit.svm.intercept_.astype(np.float64)
    margins, y = _unseen_writer_margins(rows, classes, report)
    temperature = float(min(TEMPERATURES, key=lambda t: _log_loss(margins, y, float(t))))
    learned = sorted(_learned(rows))
    # the words of the learned languages' lines: what an ASCII text must nearly all be made
    # of to be read without asking the language detector (`language.familiar`); ASCII words only
    vocabulary = sorted(
        {w for row in rows if row.lang in learned for w in words(row.text) if w.isascii()}
    )
    return _weights_file(
        classes, buckets, fit.idf, fit.unseen, coef, intercept, temperature,
        languages=learned, vocabulary=vocabulary,
    )  # fmt: skip


def build_injection(corpus: Sequence[Path], attacks: Path = INJECTION_ATTACKS) -> bytes:
    """The learned injection detector's weights: a logistic regression on the same features,
    trained on a writer's attacks and look-alikes (`attacks`, labelled) and on every corpus
    line: labelled by its writer where it says `injection` (the issue-39 writers marked their
    attempts), else by the hand-written patterns (the corpus holds each writer's attempts)."""
    labelled = [(data["text"], int(bool(data["injection"]))) for data in _lines(attacks)]
    for path in corpus:
        labelled += [
            (
                data["text"],
                int(data["injection"] if "injection" in data else injection_patterns(data["text"])),
            )
            for data in _lines(path)
        ]
    texts = [text for text, _ in labelled]
    labels = [label for _, label in labelled]
    counts = [hashed_counts(text) for text in texts]
    idf, unseen = _idf(counts)
    fit = LogisticRegression(C=10.0, max_iter=3000, class_weight="balanced")
    fit.fit(_matrix(counts, idf, unseen), np.array(labels))
    buckets = np.array(sorted(idf), dtype=np.int32)
    weights = fit.coef_[0][buckets]
    # two classes as the reason model has ten: "clean" scores 0, "injection" w.x + b
    coef = np.stack([np.zeros_like(weights), weights], axis=1).astype(np.float16)
    intercept = np.array([0.0, float(fit.intercept_[0])], dtype=np.float64)
    return _weights_file(INJECTION_CLASSES, buckets, idf, unseen, coef, intercept, 1.0)


def _weights_file(
    classes: Sequence[str],
    buckets: npt.NDArray[np.int32],
    idf: dict[int, float],
    unseen: float,
    coef: npt.NDArray[np.float16],
    intercept: npt.NDArray[np.float64],
    temperature: float,
    *,
    languages: Sequence[str] = (),
    vocabulary: Sequence[str] = (),
) -> bytes:
    """The bytes of a weights file `advisor.model.read` loads: the features it was trained
    on, and a row of class weights per hashed bucket seen in training."""
    out = io.BytesIO()
    np.savez_compressed(
        out,
        bits=np.int64(BITS),
        ngrams=np.array(NGRAMS, dtype=np.int64),
        digit_run=np.int64(DIGIT_RUN),
        classes=np.array(classes),
        buckets=buckets,
        idf=np.array([idf[int(b)] for b in buckets], dtype=np.float32),
        unseen_idf=np.float64(unseen),
        coef=coef,
        intercept=intercept,
        temperature=np.float64(round(temperature, 6)),
        languages=np.array(list(languages), dtype=str),
        vocabulary=np.array(list(vocabulary), dtype=str),
    )
    return out.getvalue()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=Path, default=DATA / "train.jsonl")
    parser.add_argument("--out", type=Path, default=WEIGHTS)
    parser.add_argument("--injection-out", type=Path, default=INJECTION_WEIGHTS)
    args = parser.parse_args(argv)
    args.injection_out.write_bytes(build_injection((args.train, DATA / "dev.jsonl")))
    print(f"wrote {args.injection_out} ({args.injection_out.stat().st_size:,} bytes)")
    report: dict[str, float] = {}
    args.out.write_bytes(build(args.train, report))
    print("reason accuracy on each writer's lines, trained without that writer:")
    for writer, accuracy in report.items():
        print(f"  {writer:<12} {100 * accuracy:5.1f}%")
    model = read(args.out)
    print(
        f"wrote {args.out} ({args.out.stat().st_size:,} bytes, {len(model.rows):,} n-gram rows,"
        f" temperature {model.temperature:.4f}, {len(model.vocabulary):,} words)"
    )
    learned = " ".join(sorted(model.languages))
    print(f"learned languages (>= {LEARNED_LINES} written lines): {learned}")


if __name__ == "__main__":
    main()
