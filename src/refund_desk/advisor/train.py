"""Rebuild the shipped reason model from the corpus: `python -m refund_desk.advisor.train`.

Reads `data/train.jsonl`, fits a linear support-vector classifier (liblinear, fixed seed) on
hashed character n-grams (`advisor.features`), rounds the weights to float16 as shipped, then
fits the softmax temperature on both dev sets (`data/dev.jsonl`, our own, and
`data/dev_other_writer.jsonl`, another writer's) by minimising their log loss. The same input
gives the same file. Needs scikit-learn (a development dependency); inference needs numpy only.
"""

from __future__ import annotations

import argparse
import io
import json
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
from scipy.sparse import csr_matrix
from sklearn.svm import LinearSVC

from refund_desk.advisor.features import BITS, BUCKETS, NGRAMS, hashed_counts, tfidf
from refund_desk.advisor.model import WEIGHTS, ReasonModel, read
from refund_desk.cases.ports import REASONS

__all__ = ["build", "main"]

DATA = Path(__file__).with_name("data")
C = 1.0  # liblinear's regularisation, chosen among 0.1-2 on 5 folds of train (see the datasheet)
SEED = 0
DEV = (DATA / "dev.jsonl", DATA / "dev_other_writer.jsonl")
TEMPERATURES = np.exp(np.linspace(math.log(0.02), math.log(2.0), 400))


def _rows(path: Path) -> list[tuple[str, str]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            data = json.loads(line)
            out.append((data["text"], data["reason"]))
    return out


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


def build(train: Path, dev: Sequence[Path] = DEV) -> bytes:
    """The weights file's bytes for this corpus."""
    rows = _rows(train)
    classes = tuple(sorted(REASONS))
    counts = [hashed_counts(text) for text, _ in rows]
    idf, unseen = _idf(counts)
    y = np.array([classes.index(reason) for _, reason in rows])
    svm = LinearSVC(C=C, random_state=SEED, max_iter=20000)
    svm.fit(_matrix(counts, idf, unseen), y)
    buckets = np.array(sorted(idf), dtype=np.int32)
    coef = svm.coef_.T[buckets].astype(np.float16)
    intercept = svm.intercept_.astype(np.float64)

    model = ReasonModel(
        classes=classes,
        rows={int(b): i for i, b in enumerate(buckets)},
        idf=idf,
        unseen_idf=unseen,
        coef=coef.astype(np.float32),
        intercept=intercept,
        temperature=1.0,
    )
    dev_rows = [row for path in dev for row in _rows(path)]
    margins = np.array([model.margins(text) for text, _ in dev_rows])
    y_dev = np.array([classes.index(reason) for _, reason in dev_rows])
    temperature = float(min(TEMPERATURES, key=lambda t: _log_loss(margins, y_dev, float(t))))

    out = io.BytesIO()
    np.savez_compressed(
        out,
        bits=np.int64(BITS),
        ngrams=np.array(NGRAMS, dtype=np.int64),
        classes=np.array(classes),
        buckets=buckets,
        idf=np.array([idf[int(b)] for b in buckets], dtype=np.float32),
        unseen_idf=np.float64(unseen),
        coef=coef,
        intercept=intercept,
        temperature=np.float64(round(temperature, 6)),
    )
    return out.getvalue()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=Path, default=DATA / "train.jsonl")
    parser.add_argument("--dev", type=Path, nargs="+", default=list(DEV))
    parser.add_argument("--out", type=Path, default=WEIGHTS)
    args = parser.parse_args(argv)
    args.out.write_bytes(build(args.train, args.dev))
    model = read(args.out)
    print(
        f"wrote {args.out} ({args.out.stat().st_size:,} bytes, {len(model.rows):,} n-gram rows,"
        f" temperature {model.temperature:.4f})"
    )


if __name__ == "__main__":
    main()
