"""What Argo does with a training run the step cache already holds (docs/caching.md), from the controller's source.

argo-workflows v4.1.2:
- workflow/controller/dag.go executeDAGTask: a task whose `when` evaluates false is initialised as a Skipped node and
  never executed (no pod: no training job placed); on later passes every completed node, Skipped ones included,
  goes through runOnExitNode (workflow/controller/exit_handler.go), which is one more reason the train task has no
  exit hook at all (pipelines/train_step.py).
- dag.go expands a bare task name in `depends` to `(T.Succeeded || T.Skipped || T.Daemoned)`: evaluate runs after a
  skipped train. The pre-pull clean-up is in the exit handler, which runs whatever train did.
- workflow/controller/cache/cache.go: a memoization entry holds a node's `Outputs` (parameters and artifact
  references) and operator.go initializeCacheHitNode gives a hit exactly those; configmap_cache.go keeps the
  entries in one ConfigMap of the controller's namespace and rewrites it on every hit (lastHitTimestamp). The train
  step's result is a model in the run's workspace, not an output, so memoize could not stand in for it; the step
  cache is an index in the object store instead (steps/runtime/caching/store.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from paddle_mlops.local.dag import depends_met

ARGO = Path(__file__).resolve().parents[1] / "argo"
PHASES = ("Succeeded", "Failed", "Error", "Skipped", "Omitted")


def _template(name: str) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all((ARGO / f"{name}.yaml").read_text()) if d["kind"] == "WorkflowTemplate"]
    return doc


def _tasks(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every DAG task of the template, by name (the batch branch's chain included)."""
    found = {}
    for template in doc["spec"]["templates"]:
        for task in (template.get("dag") or {}).get("tasks", []):
            found[task["name"]] = task
    return found


@pytest.mark.parametrize("name", ["train-deploy", "finetune-batch"])
def test_a_reused_training_skips_the_job_and_runs_no_hook(name: str) -> None:
    tasks = _tasks(_template(name))
    train = tasks["train"]
    assert train["when"] == "{{tasks.train-cache.outputs.parameters.reused}} == false"
    assert "train-cache" in train["depends"]
    assert "hooks" not in train  # exit_handler.go would run a hook for the Skipped node too


@pytest.mark.parametrize("name", ["train-deploy", "finetune-batch"])
def test_evaluate_runs_after_a_skipped_train(name: str) -> None:
    tasks = _tasks(_template(name))
    evaluate_task = tasks["evaluate"]
    statuses = {"train": "Skipped", "train-cache": "Succeeded", "prepare-data": "Succeeded"}
    assert depends_met(evaluate_task.get("depends"), statuses, ("train",))
    assert not depends_met(evaluate_task.get("depends"), {**statuses, "train": "Failed"}, ("train",))


def test_the_image_pre_pull_is_released_when_training_is_reused() -> None:
    """In the exit handler (runs however the workflow ends), with no condition on train."""
    doc = _template("train-deploy")
    (handler,) = [t for t in doc["spec"]["templates"] if t["name"] == doc["spec"]["onExit"]]
    (release,) = [t for t in handler["dag"]["tasks"] if t["name"] == "release-prepull"]
    assert "depends" not in release and "when" not in release


def test_training_is_not_memoized() -> None:
    """A memoization hit restores a node's outputs alone (cache.go Entry.Outputs); the train template has none: what
    it makes is the model in the workspace, which only the step cache carries from one run to another."""
    for name in ("train-deploy", "finetune-batch"):
        templates = {t["name"]: t for t in _template(name)["spec"]["templates"]}
        assert not templates["train"].get("outputs")
        assert not any("memoize" in t for t in templates.values())
        lookup = templates["train-cache"]
        assert {p["name"] for p in lookup["outputs"]["parameters"]} == {"reused", "key", "run", "cache"}
