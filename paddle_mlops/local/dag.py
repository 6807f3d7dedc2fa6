"""Read the Argo DAG from a compiled WorkflowTemplate and resolve its expressions the way Argo does.

The local executor never lists the steps itself: it takes tasks, dependencies, `when` conditions,
commands and output paths from the same `to_dict()` that `paddle-mlops compile` writes to argo/.
Only the expression forms the pipelines use are supported; anything else is an error, not a guess.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from paddle_mlops_core.contracts import OUTPUTS_DIR
from pipelines.train_step import placed_manifest

_EXPR = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")
_DEP_TOKEN = re.compile(r"[A-Za-z0-9][-A-Za-z0-9]*(?:\.[A-Za-z]+)?")

#: Where containers write output parameters; locally this folder is mapped to a task's own.
CONTAINER_OUTPUTS = OUTPUTS_DIR


class DagError(Exception):
    """The compiled workflow uses something the local executor cannot run."""


@dataclass(frozen=True)
class Task:
    name: str
    template: dict[str, Any]
    depends: tuple[str, ...]
    when: str | None
    arguments: dict[str, str]
    depends_expr: str | None = None  # Argo's `depends` as written (None: `dependencies`, or none)
    with_param: str | None = None  # a fan-out: one run of the template per item of this JSON list

    @property
    def kind(self) -> str:
        for kind in ("container", "resource", "dag"):
            if kind in self.template:
                return kind
        raise DagError(
            f"task {self.name!r}: template {self.template.get('name')!r} is neither a container, a resource nor a DAG"
        )

    @property
    def output_paths(self) -> dict[str, str]:
        """Output parameter name -> the path the container writes it to."""
        out: dict[str, str] = {}
        for param in (self.template.get("outputs") or {}).get("parameters") or []:
            path = (param.get("valueFrom") or {}).get("path")
            if path:
                out[param["name"]] = path
        return out


@dataclass
class Workflow:
    name: str
    parameters: dict[str, str]
    tasks: list[Task]
    exit_task: Task | None
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)


def _depends_names(task: dict[str, Any]) -> tuple[str, ...]:
    if task.get("dependencies"):
        return tuple(task["dependencies"])
    expr = task.get("depends") or ""
    names = []
    for token in _DEP_TOKEN.findall(expr):
        name = token.split(".", 1)[0]
        if name not in names:
            names.append(name)
    return tuple(names)


def _order(tasks: list[Task]) -> list[Task]:
    """Topological order, stable with respect to the definition order."""
    by_name = {t.name: t for t in tasks}
    for t in tasks:
        for dep in t.depends:
            if dep not in by_name:
                raise DagError(f"task {t.name!r} depends on unknown task {dep!r}")
    done: list[Task] = []
    seen: set[str] = set()
    pending = list(tasks)
    while pending:
        ready = [t for t in pending if all(d in seen for d in t.depends)]
        if not ready:
            raise DagError("the DAG has a cycle: " + ", ".join(t.name for t in pending))
        for t in ready:
            done.append(t)
            seen.add(t.name)
            pending.remove(t)
    return done


def dag_tasks(dag_template: dict[str, Any], templates: dict[str, dict[str, Any]]) -> list[Task]:
    """The tasks of a DAG template, in dependency order."""
    tasks = []
    for raw in dag_template["dag"]["tasks"]:
        args = {p["name"]: str(p.get("value", "")) for p in (raw.get("arguments") or {}).get("parameters") or []}
        tasks.append(
            Task(
                name=raw["name"],
                template=templates[raw["template"]],
                depends=_depends_names(raw),
                when=raw.get("when"),
                arguments=args,
                depends_expr=raw.get("depends"),
                with_param=raw.get("withParam"),
            )
        )
    return _order(tasks)


def load_workflow(doc: dict[str, Any]) -> Workflow:
    """Turn a WorkflowTemplate/Workflow document into an ordered list of tasks."""
    spec = doc["spec"]
    templates = {t["name"]: t for t in spec["templates"]}
    entry = templates.get(spec.get("entrypoint", ""))
    if not entry or "dag" not in entry:
        raise DagError(f"entrypoint {spec.get('entrypoint')!r} is not a DAG template")
    exit_task = None
    if spec.get("onExit"):
        exit_task = Task(name=spec["onExit"], template=templates[spec["onExit"]], depends=(), when=None, arguments={})
    params = {p["name"]: str(p.get("value", "")) for p in (spec.get("arguments") or {}).get("parameters") or []}
    name = (doc.get("metadata") or {}).get("name", "workflow")
    return Workflow(
        name=name, parameters=params, tasks=dag_tasks(entry, templates), exit_task=exit_task, templates=templates
    )


_STATE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9]*)(?:\.([A-Za-z]+))?")
# What a local task status counts as for a `depends` state (Reused: it succeeded in the run reused).
_COUNTS_AS = {
    "Succeeded": {"Succeeded", "Reused"},
    "Failed": {"Failed"},
    "Errored": {"Errored"},
    "Skipped": {"Skipped"},
    "Omitted": {"Omitted"},
    "Daemoned": set(),
}


def depends_met(expression: str | None, statuses: dict[str, str], names: tuple[str, ...]) -> bool:
    """Whether a task may run given its dependencies' statuses: Argo's `depends` (`a`, `a.Succeeded`, `a.Failed`, …
    joined by `&&`, `||` and parentheses; a bare name is `Succeeded || Skipped || Daemoned`), or every one of
    `names` succeeded or was skipped when there is no expression."""

    def state(match: re.Match[str]) -> str:
        task, wanted = match.group(1), match.group(2)
        status = statuses.get(task, "Omitted")
        if wanted is None:
            return str(status in _COUNTS_AS["Succeeded"] | _COUNTS_AS["Skipped"])
        if wanted not in _COUNTS_AS:
            raise DagError(f"depends state {wanted!r} (in {expression!r}) is not supported by the local executor")
        return str(status in _COUNTS_AS[wanted])

    if not expression:
        return all(statuses.get(n) in _COUNTS_AS["Succeeded"] | _COUNTS_AS["Skipped"] for n in names)
    python = _STATE.sub(state, expression).replace("&&", " and ").replace("||", " or ")
    if not re.fullmatch(r"[\sA-Za-z()]*", python) or re.search(r"\b(?!True\b|False\b|and\b|or\b)[A-Za-z]+", python):
        raise DagError(f"depends {expression!r} is not supported by the local executor")
    return bool(eval(python, {"__builtins__": {}}, {}))  # noqa: S307 - only True/False/and/or/() remain


@dataclass
class Scope:
    """Values that `{{…}}` expressions resolve against."""

    workflow_name: str
    parameters: dict[str, str]
    task_outputs: dict[str, dict[str, str]] = field(default_factory=dict)
    status: str = "Running"
    # Inside a DAG template run by a task: that template's inputs, and the fan-out item of its run.
    inputs: dict[str, str] | None = None
    item: Any = None

    def lookup(self, expr: str, inputs: dict[str, str] | None = None) -> str:
        if expr == "workflow.name":
            return self.workflow_name
        if expr == "workflow.status":
            return self.status
        parts = expr.split(".")
        if parts[0] == "item" and self.item is not None:
            return _item_value(self.item, parts[1:], expr)
        inputs = self.inputs if inputs is None else inputs
        if parts[:2] == ["workflow", "parameters"] and len(parts) == 3:
            return self._get(self.parameters, parts[2], expr)
        if parts[:2] == ["inputs", "parameters"] and len(parts) == 3 and inputs is not None:
            return self._get(inputs, parts[2], expr)
        if parts[0] == "tasks" and len(parts) == 5 and parts[2:4] == ["outputs", "parameters"]:
            return self._get(self.task_outputs.get(parts[1], {}), parts[4], expr)
        raise DagError(f"expression {{{{{expr}}}}} is not supported by the local executor")

    @staticmethod
    def _get(values: dict[str, str], key: str, expr: str) -> str:
        if key not in values:
            raise DagError(f"{{{{{expr}}}}} has no value (the step that produces it did not run or wrote nothing)")
        return values[key]

    def render(self, text: str, inputs: dict[str, str] | None = None) -> str:
        return _EXPR.sub(lambda m: self.lookup(m.group(1), inputs), text)


def _item_value(item: Any, keys: list[str], expr: str) -> str:
    """`{{item}}` / `{{item.key}}` as Argo renders them: strings as they are, anything else as JSON."""
    value = item
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            raise DagError(f"{{{{{expr}}}}} has no value: the item {item!r} has no {key!r}")
        value = value[key]
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def evaluate_when(condition: str) -> bool:
    """Argo `when` after substitution; the pipelines only compare two words with == or !=."""
    for op in ("==", "!="):
        if op in condition:
            left, right = (s.strip().strip("'\"") for s in condition.split(op, 1))
            return (left == right) if op == "==" else (left != right)
    raise DagError(f"when condition {condition!r} is not of the form 'a == b' or 'a != b'")


def task_inputs(task: Task, scope: Scope) -> dict[str, str]:
    """Input parameters of the task's template: task arguments first, template defaults second."""
    values: dict[str, str] = {}
    for param in (task.template.get("inputs") or {}).get("parameters") or []:
        if param["name"] in task.arguments:
            values[param["name"]] = scope.render(task.arguments[param["name"]])
        elif "value" in param:
            values[param["name"]] = scope.render(str(param["value"]))
        elif "default" in param:
            values[param["name"]] = scope.render(str(param["default"]))
        else:
            raise DagError(f"task {task.name!r}: input parameter {param['name']!r} has no value")
    return values


