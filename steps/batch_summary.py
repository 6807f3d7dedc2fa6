"""batch-summary: the outcome of every task of a finetune-batch run, read back from the branches' workspaces.

Runs after every branch ended, however it ended. A task's outcome is the furthest its branch got: `published`
(the model is in the store; its rollout follows from the bucket notification), `gate-failed` (trained and
evaluated, not good enough: a result, not an error), or `failed` at the first step that left nothing behind.
Exit 1 when any task failed, so the workflow fails and this step's log says which; the `summary` output is the
JSON list of outcomes either way. The batch's parent MLflow run (`--parent-run-id`, steps/batch_run.py) is ended here
with the outcomes: FINISHED when no task failed, FAILED otherwise (steps/runtime/training/batch_parent.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from steps.runtime import runner
from steps.runtime.runner import StepError, StepFailed
from steps.runtime.storage import workspace
from steps.runtime.training import batch_parent

PUBLISHED, GATE_FAILED, FAILED = "published", "gate-failed", "failed"
# What each step leaves in a branch's workspace, in DAG order.
EVIDENCE = (
    ("prepare-data", "data/stats.json"),
    ("train", "model/training.json"),
    ("evaluate", "eval/metrics.json"),
)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", required=True, help='the batch: JSON list of {"task": NAME, "overrides": [...]}')
    parser.add_argument("--workspace", required=True, help="the run's workspace; each task's is <workspace>/<task>")
    parser.add_argument(
        "--parent-run-id", default="",
        help="the batch's parent MLflow run (steps/batch_run.py), ended here; empty: none",
    )  # fmt: skip


def parse_tasks(text: str) -> list[dict[str, Any]]:
    """The batch's task list, or StepError saying what an item must look like."""
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StepError(f"--tasks is not JSON ({exc.msg}); pass a list of {{'task': NAME, 'overrides': []}}") from None
    if not isinstance(items, list) or not items:
        raise StepError("--tasks must be a non-empty JSON list of {'task': NAME, 'overrides': [...]} objects")
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("task"), str):
            raise StepError(f"--tasks[{i}] must be an object with a 'task' name, got {item!r}")
    return items


def outcome(task: str, root: str, endpoint: str | None) -> dict[str, Any]:
    """How far task `task`'s branch got, from what its steps left in `<root>/<task>`."""
    ws = workspace.join(root, task)
    found: dict[str, Any] = {}
    for step, path in EVIDENCE:
        found[step] = workspace.read_json(workspace.join(ws, path), endpoint)
        if found[step] is None:
            return {"task": task, "outcome": FAILED, "step": step, "workspace": ws}
    metrics = found["evaluate"]
    gate = metrics.get("gate") or {}
    scores = {name: metrics.get(name) for name in ("accuracy", "macro_f1", "micro_f1") if name in metrics}
    base = {"task": task, "task_type": metrics.get("task_type"), "metrics": scores, "gate": gate.get("reason")}
    published = workspace.read_json(workspace.join(ws, "upload", "published.json"), endpoint)
    if published:
        return {**base, "outcome": PUBLISHED, "model_uri": published.get("model_uri")}
    if gate.get("passed") is False:
        return {**base, "outcome": GATE_FAILED}
    return {**base, "outcome": FAILED, "step": "upload", "workspace": ws}


def run(cfg: PipelineConfig, args: argparse.Namespace) -> runner.Finished:
    outcomes = [outcome(item["task"], args.workspace, cfg.storage.endpoint_url) for item in parse_tasks(args.tasks)]
    for row in outcomes:
        detail = {
            PUBLISHED: lambda r: f"{r['model_uri']} ({r['gate']})",
            GATE_FAILED: lambda r: f"not published: {r['gate']}",
            FAILED: lambda r: f"at {r['step']} (nothing in {r['workspace']})",
        }[row["outcome"]](row)
        print(f"{row['task']:<20} {row['outcome']:<12} {detail}")
    failed = [r["task"] for r in outcomes if r["outcome"] == FAILED]
    if failed:
        print(f"{len(failed)} of {len(outcomes)} tasks failed: {', '.join(failed)}", file=sys.stderr)
    if args.parent_run_id:
        try:
            status = batch_parent.end_parent(cfg, args.parent_run_id, outcomes, bool(failed))
        except Exception as exc:  # noqa: BLE001 - any failure to reach MLflow is reported the same way (and retried)
            raise StepFailed(f"could not end the batch's MLflow run {args.parent_run_id}: {exc}") from None
        print(f"parent MLflow run {args.parent_run_id} ended {status}")
    return runner.Finished({"summary": json.dumps(outcomes, ensure_ascii=False)}, 1 if failed else 0)


STEP = runner.Step(
    "batch-summary",
    __doc__,
    run,
    _arguments,
    outputs=(runner.Output("summary", "JSON list of each task's outcome"),),
)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
