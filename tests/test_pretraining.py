"""The project's own pretrained small ERNIE (`paddle-mlops weights pretrain`, steps/runtime/weights/mlm.py) and
distillation from the baseline (steps/runtime/training/distillation.py): the masking, the staged copy a run fine-tunes,
the soft targets."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from paddle_mlops import weights
from paddle_mlops_core.config.pretrained_names import CORPUS_PRETRAINED
from steps.runtime.data import teacher as teacher_module
from steps.runtime.training import distillation
from steps.runtime.weights import mlm
from tests.fixtures_ernie import sentiment_rows


def test_masking_chooses_a_sixth_or_so_of_the_ordinary_tokens_and_never_a_special_one() -> None:
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 100, (64, 40))
    ids[:, 0], ids[:, -1] = 2, 3  # [CLS] ... [SEP]
    special = np.isin(ids, [0, 2, 3])
    masked, positions, targets = mlm.mask_batch(ids, special, 100, 4, rng)
    assert not special.reshape(-1)[positions].any()
    assert 0.12 < len(positions) / (~special).sum() < 0.18
    assert (targets == ids.reshape(-1)[positions]).all()
    assert np.mean(masked.reshape(-1)[positions] == 4) == pytest.approx(0.8, abs=0.06)  # 80 % [MASK]
    unchanged = np.ones(ids.size, bool)
    unchanged[positions] = False
    assert (masked.reshape(-1)[unchanged] == ids.reshape(-1)[unchanged]).all()


def test_weights_pretrain_builds_and_stages_the_project_model_once(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / "store"
    args = ["pretrain", CORPUS_PRETRAINED, "--to", str(store), "--workdir", str(tmp_path), "--epochs", "1",
            "--max-texts", "200", "--set", "model.max_seq_len=32"]  # fmt: skip
    assert weights.main(args) == 0
    out = capsys.readouterr().out
    assert "pre-trained ernie-mini-corpus-zh on 200 texts: 1 epochs" in out and "staged ernie-mini-corpus-zh" in out
    (copy,) = (store / "pretrained" / CORPUS_PRETRAINED).iterdir()
    manifest = json.loads((copy / "manifest.json").read_text())
    assert {f["path"] for f in manifest["files"]} >= {"config.json", "model_state.pdparams", "vocab.txt"}
    assert weights.main(args) == 0  # staged already: nothing is pre-trained again
    assert "is staged" in capsys.readouterr().out
    assert weights.main(["stage", CORPUS_PRETRAINED, "--to", str(store), "--workdir", str(tmp_path)]) == 2
    assert "weights pretrain ernie-mini-corpus-zh" in capsys.readouterr().err


def test_distillation_targets_mix_cross_fitted_baseline_probabilities_with_the_labels() -> None:
    rows = [{"text": r["text"], "label": int(r["label"] == "positive")} for r in sentiment_rows()]
    teacher = teacher_module.probabilities("text-classification", rows, rows[:16], 2)
    assert teacher.shape == (64, 2) and np.allclose(teacher.sum(axis=1), 1.0)
    assert np.mean(teacher.argmax(axis=1) == [r["label"] for r in rows]) > 0.8  # answered by folds without them
    soft = np.array(distillation.soft_targets([r["label"] for r in rows], teacher, 0.5))
    assert np.allclose(soft.sum(axis=1), 1.0)
    assert np.allclose(soft[0], 0.5 * teacher[0] + 0.5 * np.eye(2)[rows[0]["label"]])


def test_a_local_run_of_a_task_on_the_project_model_pretrains_it_first(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`paddle-mlops run --task ner` (whose local default fine-tunes ernie-mini-corpus-zh) builds and stages it
    before the DAG, with the run's workdir, environment and overrides; a task that needs no such model does not."""
    import argparse

    from rich.console import Console

    from paddle_mlops import cli
    from paddle_mlops_core.config import load_config

    calls: list[list[str]] = []
    monkeypatch.setattr(weights, "main", lambda argv: calls.append(list(argv)) or 0)
    args = argparse.Namespace(workdir=tmp_path, env="local")
    config = Path(__file__).resolve().parents[1] / "configs" / "pipeline.yaml"
    ner = load_config(config, "local", ["training.epochs=1"], task="ner")
    cli._pretrain_once(ner, config, args, ["training.epochs=1"], Console(file=None))
    assert calls == [["pretrain", CORPUS_PRETRAINED, "--workdir", str(tmp_path), "--env", "local", "--config",
                      str(config), "--task", "ner", "--set", "training.epochs=1"]]  # fmt: skip
    cli._pretrain_once(load_config(config, "local", task="sentiment"), config, args, [], Console(file=None))
    assert len(calls) == 1
