"""The cheap baselines (steps/runtime/data/baselines/): the paired statistics against known values, the per-example
counts against the tasks' own scores, each fitter on tiny data, the time bound, and the store copy validate reads."""

from __future__ import annotations

import json
from math import comb
from pathlib import Path

import numpy as np
import pytest

from paddle_mlops_core.config import load_config
from steps.runtime.data import baselines, tasks
from steps.runtime.data.baselines import cache, comparison, counts, crf, pairs, statistics, text
from steps.runtime.runner import StepError
from tests.fixtures_ernie import CONFIG, pairs_tsv, prepared_workspace, sentiment_rows


def test_mcnemar_is_the_exact_binomial_test_of_the_discordant_pairs() -> None:
    # 10 examples only the model gets right, 2 only the baseline: p = 2 * P(X <= 2), X ~ Bin(12, 1/2).
    model = np.array([True] * 10 + [False] * 2 + [True] * 30 + [False] * 5)
    base = np.array([False] * 10 + [True] * 2 + [True] * 30 + [False] * 5)
    result = statistics.mcnemar(model, base)
    assert (result.model_only, result.baseline_only) == (10, 2)
    assert result.p_value == pytest.approx(2 * sum(comb(12, k) for k in range(3)) / 2**12)  # 0.0386
    assert statistics.mcnemar(model, model).p_value == 1.0  # no discordant pair: nothing to test
    assert statistics.mcnemar([True, False], [False, True]).p_value == 1.0  # one each way: a fair coin


def test_bootstrap_interval_of_an_accuracy_difference_matches_the_normal_approximation() -> None:
    """For n = 4000 paired examples the percentile interval is close to d ± z·sd(d_i)/√n."""
    rng = np.random.default_rng(1)
    n = 4000
    base = rng.random(n) < 0.85
    model = np.where(rng.random(n) < 0.9, base, ~base)  # disagrees on ~10 %
    metric = counts.label_metric("accuracy", 1)
    as_counts = lambda c: np.stack([c, np.zeros(n), np.ones(n)], axis=1)  # noqa: E731  [correct, pred, gold]
    boot = statistics.bootstrap_difference(as_counts(model), as_counts(base), metric, samples=2000, seed=3)
    d = model.astype(float) - base.astype(float)
    assert boot.difference == pytest.approx(d.mean())
    half = 1.959964 * d.std(ddof=1) / np.sqrt(n)
    assert boot.low == pytest.approx(d.mean() - half, abs=0.003)
    assert boot.high == pytest.approx(d.mean() + half, abs=0.003)
    assert boot.low < boot.difference < boot.high and boot.confidence == 0.95


def test_bootstrap_of_identical_and_of_always_better_answers() -> None:
    metric = counts.entity_metric("micro_f1", 2)
    # per sentence: correct, predicted, gold entities of type a, type b and all types
    same = np.array([[1, 0, 1, 1, 0, 1, 1, 0, 1]] * 50, dtype=float)
    boot = statistics.bootstrap_difference(same, same, metric, samples=200)
    assert (boot.difference, boot.low, boot.high, boot.p_value) == (0.0, 0.0, 0.0, 1.0)
    worse = same.copy()
    worse[:, [0, 2]] = 0  # the baseline finds nothing right
    boot = statistics.bootstrap_difference(same, worse, metric, samples=200)
    assert boot.difference == boot.low == boot.high == 1.0 and boot.p_value == 0.0
    with pytest.raises(ValueError, match="shape"):
        statistics.bootstrap_difference(same, same[:3], metric)


