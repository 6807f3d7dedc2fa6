"""The benchmark scripts run end to end (--quick: tiny model, small files) and report their figures.

Only that they work is tested here; the figures themselves are machine-dependent and recorded in
docs/benchmarks.md, never asserted.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from benchmarks import checkpoint_cost, engines, quality, serving, serving_path, upload
from benchmarks.serving_contenders import Result
from paddle_mlops_core.config import PipelineConfig, load_config
from steps.runtime.serving.engines.variants import VARIANTS

pytestmark = pytest.mark.slow


def run_quick(
    module: ModuleType, argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[dict, str]:
    """`python -m benchmarks.<module> --quick ARGV --json F` run here: its JSON figures and what it printed."""
    out = tmp_path / "figures.json"
    assert module.main(["--quick", *argv, "--json", str(out)]) == 0
    return json.loads(out.read_text()), capsys.readouterr().out


def test_upload_benchmark_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    figures, printed = run_quick(upload, ["--rounds", "1"], tmp_path, capsys)
    assert "upload ratio: " in printed
    assert figures["publish_mib_s"] > 0 and figures["put_object_mib_s"] > 0
    assert figures["model_bytes"] > 8 * 1024 * 1024
    # Publishing the same version again, or the same bytes as a new version, sends nothing.
    assert figures["rerun_bytes_sent"] == 0
    assert figures["new_version_bytes_sent"] == 0 and figures["new_version_objects_skipped"] == 6


def test_serving_benchmark_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    figures, printed = run_quick(serving, ["--requests", "8", "--rounds", "2", "--clients", "4"], tmp_path, capsys)
    assert "latency ratio: " in printed and "throughput ratio: " in printed
    assert set(figures["contenders"]) == {"in-process", "ours", "ours-aiohttp", "baseline", "floor"}
    for name, contender in figures["contenders"].items():
        # the floor: batch 1 only; ours with aiohttp clients: throughput only
        assert name == "ours-aiohttp" or contender["p50_ms"] > 0
        assert name == "floor" or contender["texts_per_s"] > 0
    assert figures["aiohttp_batch_throughput_ratio"] > 0
    assert "the same with aiohttp clients: " in printed
    assert figures["latency_ratio"] > 0 and figures["throughput_ratio"] > 0
    assert figures["floor_latency_ratio"] > 0 and figures["batch_throughput_ratio"] > 0
    assert "latency ratio against the floor: " in printed


def test_serving_path_benchmark_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    figures, printed = run_quick(serving_path, ["--requests", "6"], tmp_path, capsys)
    assert "ours: round trip - model call" in printed and "round trip / model call: " in printed
    for server in ("ours", "floor"):
        stages = figures[server]["stages_us"]
        assert set(stages) == {name for name, _, _ in serving_path.STAGES}
        # Every stamp was matched to its request: each stage took time, and the round trip holds them all.
        assert all(value > 0 for value in stages.values()), stages
        assert stages["round trip"] > stages["model call"] and figures[server]["ratio"] > 1


def test_engines_benchmark_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    figures, printed = run_quick(engines, ["--rounds", "1"], tmp_path, capsys)
    assert "paddle-fp32" in printed and "max|dlogit|" in printed
    # Every variant either ran or says why not (a package missing, a CPU feature this node lacks).
    assert set(figures["variants"]) | set(figures["skipped"]) == set(VARIANTS)
    assert figures["variants"]["paddle-fp32"]["max_abs_logit_diff"] == 0
    for variant in figures["variants"].values():
        assert variant["batch1_p50_ms"] > 0 and variant["batchN_texts_per_s"] > 0 and variant["files_mib"] > 0
        assert variant["max_rel_logit_diff"] < 0.1


def test_serving_benchmark_rejects_bad_flags() -> None:
    with pytest.raises(SystemExit) as exc:
        serving.main(["--requests", "1", "--rounds", "4"])
    assert exc.value.code == 2


def test_serving_throughput_ratio_pairs_the_rounds_of_one_rotation() -> None:
    # A machine that switches between a slow and a fast state: rounds of one rotation share it.
    inproc = Result("in-process", per_round=[30.0, 45.0, 30.0, 45.0, 45.0])
    ours = Result("ours", per_round=[29.0, 44.0, 29.5, 44.5, 29.9])  # last rotation: ours slow alone
    assert ours.paired_ratio(inproc) == pytest.approx(44.0 / 45.0)
    # The ratio of the two medians compares different states: ours' median round is a slow one.
    assert ours.throughput / inproc.throughput == pytest.approx(29.9 / 45.0)
    with pytest.raises(ValueError):
        Result("short", per_round=[1.0]).paired_ratio(inproc)


def test_gpu_script_says_when_there_is_no_gpu(tmp_path) -> None:
    """benchmarks/gpu.sh runs where a GPU is (the device machine); elsewhere it stops at once, exit 2, saying so."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi"):
        pytest.skip("a GPU machine: run benchmarks/gpu.sh itself")
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        ["bash", str(root / "benchmarks" / "gpu.sh")], env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out")},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and "no GPU" in proc.stderr


