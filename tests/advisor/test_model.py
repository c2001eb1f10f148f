"""The shipped reason model: rebuilt from the corpus by the training script, loaded once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from refund_desk.advisor import model as model_module
from refund_desk.advisor import train
from refund_desk.advisor.features import BUCKETS, fold, hashed_counts
from refund_desk.advisor.model import INJECTION_WEIGHTS, WEIGHTS, load_model, read
from refund_desk.advisor.train import DATA, build, build_injection
from refund_desk.cases.ports import REASONS


@pytest.fixture()
def counted_once(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The script counts each line's features again for each of its fits (one per writer left
    out); counting is a pure function of the text, so here each line is counted once and each
    fit gets its own copy of the same counts: the same weights, in a third of the time."""
    counts = cache(train.hashed_counts)
    monkeypatch.setattr(train, "hashed_counts", lambda text: Counter(counts(text)))
    yield
    counts.cache_clear()


@pytest.mark.usefixtures("counted_once")
def test_the_shipped_weights_are_what_the_training_script_builds(tmp_path: Path) -> None:
    rebuilt = tmp_path / "rebuilt.npz"
    rebuilt.write_bytes(build(DATA / "train.jsonl"))
    with np.load(WEIGHTS) as shipped, np.load(rebuilt) as fresh:
        assert sorted(shipped.files) == sorted(fresh.files)
        keys = (
            "bits",
            "ngrams",
            "digit_run",
            "classes",
            "buckets",
            "idf",
            "languages",
            "vocabulary",
        )
        for key in keys:
            assert np.array_equal(shipped[key], fresh[key]), key
        # liblinear with a fixed seed; a different CPU may round the last float16 bit apart
        assert np.allclose(shipped["coef"], fresh["coef"], atol=2e-3)
        assert float(shipped["temperature"]) == pytest.approx(float(fresh["temperature"]), 0.02)


@pytest.mark.usefixtures("counted_once")
def test_the_shipped_injection_weights_are_what_the_training_script_builds(
    tmp_path: Path,
) -> None:
    rebuilt = tmp_path / "injection.npz"
    rebuilt.write_bytes(build_injection((DATA / "train.jsonl", DATA / "dev.jsonl")))
    with np.load(INJECTION_WEIGHTS) as shipped, np.load(rebuilt) as fresh:
        assert sorted(shipped.files) == sorted(fresh.files)
        for key in ("bits", "ngrams", "digit_run", "classes", "buckets", "idf"):
            assert np.array_equal(shipped[key], fresh[key]), key
        assert np.allclose(shipped["coef"], fresh["coef"], atol=2e-3)
        assert np.allclose(shipped["intercept"], fresh["intercept"], atol=1e-3)


def test_the_model_is_read_once_and_knows_every_reason() -> None:
    model = load_model()
    assert load_model() is model
    assert set(model.classes) == set(REASONS)
    probs = model.probabilities("The vase arrived broken")
    assert probs.shape == (len(REASONS),)
    assert probs.sum() == pytest.approx(1.0)


def test_weights_from_other_features_are_refused(tmp_path: Path) -> None:
    with np.load(WEIGHTS) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["bits"] = np.int64(12)
    path = tmp_path / "old.npz"
    np.savez(path, **arrays)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="other features"):
        read(path)
    assert path not in model_module._LOADED


def test_features_fold_text_and_stay_in_range() -> None:
    assert fold("Reçu CASSÉ, Straße") == "recu casse, strasse"
    counts = hashed_counts("Kaputt angekommen! kaputt")
    assert counts and all(0 <= b < BUCKETS for b in counts)
    assert hashed_counts("kaputt") == hashed_counts("KAPUTT")
    assert hashed_counts("") == {}
