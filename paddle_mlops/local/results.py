"""What a local run produced, in the types the orchestrator writes and the summary reads.

The lowest room of the local runner, as Kubeflow Pipelines keeps its task status apart from the orchestrator and
the handlers: `executor.py` (the DAG orchestrator), `fanout.py` and `task_handler.py` fill these in, and
`summary.py` reads them, so none of them has to import another to know what a result is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paddle_mlops.local.dag import Scope


@dataclass
class TaskResult:
    name: str
    status: str  # Succeeded | Failed | Skipped | Reused | Not run
    seconds: float = 0.0
    exit_code: int | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    log: str | None = None
    reason: str | None = None


@dataclass
class Branch:
    """One item's run of a fanned-out DAG template: what it was given and what its tasks output."""

    label: str
    item: Any
    inputs: dict[str, str]
    outputs: dict[str, dict[str, str]]
    failed: str | None  # the branch task that failed, if one did


@dataclass
class RunRecord:
    """A finished run as the summary reads it: every task's result and the scopes they ran in."""

    results: list[TaskResult]
    exit_result: TaskResult | None  # the last exit handler that ran
    failed: TaskResult | None  # the first task that failed
    seconds: float
    scopes: list[Scope]  # the first workflow's, then one per follow-on run
    branches: list[Branch]  # a fan-out's branches (finetune-batch), empty otherwise
    workdir: Path
    run_dir: Path
    tracking_uri: str
    task: str  # the configuration's task (configs/tasks/<task>.yaml)
    # Summary key -> (task, output) a person asks for (e.g. train_deploy.RESULTS).
    reported: dict[str, tuple[str, str]] = field(default_factory=dict)