def test_quality_benchmark_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Baseline, local default and an ablation on tiny data; each row has its paired interval against the baseline."""
    # What an earlier run left in a variant's workspace is cleared first: the train step would resume its checkpoint.
    stale = tmp_path / "q" / "sentiment" / "default-42" / "train" / "stale-checkpoint"
    stale.parent.mkdir(parents=True)
    stale.write_text("from an earlier run")
    figures, printed = run_quick(
        quality, ["--variants", "default", "distill", "--workdir", str(tmp_path / "q")], tmp_path, capsys
    )
    assert figures["cpu"] and "| sentiment | baseline tfidf-logreg |" in printed
    for variant in ("default", "distill"):
        row = figures["sentiment"]["variants"][variant]
        run = row["runs"][0]
        assert run["metric"] == "accuracy" and run["ci_low"] <= run["difference"] <= run["ci_high"]
        assert row["mean"] == run["model"] and row["baseline"] == run["baseline"]
    assert not stale.exists()


def row_config(task: str, variant: str) -> PipelineConfig:
    """The configuration a quality row trains (its overrides on the task's local configuration, a copy named)."""
    sets = [o.format(pretrained="/a/copy") for o in quality.VARIANTS[task][variant]]
    return load_config(quality.CONFIG, "local", sets, task=task)


@pytest.mark.parametrize(("task", "variant"), [(t, v) for t, rows in quality.VARIANTS.items() for v in rows])
def test_every_quality_variant_is_a_valid_configuration(task: str, variant: str) -> None:
    """Each row's overrides on the task's local configuration validate (`no-bigrams` once did not: the trigrams
    turned on later need the table it turns off), before a run spends minutes reaching it."""
    assert row_config(task, variant).task == task


def test_the_ner_rows_measure_the_models_they_are_named_for() -> None:
    """The local default is `mlm+bigrams-crf-wide-product` (with the pre-trained copy named); the rows measured
    before it pin what later defaults added, so they still measure their own model: `-dropout` is the 14th
    session's default, the same model without the baseline folded in."""

    def model(variant: str) -> dict[str, object]:
        return row_config("ner", variant).model.model_dump()

    default = load_config(quality.CONFIG, "local", ["model.pretrained=/a/copy"], task="ner").model.model_dump()
    assert model("mlm+bigrams-crf-wide-product") == default and default["baseline_product"] > 0
    fourteenth = model("mlm+bigrams-crf-wide-dropout")
    assert fourteenth == {**default, "baseline_product": 0.0}
    twelfth = model("mlm+bigrams")
    assert twelfth["tag_transitions"] and not (twelfth["crf_head"] or twelfth["wide_scores"])
    assert not twelfth["baseline_product"]
    assert model("mlm+bigrams-sum") == {**twelfth, "char_ngram_sides": "sum"}
    assert model("mlm+bigrams-crf-wide") == {**fourteenth, "classifier_dropout": None}
    assert model("mlm+bigrams-crf-wide-product-trigrams") == {**default, "char_ngram_trigrams": True}


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--task", "ner", "--variants", "default"], "default not a variant of ner (one of scratch, mlm,"),
        (["--task", "ner", "--variants", "mlm+bigrams"], "mlm+bigrams fine-tune a pre-trained copy"),
    ],
)
def test_quality_benchmark_refuses_a_variant_it_cannot_run(
    argv: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A variant the task does not have, or one that needs --pretrained without it: exit 2 before anything trains."""
    with pytest.raises(SystemExit) as stop:
        quality.main([*argv, "--workdir", str(tmp_path / "q")])
    assert stop.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "q").exists()


def test_checkpoint_cost_benchmark_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its in-process parts (the SIGTERM and SIGKILL parts start training jobs: measured, not tested here)."""
    figures, printed = run_quick(checkpoint_cost, ["--parts", "throughput,production_checkpoint"], tmp_path, capsys)
    assert "throughput ratio at the production cadence (600 s): " in printed
    assert figures["throughput"]["checkpoints"]["none"] == 0 and figures["throughput"]["checkpoints"]["dense"] >= 1
    assert figures["production_checkpoint"]["stop_s"] > 0 and figures["production_checkpoint"]["bytes"] > 0
