"""The learned reason classifier: a linear model over hashed character n-grams, numpy only.

Its weights are package data (`data/reason_model.npz`, rebuilt from `data/train.jsonl` by
`python -m refund_desk.advisor.train`); they are read once per process and nothing is ever
downloaded. The confidence is a softmax over the class margins divided by a temperature fitted
on writers the model was not trained on (see `advisor.train`), so that "0.8" means right about
eight times in ten on a new writer's text.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from refund_desk.advisor.features import BITS, DIGIT_RUN, NGRAMS, hashed_counts
from refund_desk.cases.ports import REASONS

__all__ = ["INJECTION_CLASSES", "INJECTION_WEIGHTS", "WEIGHTS", "ReasonModel", "load_model"]

WEIGHTS = Path(__file__).with_name("data") / "reason_model.npz"
# The learned half of the injection detector (`advisor.injection`): two classes, same features.
INJECTION_WEIGHTS = WEIGHTS.with_name("injection_model.npz")
INJECTION_CLASSES = ("clean", "injection")


# The reason model and the injection detector read the same features, most often of the same
# text (a message with nothing to redact): counted once. Read only (`margins` reads it).
_counts = lru_cache(maxsize=16)(hashed_counts)


@dataclass(frozen=True)
class ReasonModel:
    classes: tuple[str, ...]
    unseen_idf: float
    coef: npt.NDArray[np.float32]  # (rows, classes)
    intercept: npt.NDArray[np.float64]  # (classes,)
    temperature: float
    # The languages of the corpus it has learned (each with `language.LEARNED_LINES` written
    # lines or more, ISO 639-1), and the words of its corpus (`language.familiar`).
    languages: frozenset[str] = frozenset()
    vocabulary: frozenset[str] = frozenset()
    # The known buckets in ascending order, with each one's idf and row of `coef`: the
    # features of a text are looked up all at once (`margins`), not one by one in the dicts.
    sorted_buckets: npt.NDArray[np.int64] = field(default_factory=lambda: np.empty(0, np.int64))
    sorted_idf: npt.NDArray[np.float64] = field(default_factory=lambda: np.empty(0))
    sorted_rows: npt.NDArray[np.int64] = field(default_factory=lambda: np.empty(0, np.int64))

    # As dicts, for training and tests only, built on first use: a server never builds them
    # (158,000 buckets in two dicts held about 25 MB of every process that advised once).
    @cached_property
    def rows(self) -> dict[int, int]:
        """Hashed bucket -> its row of `coef`."""
        return dict(zip(self.sorted_buckets.tolist(), self.sorted_rows.tolist(), strict=True))

    @cached_property
    def idf(self) -> dict[int, float]:
        return dict(zip(self.sorted_buckets.tolist(), self.sorted_idf.tolist(), strict=True))

    def margins(self, text: str) -> npt.NDArray[np.float64]:
        """The linear model's score for each class (before calibration): the text's tf-idf
        weights (`features.tfidf`: sublinear counts times idf, scaled to unit length over
        every feature, known or not) against the known features' rows of `coef`."""
        counts = _counts(text)
        scores = self.intercept.copy()
        size = len(counts)
        if not size or not len(self.sorted_buckets):
            return scores
        buckets = np.fromiter(counts.keys(), dtype=np.int64, count=size)
        tf = 1.0 + np.log(np.fromiter(counts.values(), dtype=np.float64, count=size))
        at = np.searchsorted(self.sorted_buckets, buckets)
        at[at == len(self.sorted_buckets)] = 0  # past the last known bucket: not known
        known = self.sorted_buckets[at] == buckets
        weights = tf * np.where(known, self.sorted_idf[at], self.unseen_idf)
        norm = math.sqrt(float(weights @ weights))
        if norm == 0.0:
            return scores
        scores += (weights[known] / norm) @ self.coef[self.sorted_rows[at[known]]]
        return scores

    def probabilities(self, text: str) -> npt.NDArray[np.float64]:
        scaled = self.margins(text) / self.temperature
        scaled -= scaled.max()
        exp = np.exp(scaled)
        return exp / exp.sum()

    def predict(self, text: str) -> tuple[str, float]:
        """The most likely reason and its calibrated probability."""
        probs = self.probabilities(text)
        best = int(probs.argmax())
        return self.classes[best], float(probs[best])


def read(path: Path, classes: Sequence[str] = REASONS) -> ReasonModel:
    with np.load(path, allow_pickle=False) as data:
        if (
            int(data["bits"]) != BITS
            or tuple(int(n) for n in data["ngrams"]) != NGRAMS
            or "digit_run" not in data.files
            or int(data["digit_run"]) != DIGIT_RUN
        ):
            raise ValueError(f"{path.name} was trained with other features; rebuild it")
        known = tuple(str(c) for c in data["classes"])
        if set(known) != set(classes):
            raise ValueError(f"{path.name} knows classes {known}, not {tuple(classes)}")
        buckets = np.asarray(data["buckets"], dtype=np.int64)
        idf = np.asarray(data["idf"], dtype=np.float64)
        order = np.argsort(buckets, kind="stable")
        return ReasonModel(
            classes=known,
            unseen_idf=float(data["unseen_idf"]),
            coef=np.asarray(data["coef"], dtype=np.float32),
            intercept=np.asarray(data["intercept"], dtype=np.float64),
            temperature=float(data["temperature"]),
            languages=frozenset(str(c) for c in data["languages"])
            if "languages" in data.files
            else frozenset(),
            vocabulary=frozenset(str(w) for w in data["vocabulary"])
            if "vocabulary" in data.files
            else frozenset(),
            sorted_buckets=buckets[order],
            sorted_idf=idf[order],
            sorted_rows=order.astype(np.int64),
        )


_LOCK = threading.Lock()
_LOADED: dict[Path, ReasonModel] = {}


def load_model(path: Path = WEIGHTS, classes: Sequence[str] = REASONS) -> ReasonModel:
    """The model in `path`, read from disk once per process."""
    with _LOCK:
        model = _LOADED.get(path)
        if model is None:
            model = _LOADED[path] = read(path, classes)
        return model
