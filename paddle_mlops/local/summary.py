"""What a local run reports: `last-run.json` and the table and lines printed at the end."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from paddle_mlops.local.executor import LocalExecutor, TaskResult


def build(
    executor: LocalExecutor,
    results: list[TaskResult],
    exit_result: TaskResult | None,
    failed: TaskResult | None,
    seconds: float,
) -> dict[str, Any]:
    """last-run.json: the steps of every workflow the run went through, and the results a person asks for."""
    outputs = {r.name: r.outputs for r in results}
    found = {key: outputs.get(task, {}).get(name) for key, (task, name) in executor.results.items()}
    found = collections.defaultdict(lambda: None, found)
    metrics: dict[str, Any] = {}
    if found["metrics"]:
        try:
            metrics = json.loads(found["metrics"])
        except json.JSONDecodeError:
            metrics = {}
    gate = found["gate"]
    return {
        "status": "failed" if failed else "succeeded",
        "run_name": executor.scopes[0].workflow_name,
        "workflows": [scope.workflow_name for scope in executor.scopes],
        "workdir": str(executor.workdir),
        "workspace": str(executor.run_dir),
        "seconds": round(seconds, 1),
        "parameters": executor.scopes[0].parameters,
        "rollout_parameters": executor.scopes[1].parameters if len(executor.scopes) > 1 else None,
        "steps": [
            {
                "name": r.name,
                "status": r.status,
                "seconds": round(r.seconds, 1),
                "exit_code": r.exit_code,
                "outputs": r.outputs,
                "log": r.log,
                **({"reason": r.reason} if r.status == "Skipped" and r.reason else {}),
            }
            for r in results
        ],
        "exit_handler": None if exit_result is None else {"status": exit_result.status, "log": exit_result.log},
        "failed_step": None
        if not failed
        else {"name": failed.name, "exit_code": failed.exit_code, "log_tail": failed.reason},
        "metrics": {k: metrics.get(k) for k in ("accuracy", "macro_f1")} | {"all": metrics},
        "gate": {"passed": None if gate is None else gate == "true", "details": metrics.get("gate")},
        "model_uri": found["model_uri"],
        "model_version": found["model_version"],
        "mlflow_run_id": found["mlflow_run_id"],
        "mlflow_tracking_uri": executor.tracking_uri(),
        "serving_url": found["serving_url"],
        "rollout": found["rollout"],
        "validation": {"verdict": found["verdict"], "reason": found["validation"]},
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
    m = summary["metrics"]
    gate = summary["gate"]["passed"]
    lines = [
        ("metrics", f"accuracy={m.get('accuracy')} macro_f1={m.get('macro_f1')}"),
        ("gate", {True: "PASSED", False: "FAILED (nothing published)", None: "not evaluated"}[gate]),
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


def _verdict_line(validation: dict[str, Any]) -> str | None:
    if not validation.get("verdict"):
        return None
    return f"{validation['verdict'].upper()}: {validation.get('reason') or ''}"
