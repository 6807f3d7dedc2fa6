"""train: tiny ERNIE trained in-process and under paddle.distributed.launch; export, MLflow, checkpoints."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fixtures_ernie import (
    NEGATIVE,
    POSITIVE,
    SUBJECTS,
    common,
    ngram_counts,
    prepared_workspace,
    write_jsonl,
    write_ngram_counts,
)

from steps import train

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace whose data/ holds the 64 tiny reviews, split 60/20/20."""
    return prepared_workspace(tmp_path_factory.mktemp("train"))


@pytest.fixture
def tracking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("PADDLE_MLOPS_RUN", "run-test-1")
    return uri


def write_workspace(ws: Path, n_train: int = 128, n_dev: int = 40, n_test: int = 40) -> Path:
    """A workspace data/ written directly (exact split sizes: the equivalence tests need the train
    size to be a multiple of the global batch), balanced labels, learnable from one word."""
    from steps.runtime.data import labelled_text, split_index

    rows = []
    for i in range((n_train + n_dev + n_test) // 2):
        subject, n = SUBJECTS[i % 8], i // 8
        rows.append({"text": f"{subject}{POSITIVE[(i + n) % 8]}{n}号", "label": 1})
        rows.append({"text": f"{subject}{NEGATIVE[(i + n) % 8]}{n}号", "label": 0})
    out = ws / "data"
    splits = {"train": rows[:n_train], "dev": rows[n_train : n_train + n_dev], "test": rows[n_train + n_dev :]}
    for name, part in splits.items():
        write_jsonl(out / f"{name}.jsonl", part)
    (out / "label_map.json").write_text(json.dumps({"0": "negative", "1": "positive"}))
    vocab = labelled_text.build_vocab([r["text"] for r in rows], 1, 8000)
    (out / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    # what prepare-data computes from the splits: their index, the n-gram counts of the tiny model's table
    split_index.write(out, lambda row: [row["text"]])
    write_ngram_counts(out, ngram_counts(out))
    return ws


# Adding a constant to every key leaves attention's softmax unchanged, so the key bias has a zero
# gradient in exact arithmetic: it holds only rounding noise that Adam scales up to ~lr-sized steps.
ZERO_GRADIENT = ("self_attn.k_proj.bias",)


def assert_same_params(a: Path, b: Path, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    left, right = np.load(a), np.load(b)
    assert sorted(left.files) == sorted(right.files)
    for name in left.files:
        if name.endswith(ZERO_GRADIENT):
            assert np.abs(left[name]).max() < 1e-3 and np.abs(right[name]).max() < 1e-3, name
            continue
        np.testing.assert_allclose(left[name], right[name], rtol=rtol, atol=atol, err_msg=name)


def launch_command(ws: Path, log_dir: Path, *overrides: str) -> list[str]:
    """steps/train.py in 2 processes under `paddle.distributed.launch`, tiny configuration plus `overrides`."""
    launcher = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2", "--log_dir", str(log_dir)]
    return [*launcher, "steps/train.py", *common(*overrides), "--workspace", str(ws)]


def launch_env(mlflow_dir: Path) -> dict[str, str]:
    """The launcher's environment: this checkout importable, MLflow in `mlflow_dir`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{mlflow_dir / 'mlflow.db'}"}
    env.pop("CUDA_VISIBLE_DEVICES", None)  # it breaks the launcher's device detection
    return env


def copy_data(prepared: Path, ws: Path) -> Path:
    import shutil

    shutil.copytree(prepared / "data", ws / "data")
    return ws


def assert_experiment_and_datasets(client: Any, run: Any, data_dir: Path) -> None:
    """The experiment is marked for model training; the splits are the run's dataset inputs, by sha256."""
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    stats = json.loads((data_dir / "stats.json").read_text())
    inputs = {i.dataset.name: i for i in run.inputs.dataset_inputs}
    assert set(inputs) == {"train", "dev", "test"}
    for split, context in (("train", "training"), ("dev", "validation"), ("test", "testing")):
        tags = {t.key: t.value for t in inputs[split].tags}
        rows = len((data_dir / f"{split}.jsonl").read_text(encoding="utf-8").splitlines())
        assert tags["mlflow.data.context"] == context and tags["rows"] == str(rows)
        assert tags["sha256"] == stats["sha256"][f"{split}.jsonl"]
        assert inputs[split].dataset.digest == tags["sha256"][:16]
        assert json.loads(inputs[split].dataset.source)["uri"].endswith(f"data/{split}.jsonl")
        assert json.loads(inputs[split].dataset.profile)["num_rows"] == rows


def test_train_exports_best_model_and_tracks_mlflow(
    prepared: Path, tracking: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import mlflow

    ws = copy_data(prepared, tmp_path / "ws")
    caplog.set_level(logging.INFO)
    args = [
        *common("training.max_steps=6", "training.checkpoint.every_steps=2"),
        "--workspace",
        str(ws),
        "--git-sha",
        "abc123",
    ]
    assert train.main(args) == 0
    model = ws / "model"
    for name in (
        "inference.json",
        "inference.pdiparams",
        "vocab.txt",
        "tokenizer_config.json",
        "label_map.json",
        "model_config.json",
        "training.json",
    ):
        assert (model / name).is_file(), name
    config = json.loads((model / "model_config.json").read_text())
    assert (config["max_seq_len"], config["num_labels"], config["hidden_size"]) == (32, 2, 32)
    assert config["vocab_size"] == len((ws / "data" / "vocab.txt").read_text(encoding="utf-8").splitlines())
    training = json.loads((model / "training.json").read_text())
    assert training["global_steps"] == 6 and training["world_size"] == 1 and training["best_epoch"] in (1, 2)
    assert 0 <= training["dev_accuracy"] <= 1

    run = mlflow.MlflowClient(tracking).get_run(training["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == "run-test-1"
    # the experiment keeps its artifacts beside the SQLite store, not in ./mlruns of the working directory
    assert run.info.artifact_uri.startswith((tmp_path / "mlruns").as_uri())
    assert (tmp_path / "mlruns" / "ernie-sentiment" / run.info.run_id / "artifacts" / "model-info").is_dir()
    assert run.data.tags["git_sha"] == "abc123" and run.data.tags["workflow"] == "run-test-1"
    assert run.data.params["model.hidden_size"] == "32" and run.data.params["training.epochs"] == "2"
    history = mlflow.MlflowClient(tracking).get_metric_history(run.info.run_id, "dev_accuracy")
    assert [m.step for m in history] == [1, 2]
    assert max(m.value for m in history) == pytest.approx(training["dev_accuracy"])
    for key in ("train_loss", "dev_macro_f1", "samples_per_second"):
        assert key in run.data.metrics
    assert_experiment_and_datasets(mlflow.MlflowClient(tracking), run, ws / "data")

    # it checkpointed while it trained (every 2 steps counted from the previous checkpoint, and after epoch 1 at step
    # 3; the one due at step 5 is deferred while step 3's upload is still in flight, to step 6 or past the end)
    # into its run's store, and once the model was exported it deleted them: a rerun would only export it again
    done = [int(line.split()[1]) for line in caplog.messages if line.startswith("checkpoint ") and "complete" in line]
    assert done[:2] == [2, 3] and done[2:] in ([], [5], [6]), done
    run_dir = ws / "train" / "sentiment" / training["run_id"]
    assert training["run_id"].startswith("r-") and run_dir.is_dir()
    assert list((run_dir / "checkpoints").iterdir()) == []


def test_train_learns_the_tiny_task(prepared: Path, tracking: str, tmp_path: Path) -> None:
    ws = copy_data(prepared, tmp_path / "ws")
    assert train.main([*common("training.epochs=12", "training.learning_rate=0.01"), "--workspace", str(ws)]) == 0
    assert json.loads((ws / "model" / "training.json").read_text())["dev_accuracy"] >= 0.75


def test_missing_data_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert train.main([*common(), "--workspace", str(tmp_path / "empty")]) == 2
    assert "run prepare-data" in capsys.readouterr().err


def test_train_under_paddle_distributed_launch(prepared: Path, tmp_path: Path) -> None:
    ws = copy_data(prepared, tmp_path / "ws")
    cmd = launch_command(ws, tmp_path / "log", "training.max_steps=4", "training.nproc=2")
    proc = subprocess.run(cmd, cwd=ROOT, env=launch_env(tmp_path), capture_output=True, text=True, timeout=300)
    logs = "".join(p.read_text(errors="replace") for p in sorted((tmp_path / "log").glob("workerlog.*")))
    assert proc.returncode == 0, proc.stderr[-3000:] + logs[-3000:]
    training = json.loads((ws / "model" / "training.json").read_text())
    assert training["world_size"] == 2 and training["global_steps"] == 4
    assert (ws / "model" / "inference.pdiparams").is_file()


def test_grad_accumulation_matches_a_larger_batch(tracking: str, tmp_path: Path) -> None:
    ws = write_workspace(tmp_path / "ws", n_train=64, n_dev=8, n_test=8)
    dumps = {}
    for batch, accumulation in ((16, 1), (8, 2)):
        dumps[accumulation] = tmp_path / f"accum-{accumulation}.npz"
        overrides = [
            "model.dropout=0",
            f"training.batch_size={batch}",
            f"training.grad_accumulation={accumulation}",
            "training.max_steps=6",
        ]
        assert train.main([*common(*overrides), "--workspace", str(ws), "--dump-params", str(dumps[accumulation])]) == 0
        training = json.loads((ws / "model" / "training.json").read_text())
        assert training["global_steps"] == 6 and training["steps_run"] == 6
    assert_same_params(dumps[1], dumps[2])
