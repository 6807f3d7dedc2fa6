"""A DAG task that runs a DAG template, once per item of its `withParam` list (finetune-batch's `finetune`).

Argo runs the items' branches in parallel; locally they run one after the other (each branch's training already
takes the machine's CPUs), and, as on Argo, a failing branch does not stop the others. Each branch runs in a
scope of its own: the template's inputs rendered from its item (`{{item.task}}`), its own task outputs, its tasks
named `<task>(<index>:<item>)/<inner task>` in the run's folder and summary.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from paddle_mlops.local.dag import DagError, Scope, Task, dag_tasks, task_inputs

if TYPE_CHECKING:
    from paddle_mlops.local.executor import LocalExecutor, TaskResult


@dataclass
class Branch:
    """One item's run of the template: what it was given and what its tasks output."""

    label: str
    item: Any
    inputs: dict[str, str]
    outputs: dict[str, dict[str, str]]
    failed: str | None  # the branch task that failed, if one did


def items(task: Task, scope: Scope) -> list[Any]:
    """The fan-out list (`withParam` rendered and parsed), or one run without an item."""
    if not task.with_param:
        return [None]
    text = scope.render(task.with_param)
    try:
        found = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DagError(f"task {task.name!r}: withParam {text[:200]!r} is not a JSON list ({exc.msg})") from None
    if not isinstance(found, list) or not found:
        raise DagError(f"task {task.name!r}: withParam must be a non-empty JSON list, got {text[:200]!r}")
    return found


def label(task: Task, index: int, item: Any) -> str:
    name = item.get("task") if isinstance(item, dict) else item
    return f"{task.name}({index}:{name})" if name is not None else task.name


def run(executor: LocalExecutor, task: Task, results: list[TaskResult]) -> TaskResult:
    """Run every branch of `task`; its result is Failed when any branch failed (the others still ran)."""
    from paddle_mlops.local.executor import TaskResult

    if executor.opts.only or executor.opts.start_from:
        raise DagError(f"--only/--from cannot rerun part of the fan-out {task.name!r}; run it whole")
    inner = dag_tasks(task.template, executor.workflow.templates)
    outer, prefix = executor.scope, executor.prefix
    started = time.monotonic()
    failed: list[str] = []
    for index, item in enumerate(items(task, outer)):
        name = label(task, index, item)
        inputs = task_inputs(task, replace(outer, item=item))
        executor.scope = Scope(outer.workflow_name, outer.parameters, inputs=inputs)
        executor.prefix = f"{prefix}{name}/"
        executor.console.print(f"[bold cyan]⑂ {name}[/]  [dim]{json.dumps(item, ensure_ascii=False)}[/]")
        try:
            bad = executor._run_tasks(inner, results)
            executor.branches.append(Branch(name, item, inputs, executor.scope.task_outputs, bad and bad.name))
        finally:
            executor.scope, executor.prefix = outer, prefix
        if bad is not None:
            failed.append(name)
    status = "Failed" if failed else "Succeeded"
    result = TaskResult(f"{prefix}{task.name}", status, time.monotonic() - started)
    if failed:
        result.reason = f"branches failed: {', '.join(failed)} (the others ran to the end)"
    results.append(result)
    return result
