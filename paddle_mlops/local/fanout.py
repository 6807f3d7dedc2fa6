"""A DAG task that runs a DAG template, once per item of its `withParam` list (finetune-batch's `finetune`).

Argo runs the items' branches in parallel; locally they run one after the other (each branch's training already
takes the machine's CPUs), and, as on Argo, a failing branch does not stop the others. Each branch runs in a
scope of its own: the template's inputs rendered from its item (`{{item.task}}`), its own task outputs, its tasks
named `<task>(<index>:<item>)/<inner task>` in the run's folder and summary. The orchestrator hands in how a list
of tasks runs (`RunTasks`), so this module needs nothing of it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from rich.console import Console

from paddle_mlops.local.dag import DagError, Scope, Task, dag_tasks, task_inputs
from paddle_mlops.local.results import Branch, TaskResult

# Runs tasks in a scope, their folders and names under a prefix; the first that failed, if any.
RunTasks = Callable[[list[Task], Scope, str], TaskResult | None]


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


def run(
    task: Task,
    outer: Scope,
    prefix: str,
    templates: dict[str, dict[str, Any]],
    run_tasks: RunTasks,
    console: Console,
) -> tuple[TaskResult, list[Branch]]:
    """Run every branch of `task` with `run_tasks`; its result is Failed when any branch failed (the others still
    ran), and the branches."""
    inner = dag_tasks(task.template, templates)
    started = time.monotonic()
    branches: list[Branch] = []
    for index, item in enumerate(items(task, outer)):
        name = label(task, index, item)
        inputs = task_inputs(task, replace(outer, item=item))
        scope = Scope(outer.workflow_name, outer.parameters, inputs=inputs)
        console.print(f"[bold cyan]⑂ {name}[/]  [dim]{json.dumps(item, ensure_ascii=False)}[/]")
        bad = run_tasks(inner, scope, f"{prefix}{name}/")
        branches.append(Branch(name, item, inputs, scope.task_outputs, bad.name if bad else None))
    failed = [branch.label for branch in branches if branch.failed]
    result = TaskResult(f"{prefix}{task.name}", "Failed" if failed else "Succeeded", time.monotonic() - started)
    if failed:
        result.reason = f"branches failed: {', '.join(failed)} (the others ran to the end)"
    return result, branches