def test_counts_reproduce_the_tasks_own_scores() -> None:
    labels = {0: "negative", 1: "positive", 2: "neutral"}
    rows = [{"text": "x", "label": y} for y in (0, 0, 1, 1, 1, 2)]
    answers = [{"label": labels[y]} for y in (0, 1, 1, 1, 0, 0)]
    report = tasks.for_type("text-classification").scores(rows, answers, labels)
    for name in ("accuracy", "macro_f1"):
        found, of = comparison.per_example("text-classification", name, rows, answers, labels)
        assert float(of(found.sum(0))) == pytest.approx(report[name])
    ner_labels = dict(enumerate(["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]))
    ner_rows = [{"text": "李鹏在上海", "entities": [[0, 2, "PER"], [3, 5, "LOC"]]}, {"text": "国务院", "entities": []}]
    ner_answers = [
        {"entities": [{"start": 0, "end": 2, "type": "PER"}, {"start": 3, "end": 5, "type": "ORG"}]},
        {"entities": [{"start": 0, "end": 3, "type": "ORG"}]},
    ]
    report = tasks.for_type("token-classification").scores(ner_rows, ner_answers, ner_labels)
    for name in ("micro_f1", "precision", "recall", "macro_f1"):
        found, of = comparison.per_example("token-classification", name, ner_rows, ner_answers, ner_labels)
        assert float(of(found.sum(0))) == pytest.approx(report[name]), name
    with pytest.raises(ValueError, match="no per-example counts"):
        counts.label_metric("latency", 2)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_text_baseline_learns_the_tiny_reviews() -> None:
    rows = [{"text": r["text"], "label": int(r["label"] == "positive")} for r in sentiment_rows()]
    labels = {0: "negative", 1: "positive"}
    part = {
        k: [r for i, r in enumerate(rows) if i // 2 % 4 in ks]
        for k, ks in (("train", (0, 1)), ("dev", (2,)), ("test", (3,)))
    }
    answers, settings, _ = text.fit_predict(part["train"], part["dev"], part["test"], labels)
    assert settings["C"] in text.C_GRID and settings["features"] > 50
    accuracy = np.mean([a["label"] == labels[r["label"]] for a, r in zip(answers, part["test"], strict=True)])
    assert accuracy >= 0.9  # one sentiment word per review decides it
    assert all(sum(a["probabilities"].values()) == pytest.approx(1.0) for a in answers)


def test_pair_baseline_tells_paraphrases_from_unrelated_pairs(tmp_path: Path) -> None:
    from steps.runtime.data.corpora.pairs import read_pairs

    source = pairs_tsv(tmp_path / "pairs.tsv")
    rows = [
        {"text_a": p.text_a, "text_b": p.text_b, "label": int(p.label)}
        for p in read_pairs(source.read_bytes(), str(source))
    ]
    labels = {0: "0", 1: "1"}
    answers, settings, _ = pairs.fit_predict(rows, rows, rows, labels)
    accuracy = np.mean([a["label"] == labels[r["label"]] for a, r in zip(answers, rows, strict=True)])
    assert accuracy >= 0.8 and settings["features"] > 3


def test_crf_baseline_tags_names_it_was_trained_on() -> None:
    names = [("李鹏", "PER"), ("上海", "LOC"), ("国务院", "ORG"), ("江泽民", "PER"), ("北京", "LOC")]
    rows = []
    for i, (a, ta) in enumerate(names):
        b, tb = names[(i + 1) % len(names)]
        text_ = f"{a}昨天去了{b}"
        rows.append({"text": text_, "entities": [[0, len(a), ta], [len(a) + 4, len(a) + 4 + len(b), tb]]})
    labels = dict(enumerate(["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]))
    answers, settings, weights = crf.fit_predict(rows * 4, [], rows, labels, iterations=30)
    report = tasks.for_type("token-classification").scores(rows, answers, labels)
    assert report["micro_f1"] == 1.0 and settings["iterations"] == 30
    assert answers[0]["entities"][0] == {"type": "PER", "text": "李鹏", "start": 0, "end": 2}
    assert len(crf.features("李鹏")[0]) == 11  # bias, 5 characters, 4 bigrams, a trigram
    # its weights, as JSON holds them (what model.baseline_product folds into a model): "李" begins a name
    assert weights["state"]["c0=李"]["B-PER"] > 0 and weights["transitions"]["B-PER"]["I-PER"] > 0
    assert json.loads(json.dumps(weights)) == weights


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_workspace(tmp_path_factory.mktemp("baselines")) / "data"


def _cfg(store: Path, *sets: str):  # type: ignore[no-untyped-def]
    return load_config(Path(CONFIG), "local", [f"storage.uri={store}", *sets])


def test_fit_stores_the_answers_and_a_second_fit_reads_them(data_dir: Path, tmp_path: Path) -> None:
    cfg = _cfg(tmp_path / "store")
    first = baselines.fit(cfg, data_dir)
    assert first.kind == "tfidf-logreg" and not first.cached and first.seconds > 0
    key, versions = cache.key(cfg, data_dir)
    assert first.key == key and versions["scikit-learn"] != "absent"
    stored = tmp_path / "store" / "baselines" / "text-classification" / f"{key}.json"
    assert stored.is_file()
    again = baselines.fit(cfg, data_dir)
    assert again.cached and again.answers == first.answers
    # Another split of the same data is another key: fitted afresh, never the stored answers.
    assert cache.key(_cfg(tmp_path / "store", "baseline.crf_iterations=5"), data_dir)[0] != key


def test_a_baseline_past_its_time_limit_stops_evaluate_naming_the_key(data_dir: Path, tmp_path: Path) -> None:
    cfg = _cfg(tmp_path / "store", "baseline.time_limit_seconds=0.001")
    with pytest.raises(baselines.BaselineError, match=r"baseline\.time_limit_seconds=0\.001.*gate\.baseline: off"):
        baselines.fit(cfg, data_dir)
    assert isinstance(baselines.BaselineError("x"), StepError)  # a step's user error: exit 2, one line


def test_gate_and_baseline_config_keys() -> None:
    cfg = load_config(Path(CONFIG), "prod", [])
    assert cfg.gate.baseline == "require" and cfg.gate.baseline_margin == pytest.approx(0.03)
    local = load_config(Path(CONFIG), "local", ["gate.baseline=off", "baseline.time_limit_seconds=60"])
    assert local.gate.baseline == "off" and local.baseline.time_limit_seconds == 60
    from paddle_mlops_core.config import ConfigError

    with pytest.raises(ConfigError, match="gate.baseline"):
        load_config(Path(CONFIG), "local", ["gate.baseline=maybe"])
    with pytest.raises(ConfigError, match="baseline_margin"):
        load_config(Path(CONFIG), "local", ["gate.baseline_margin=-0.1"])
    with pytest.raises(ConfigError, match="distill_weight.*text classification and matching"):
        load_config(Path(CONFIG), "local", ["training.distill_weight=0.5"], task="ner")
