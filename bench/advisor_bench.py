"""Benchmark: the offline advisor's learned reason model against the keyword rules it replaced.

Run ``python bench/advisor_bench.py [FILE ...]``. On labelled sets never trained on (our dev
split and the two shipped evaluation sets, plus any FILE given) it prints, side by side in the
same run: reason accuracy of the keyword rules and of the model; amount accuracy of the
hand-written extractor and of `price-parser`; milliseconds per request (median and p99, one
core, the model loaded once before timing) for the keyword rules, the model alone, and the
whole `OfflineAdvisor.advise` (redaction, injection check, model, language, extraction,
summary) over all of them, the intake's split of a message (`advisor.reply.read`) and the two
together (the language detector loaded before timing, as a running desk has it); and the
installed size the advisor's data adds (weights file, corpus) and numpy.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import numpy
from price_parser import Price

from refund_desk.advisor import reply
from refund_desk.advisor.model import WEIGHTS, ReasonModel, load_model
from refund_desk.advisor.offline import OfflineAdvisor, extract_amount, keyword_classify
from refund_desk.cases.ports import AdviceRequest
from refund_desk.money import exponent

# Never trained on: our own dev split and the two sets shipped for `advisor eval`; more
# labelled files (a test split) may be given on the command line.
DEV = tuple(WEIGHTS.with_name(f"{name}.jsonl") for name in ("dev", "eval", "eval_holdout"))
ROUNDS = 5


def _timings(fn: Callable[[str], object], texts: list[str]) -> list[float]:
    """Milliseconds per call; the collector is paused so its pauses land on no single call."""
    out: list[float] = []
    gc.collect()
    gc.disable()
    try:
        return _timed(fn, texts, out)
    finally:
        gc.enable()


def _timed(fn: Callable[[str], object], texts: list[str], out: list[float]) -> list[float]:
    for _ in range(ROUNDS):
        for text in texts:
            start = time.perf_counter()
            fn(text)
            out.append((time.perf_counter() - start) * 1000)
    return out


def _p99(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.99)]


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _amount(text: str, currency: str | None) -> Decimal | None:
    found = extract_amount(text, currency.upper() if currency else None)
    if found is None:
        return None
    value, code = found
    return Decimal(value).scaleb(-(exponent(code) if code else 2))


def _accuracy(rows: list[dict[str, str]], model: ReasonModel) -> None:
    rules_right = sum(keyword_classify(r["text"])[0] == r["reason"] for r in rows)
    model_right = sum(model.predict(r["text"])[0] == r["reason"] for r in rows)
    print(f"reason accuracy   keyword rules {100 * rules_right / len(rows):5.1f}%")
    print(f"                  learned model {100 * model_right / len(rows):5.1f}%")
    hand = sum(
        _amount(r["text"], r["currency"]) == (Decimal(r["amount"]) if r["amount"] else None)
        for r in rows
    )
    parser = sum(
        Price.fromstring(r["text"]).amount == (Decimal(r["amount"]) if r["amount"] else None)
        for r in rows
    )
    print(f"amount accuracy   hand-written  {100 * hand / len(rows):5.1f}%")
    print(f"                  price-parser  {100 * parser / len(rows):5.1f}%")


def main() -> None:
    start = time.perf_counter()
    model = load_model()
    load_ms = (time.perf_counter() - start) * 1000
    advisor = OfflineAdvisor()
    texts: list[str] = []
    for path in (*DEV, *(Path(arg) for arg in sys.argv[1:])):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
        texts += [r["text"] for r in rows]
        print(f"{path.name}: {len(rows)} requests (never trained on)")
        _accuracy(rows, model)

    rules_t = _timings(keyword_classify, texts)
    model_t = _timings(model.predict, texts)
    for text in texts:  # warm: the language detector loads on the first text it is asked of
        advisor.advise(AdviceRequest(message=text, currency="EUR"))
    advise_t = _timings(lambda t: advisor.advise(AdviceRequest(message=t, currency="EUR")), texts)
    read_t = _timings(reply.read, texts)
    both_t = _timings(
        lambda t: advisor.advise(AdviceRequest(message=reply.read(t).current, currency="EUR")),
        texts,
    )
    print(f"model load (once): {load_ms:.0f} ms")
    print(f"per request, ms ({len(rules_t)} timings each)     median      p99")
    for name, values in (
        ("keyword rules", rules_t),
        ("learned model", model_t),
        ("whole advise()", advise_t),
        ("reply.read() (at intake)", read_t),
        ("reply.read() then advise()", both_t),
    ):
        print(f"  {name:<36} {statistics.median(values):8.3f} {_p99(values):8.3f}")
    ratio = statistics.median(model_t) / statistics.median(rules_t)
    print(f"model / keyword rules, median: {ratio:.2f}x")

    weights = WEIGHTS.stat().st_size
    data = _size(WEIGHTS.parent)
    numpy_size = _size(Path(numpy.__file__).parent)
    numpy_libs = Path(numpy.__file__).parent.parent / "numpy.libs"
    if numpy_libs.is_dir():
        numpy_size += _size(numpy_libs)
    print(
        f"installed size added: weights {weights / 1e6:.2f} MB, advisor data in all (weights and"
        f" corpus) {data / 1e6:.2f} MB, numpy {numpy_size / 1e6:.1f} MB"
        f" (numpy {numpy.__version__}); python {sys.version.split()[0]}"
    )


if __name__ == "__main__":
    main()
