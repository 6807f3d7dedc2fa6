"""What a local run reports: `last-run.json` and the table and lines printed at the end.

It reads a finished run (`results.RunRecord`) and nothing of the orchestrator that produced it.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from paddle_mlops.local.dag import Scope
from paddle_mlops.local.results import Branch, RunRecord, TaskResult
from paddle_mlops_core.config.pretrained_names import PROJECT_NAMES
from paddle_mlops_core.config.tasks import SPECS, spec
from pipelines.rollout_template import SERVE_CHAMPION


def build(run: RunRecord) -> dict[str, Any]:
    """last-run.json: the steps of every workflow the run went through, and the results a person asks for."""
    outputs = {r.name: r.outputs for r in run.results}
    found: collections.defaultdict[str, str | None] = collections.defaultdict(
        lambda: None, {key: outputs.get(task, {}).get(name) for key, (task, name) in run.reported.items()}
    )
    metrics = _json_object(found["metrics"])
    gate = found["gate"]
    names = spec(metrics["task_type"]).metrics if metrics.get("task_type") in SPECS else ("accuracy", "macro_f1")
    failed, exit_result = run.failed, run.exit_result
    return {
        "status": "failed" if failed else "succeeded",
        "run_name": run.scopes[0].workflow_name,
        "workflows": [scope.workflow_name for scope in run.scopes],
        "workdir": str(run.workdir),
        "workspace": str(run.run_dir),
        "seconds": round(run.seconds, 1),
        "parameters": run.scopes[0].parameters,
        "rollout_parameters": run.scopes[1].parameters if len(run.scopes) > 1 else None,
        "steps": [_step(r) for r in run.results],
        "exit_handler": None if exit_result is None else {"status": exit_result.status, "log": exit_result.log},
        "failed_step": None
        if not failed
        else {"name": failed.name, "exit_code": failed.exit_code, "log_tail": failed.reason},
        "task": run.task if not run.branches else None,
        "metrics": {k: metrics.get(k) for k in names} | {"all": metrics},
        "engine": _engine(metrics.get("engine")),
        "model": _model(run.run_dir),
        "gate": {"passed": None if gate is None else gate == "true", "details": metrics.get("gate")},
        "baseline": _baseline(metrics.get("baseline")),
        "model_uri": found["model_uri"],
        "model_version": found["model_version"] or found["registered_version"],
        "mlflow_run_id": found["mlflow_run_id"],
        "mlflow_tracking_uri": run.tracking_uri,
        # a model rolled out reports its server; else the champion's, kept served (rollout_template SERVE_CHAMPION)
        "serving_url": found["serving_url"] or found["champion_url"],
        "rollout": found["rollout"],
        "validation": {"verdict": found["verdict"], "reason": found["validation"]},
        "tasks": [_branch(branch, run.scopes) for branch in run.branches] or None,
    }


def _step(result: TaskResult) -> dict[str, Any]:
    return {
        "name": result.name,
        "status": result.status,
        "seconds": round(result.seconds, 1),
        "exit_code": result.exit_code,
        "outputs": result.outputs,
        "log": result.log,
        **({"reason": result.reason} if result.status == "Skipped" and result.reason else {}),
    }


def _json_object(text: str | None) -> dict[str, Any]:
    """A step output holding a JSON object (metrics.json), or {} when there is none or it is not one."""
    try:
        found = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    return found if isinstance(found, dict) else {}


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _model(workspace: Path) -> str | None:
    """What the run trained: the pretrained weights it fine-tuned (name, staged digest), or the small
    from-scratch model and why (nothing staged)."""
    config = _read(workspace / "model" / "model_config.json")
    if not config:
        return None
    if config.get("pretrained"):
        digest = config.get("pretrained_digest")
        return f"fine-tuned {config['pretrained']}" + (f" (staged digest {digest[:12]})" if digest else "")
    shape = f"{config.get('num_hidden_layers')} layers × {config.get('hidden_size')}"
    unstaged = config.get("pretrained_unstaged")
    why = (
        f"{unstaged} is not staged; `paddle-mlops weights {_stage_verb(unstaged)} {unstaged}` to fine-tune it"
        if unstaged
        else "no pretrained weights configured; stage some with `paddle-mlops weights stage NAME` and "
        "--set model.pretrained=NAME (or a directory) to fine-tune"
    )
    return f"small ERNIE from scratch ({shape}, character vocabulary): {why}"


def _baseline(figures: dict[str, Any] | None) -> dict[str, Any] | None:
    """The model beside the cheap baseline evaluate fitted on the same split (metrics.json's `baseline`)."""
    if not figures:
        return None
    keys = ("kind", "description", "metric", "model", "baseline", "difference", "ci_low", "ci_high", "confidence",
            "test", "seconds", "cached", "line")  # fmt: skip
    return {key: figures.get(key) for key in keys}


def _stage_verb(name: str) -> str:
    return "pretrain" if name in PROJECT_NAMES else "stage"


def _engine(engine: dict[str, Any] | None) -> dict[str, Any] | None:
    """Which variant serves and why, every variant's gate metric and speeds, and which speed ranked them (evaluate's
    engine selection)."""
    if not engine or "selected" not in engine:
        return None
    keys = ("selected", "served", "reason", "ranked_by", "max_metric_drop", "variants")
    return {key: engine.get(key) for key in keys}


def _branch(branch: Branch, scopes: list[Scope]) -> dict[str, Any]:
    """One finetune-batch task: its branch's outcome, and what its rollout (if it published) did."""
    task = branch.item.get("task") if isinstance(branch.item, dict) else None
    outputs = branch.outputs
    metrics = _json_object((outputs.get("evaluate") or {}).get("metrics"))
    names = spec(metrics["task_type"]).metrics if metrics.get("task_type") in SPECS else ()
    no_rollout: dict[str, dict[str, str]] = {}
    rollout = next((s.task_outputs for s in scopes[1:] if s.parameters.get("task") == task), no_rollout)
    return {
        "task": task,
        "branch": branch.label,
        "status": "failed" if branch.failed else "succeeded",
        "failed_step": branch.failed,
        "metrics": {k: metrics.get(k) for k in names},
        "baseline": (metrics.get("baseline") or {}).get("line"),
        "gate": (metrics.get("gate") or {}).get("reason"),
        "model_uri": (outputs.get("upload") or {}).get("model-uri"),
        "verdict": (rollout.get("validate") or {}).get("verdict"),
        "model_version": (rollout.get("register") or {}).get("model-version"),
        "serving_url": (rollout.get("rollout") or {}).get("serving-url")
        or (rollout.get(SERVE_CHAMPION) or {}).get("serving-url"),
    }


def show(console: Console, summary: dict[str, Any], failed: TaskResult | None, path: Path) -> None:
    """The step table and the results, as `paddle-mlops run` ends."""
    table = Table(title=f"paddle-mlops run {summary['run_name']}: {summary['status'].upper()}")
    table.add_column("step")
    table.add_column("status")
    table.add_column("seconds", justify="right")
    colours = {"Succeeded": "green", "Failed": "red", "Skipped": "yellow", "Reused": "blue"}
    for step in summary["steps"]:
        colour = colours.get(step["status"], "white")
        table.add_row(step["name"], f"[{colour}]{step['status']}[/]", f"{step['seconds']:.1f}")
    console.print(table)
    if failed:
        console.print(
            f"[bold red]Step '{failed.name}' failed with exit code {failed.exit_code}.[/] Last lines of its log "
            f"({failed.log}):"
        )
        console.out(failed.reason or "(no output)", highlight=False)
        version = summary["model_version"]
        if version:
            console.print(
                f"Model version {version} was registered (alias 'challenger') but not promoted: "
                "'champion' and the serving model are unchanged."
            )
        else:
            console.print("Nothing was registered or served from this run.")
    if summary.get("tasks"):
        _show_tasks(console, summary["tasks"], path)
        return
    m = {k: v for k, v in summary["metrics"].items() if k != "all"}
    gate = summary["gate"]["passed"]
    lines = [
        ("task", summary.get("task")),
        ("model", summary.get("model")),
        ("metrics", " ".join(f"{k}={_rounded(v)}" for k, v in m.items())),
        ("baseline", (summary.get("baseline") or {}).get("line")),
        ("gate", _gate_line(gate, summary["gate"].get("details"))),
        ("engine", _engine_line(summary.get("engine"))),
        ("model URI", summary["model_uri"]),
        ("validation", _verdict_line(summary["validation"])),
        ("model version", summary["model_version"]),
        ("MLflow run", f"{summary['mlflow_run_id']}  ({summary['mlflow_tracking_uri']})"),
        ("serving URL", summary["serving_url"]),
        ("summary", str(path)),
    ]
    for key, value in lines:
        shown = value if value is not None else "-"
        console.print(f"  [bold]{key:>13}[/]: {shown}", highlight=False)


def _gate_line(passed: bool | None, details: dict[str, Any] | None) -> str:
    """PASSED or FAILED with the reason (the figures it was judged on)."""
    word = {True: "PASSED", False: "FAILED (nothing published)", None: "not evaluated"}[passed]
    reason = (details or {}).get("reason")
    return f"{word}: {reason}" if reason else word


def _verdict_line(validation: dict[str, Any]) -> str | None:
    if not validation.get("verdict"):
        return None
    return f"{validation['verdict'].upper()}: {validation.get('reason') or ''}"


def _rounded(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


def _show_tasks(console: Console, tasks: list[dict[str, Any]], path: Path) -> None:
    """A finetune-batch run's outcome per task."""
    table = Table(title="tasks")
    for column in ("task", "status", "metrics", "model", "verdict", "serving URL"):
        table.add_column(column)
    for row in tasks:
        metrics = " ".join(f"{k}={_rounded(v)}" for k, v in row["metrics"].items() if v is not None)
        status = row["status"] + (f" ({row['failed_step']})" if row["failed_step"] else "")
        model = row["model_uri"] or ("not published: " + (row["gate"] or "-") if row["gate"] else "-")
        table.add_row(row["task"], status, metrics, model, row["verdict"] or "-", row["serving_url"] or "-")
    console.print(table)
    console.print(f"  [bold]{'summary':>13}[/]: {path}", highlight=False)


def _engine_line(engine: dict[str, Any] | None) -> str | None:
    if not engine:
        return None
    return f"{engine['selected']}: {engine['reason']}"