def container_command(task: Task) -> list[str]:
    """The command a container template runs (unrendered)."""
    container = task.template["container"]
    return [*container.get("command", []), *container.get("args", [])]


def job_command(task: Task) -> list[str] | None:
    """The command of the first worker container of the training job the task's template places (a train step:
    pipelines/train_step.py), unrendered; None for any other task."""
    manifest = placed_manifest(task.template)
    if manifest is None:
        return None
    spec = manifest.get("spec", {})
    trainer = spec.get("trainer") if manifest.get("kind") == "TrainJob" else None
    if trainer and trainer.get("command"):  # trainer.kubeflow.org: the node container's command
        return [*trainer["command"], *trainer.get("args", [])]
    for pod_template in _replica_templates(spec):
        containers = pod_template.get("spec", {}).get("containers") or []
        if containers:
            c = containers[0]
            cmd = [*c.get("command", []), *c.get("args", [])]
            if len(cmd) == 3 and cmd[:2] in (["sh", "-c"], ["bash", "-c"], ["/bin/sh", "-c"]):
                return shlex.split(cmd[2])
            return cmd
    raise DagError(f"task {task.name!r}: no container found in the {manifest.get('kind')} manifest")


def _replica_templates(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Pod templates of a PaddleJob of either operator, workers first."""
    out = []
    replicas = spec.get("paddleReplicaSpecs")  # kubeflow.org/v1
    if replicas:
        for role in ("Worker", "Master"):
            if role in replicas:
                out.append(replicas[role].get("template", {}))
    for role in ("worker", "ps"):  # batch.paddlepaddle.org/v1
        if role in spec:
            out.append(spec[role].get("template", {}))
    return out
