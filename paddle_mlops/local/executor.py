"""`paddle-mlops run`: the train-deploy DAG as local processes, on embedded defaults.

The DAG orchestrator of the local runner, split as Kubeflow Pipelines splits its own: this module walks the
compiled workflow (dependency order, `when` and `depends`, `--only`/`--from` reusing the previous run, a fan-out's
branches, the exit handler, the follow-on run), `task_handler.py` runs each task as a process, and `summary.py`
reads the results (`results.py`) into `last-run.json`. Each task runs its container's command
(`python -m steps.<name> …`) with parameters and outputs passed the way Argo passes them; the training job the
train step places (a TrainJob, or a legacy PaddleJob) becomes a local `paddle.distributed.launch` with
`training.nproc` processes (job_launch.py). The first failure stops the run and shows that step's log tail; the exit
handler runs either way, as `onExit` does on Argo.

A `FollowOn` is the workflow the first one starts when it ends well: the `rollout` that the published
model's bucket notification starts (paddle_mlops/local/notify.py), run the same way, one summary for both.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from paddle_mlops.local import fanout, run_identity
from paddle_mlops.local import summary as run_summary
from paddle_mlops.local.dag import (
    DagError,
    Scope,
    Task,
    Workflow,
    dag_tasks,
    depends_met,
    evaluate_when,
    load_workflow,
)
from paddle_mlops.local.job_launch import PROJECT_ROOT
from paddle_mlops.local.results import Branch, RunRecord, TaskResult
from paddle_mlops.local.task_handler import RUNS_DIR, ProcessTaskHandler
from paddle_mlops_core.config.models import PipelineConfig
from paddle_mlops_core.config.placement import run_time_overrides
from paddle_mlops_core.contracts import (
    CACHE_LOOKUP_SUFFIX,
    CLUSTER_ONLY_ANNOTATION,
    RERUN_ALL,
    RERUN_PARAMETER,
    STEP_CACHE_DIR,
    STEP_CACHE_PARAMETER,
)


@dataclass
class FollowOn:
    """A workflow started by the first one's outcome: `parameters(task outputs)` gives its parameters, or None
    when nothing starts it (e.g. the gate failed, so nothing was published). A finetune-batch run asks once per
    branch, and every branch that published starts its own run."""

    doc: dict[str, Any]
    parameters: Callable[[dict[str, dict[str, str]]], dict[str, str] | None]
    # Parameters it gets when a step of it is rerun alone (--only/--from): a redeploy, not a first judgement.
    rerun: dict[str, str] = field(default_factory=dict)


@dataclass
class RunOptions:
    config_path: Path
    env: str | None
    overrides: list[str]
    workdir: Path
    only: str | None = None
    start_from: str | None = None
    git_sha: str | None = None
    library_warnings: bool = False
    task: str | None = None  # the `task` parameter (configs/tasks/<task>.yaml); None: the workflow's default
    # Workflow parameters set by whoever starts the run (e.g. the event parameters a Sensor sets).
    parameters: dict[str, str] = field(default_factory=dict)
    # The summary file in the workdir; `--only/--from` read the previous run from it.
    summary_name: str = "last-run.json"
    # The step cache (docs/caching.md): reuse nothing (`--no-cache`), or compute these steps anyway (`--rerun`).
    no_cache: bool = False
    rerun: list[str] = field(default_factory=list)
    # The command that starts this configuration as a new run, named when --only/--from would continue a run of
    # another configuration; None: one built from these options.
    fresh_command: str | None = None


def _git_sha() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10, check=True
        )
        return out.stdout.strip() or "local"
    except (OSError, subprocess.SubprocessError):
        return "local"


class LocalExecutor:
    """Walks a compiled workflow (and its follow-on) on this machine; its tasks run through `self.handler`."""

    def __init__(
        self,
        cfg: PipelineConfig,
        workflow_doc: dict[str, Any],
        opts: RunOptions,
        console: Console,
        results: Mapping[str, tuple[str, str]] | None = None,
        follow: FollowOn | None = None,
    ):
        """`results`: summary key -> (task, output) reported after the run (e.g. train_deploy.RESULTS)."""
        self.cfg = cfg
        self.opts = opts
        self.console = console
        self.results = dict(results or {})
        self.workflow: Workflow = load_workflow(workflow_doc)
        self.follow = follow
        self.follow_workflow = load_workflow(follow.doc) if follow else None
        self.workdir = opts.workdir.resolve()
        self.previous = self._load_previous()
        self.identity = run_identity.identity(cfg, cfg.task, opts.env, opts.overrides, opts.parameters)
        self.order = [t.name for t in self.workflow.tasks]
        self.order += [t.name for t in self.follow_workflow.tasks] if self.follow_workflow else []
        self._check_options()
        self.stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        reuse = opts.only or opts.start_from
        run_name = self.previous["run_name"] if reuse and self.previous else self._new_run_name()
        self.run_dir = self.workdir / RUNS_DIR / run_name
        self.handler = ProcessTaskHandler(cfg, self.workdir, self.run_dir, console, opts.library_warnings)
        # The first workflow's scope; a follow-on run's scopes come after it in `scopes`.
        self.scope = Scope(workflow_name=run_name, parameters={**self._parameters(self.workflow), **opts.parameters})
        self.scopes = [self.scope]
        self.branches: list[Branch] = []

    # -- set-up ---------------------------------------------------------------------------------

    def _check_options(self) -> None:
        """DagError for a --rerun, --only or --from that names no step, or that has no earlier run to reuse."""
        unknown = sorted(set(self.opts.rerun) - set(self.order) - {RERUN_ALL})
        if unknown:
            raise DagError(
                f"--rerun: no step named {', '.join(map(repr, unknown))}; the steps are: {', '.join(self.order)}"
            )
        reuse = self.opts.only or self.opts.start_from
        if reuse:
            if reuse not in self.order:
                raise DagError(f"no step named {reuse!r}; the steps are: {', '.join(self.order)}")
            if not self.previous:
                raise DagError(
                    f"--only/--from need an earlier run in {self.workdir} (no {self.opts.summary_name} there)"
                )
            self._check_same_configuration()

    def _check_same_configuration(self) -> None:
        """DagError when --only/--from would continue a run of another task or settings: naming what differs and
        the command that starts a new run, so one run's workspace never holds another configuration's files."""
        previous = self.previous or {}
        differ = run_identity.differences(previous, self.identity, run_identity.resolved(self.cfg))
        if not differ:
            return
        flag = f"--only {self.opts.only}" if self.opts.only else f"--from {self.opts.start_from}"
        raise DagError(
            f"{flag} continues the last run, {previous.get('run_name')}, only with its task and settings; this "
            f"command differs (last run vs this command): {'; '.join(differ)}. Its workspace "
            f"({previous.get('workspace')}) is left as it is. Start a new run instead (the step cache reuses every "
            f"step whose inputs did not change): {self.opts.fresh_command or self._fresh_command()} (or give {flag} "
            "the last run's task and settings)"
        )

    def _fresh_command(self) -> str:
        argv = ["paddle-mlops", "run", "--config", str(self.opts.config_path), "--task", self.cfg.task]
        argv += ["--env", self.opts.env] if self.opts.env else []
        argv += [part for item in self.opts.overrides for part in ("--set", item)]
        return shlex.join([*argv, "--workdir", str(self.opts.workdir)])

    def _new_run_name(self) -> str:
        """`<workflow>-<stamp>`, with a count after the stamp when a run started in the same second: a new run
        never writes into another's workspace."""
        base, count = self.stamp, 1
        while (self.workdir / RUNS_DIR / f"{self.workflow.name}-{self.stamp}").exists():
            count += 1
            self.stamp = f"{base}-{count}"
        return f"{self.workflow.name}-{self.stamp}"

    def _load_previous(self) -> dict[str, Any] | None:
        path = self.workdir / self.opts.summary_name
        if not path.is_file():
            return None
        try:
            previous = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return None
        return previous if isinstance(previous, dict) else None

    def _parameters(self, workflow: Workflow) -> dict[str, str]:
        params = dict(workflow.parameters)
        params.update(
            {
                "git-sha": self.opts.git_sha or _git_sha(),
                "config": str(self.opts.config_path.resolve()),
                "env": self.opts.env or "",
                **({"task": self.opts.task} if self.opts.task else {}),
                # Placement keys went into the DAG this run compiled; the steps get only what they read at run time.
                "overrides": json.dumps(run_time_overrides(self.opts.overrides)),
                "workspace": str(self.workdir / "runs"),
                STEP_CACHE_PARAMETER: str(self.workdir / STEP_CACHE_DIR),
                RERUN_PARAMETER: self._rerun(),
            }
        )
        return params

    def _rerun(self) -> str:
        """The steps computed even when the step cache holds their outputs: `--rerun`, all with `--no-cache`, and the
        steps `--only`/`--from` ask to run again (a rerun the user asked for is never served from the cache)."""
        if self.opts.no_cache:
            return RERUN_ALL
        asked = list(self.opts.rerun)
        if self.opts.only:
            asked.append(self.opts.only)
        elif self.opts.start_from:
            asked += self.order[self.order.index(self.opts.start_from) :]
        return ",".join(dict.fromkeys(asked))

    # -- --only / --from ------------------------------------------------------------------------

    def _reused(self, task: Task) -> TaskResult:
        prev = next((s for s in (self.previous or {}).get("steps", []) if s["name"] == task.name), None)
        if prev and prev.get("status") == "Skipped":  # its `when` said no then, as it would now (the canary's)
            return TaskResult(task.name, "Skipped", reason=prev.get("reason"))
        if not prev or prev.get("status") not in ("Succeeded", "Reused"):
            raise DagError(f"--only/--from: step {task.name!r} did not succeed in the previous run; run it first")
        return TaskResult(task.name, "Reused", 0.0, outputs=dict(prev.get("outputs") or {}))

    def _should_run(self, task: Task) -> bool:
        if not (self.opts.only or self.opts.start_from):
            return True
        index = self.order.index(task.name)
        if self.opts.only:
            return task.name in (self.opts.only, self._lookup_of(self.opts.only))
        if self.opts.start_from:
            start = self._lookup_of(self.opts.start_from)
            return index >= min(self.order.index(start), self.order.index(self.opts.start_from))
        return True

    def _lookup_of(self, step: str) -> str:
        """The step's cache lookup task (train-cache for train) when it has one, else the step: running the step again
        runs its lookup too, or the lookup's earlier answer (`reused`) would skip it."""
        lookup = f"{step}{CACHE_LOOKUP_SUFFIX}"
        return lookup if lookup in self.order else step

    # -- walking the DAG ------------------------------------------------------------------------

    def _run_tasks(self, tasks: list[Task], scope: Scope, prefix: str, results: list[TaskResult]) -> TaskResult | None:
        """Run `tasks` in `scope`, appending to `results`; the first that failed, if any. After a failure only tasks
        whose `depends` allows it still run (a summary after a fan-out), as on Argo."""
        failed: TaskResult | None = None
        statuses: dict[str, str] = {}
        for task in tasks:
            if failed is not None and not depends_met(task.depends_expr, statuses, task.depends):
                continue  # what it depends on failed: Argo omits it
            result = self._run_task(task, scope, prefix, results)
            statuses[task.name] = result.status
            if result.status == "Failed" and failed is None:
                failed = result
        return failed

    def _cluster_only(self, task: Task) -> TaskResult | None:
        """Skipped, saying why, for a task only a cluster can run (its template's annotation); None otherwise."""
        cluster_only = ((task.template.get("metadata") or {}).get("annotations") or {}).get(CLUSTER_ONLY_ANNOTATION)
        if not cluster_only:
            return None
        result = TaskResult(task.name, "Skipped", reason=f"cluster only: {cluster_only}")
        self.console.print(f"[yellow]⤼ {task.name} skipped[/] ({result.reason})")
        return result

    def _run_task(self, task: Task, scope: Scope, prefix: str, results: list[TaskResult]) -> TaskResult:
        skipped = self._cluster_only(task)
        if skipped is not None:  # never run here, so never reused either (--only/--from)
            result = skipped
        elif task.kind == "dag":
            result = self._fan_out(task, scope, prefix, results)
            results.append(result)
            return result
        elif not self._should_run(task):
            if self.opts.only and self.order.index(task.name) > self.order.index(self.opts.only):
                result = TaskResult(task.name, "Not run")
                results.append(result)
                return result
            result = self._reused(task)
        elif task.when and not evaluate_when(scope.render(task.when)):
            result = self._skipped(task, scope, prefix)
        else:
            result = self.handler.run(task, scope, prefix)
        results.append(result)
        scope.task_outputs[task.name] = result.outputs
        return result

    def _skipped(self, task: Task, scope: Scope, prefix: str) -> TaskResult:
        """A task whose `when` is false: Skipped, or Reused when its cache lookup task (train-cache for train) found
        its outputs."""
        result = TaskResult(f"{prefix}{task.name}", "Skipped", reason=f"when: {scope.render(task.when or '')}")
        lookup = scope.task_outputs.get(f"{task.name}{CACHE_LOOKUP_SUFFIX}") or {}
        if not self.handler.note_reuse(result, lookup):
            self.console.print(f"[yellow]⤼ {result.name} skipped[/] ({result.reason})")
        return result

    def _fan_out(self, task: Task, scope: Scope, prefix: str, results: list[TaskResult]) -> TaskResult:
        """A DAG task: its template's tasks once per item (fanout.py), each branch walked as the workflow is."""
        if self.opts.only or self.opts.start_from:
            raise DagError(f"--only/--from cannot rerun part of the fan-out {task.name!r}; run it whole")

        def run_branch(tasks: list[Task], branch_scope: Scope, branch_prefix: str) -> TaskResult | None:
            return self._run_tasks(tasks, branch_scope, branch_prefix, results)

        result, branches = fanout.run(task, scope, prefix, self.workflow.templates, run_branch, self.console)
        self.branches += branches
        return result

    def _exit(self, workflow: Workflow, failed: TaskResult | None, scope: Scope, prefix: str) -> TaskResult | None:
        """The workflow's exit handler, as `onExit` runs it on Argo: after success and failure alike."""
        scope.status = "Failed" if failed else "Succeeded"
        if not workflow.exit_task:
            return None
        if workflow.exit_task.kind != "dag":
            return self.handler.run(workflow.exit_task, scope, prefix)
        # A DAG of exit tasks (close the MLflow runs; release the training jobs, on a cluster only): each runs,
        # whatever the others did; the result is the first that failed, else the last that ran.
        tasks = dag_tasks(workflow.exit_task.template, workflow.templates)
        ran = [self.handler.run(task, scope, prefix) for task in tasks if self._cluster_only(task) is None]
        return next((result for result in ran if result.status == "Failed"), ran[-1] if ran else None)

    # -- the follow-on run ----------------------------------------------------------------------

    def _follow_parameters(self) -> list[dict[str, str]]:
        """One parameter set per follow-on run: from the outputs of each chain that published (train-deploy's, or
        each finetune-batch branch's), with the rerun ones for --only/--from."""
        if self.follow is None or self.follow_workflow is None:
            return []
        # A batch branch's rollout judges its task with the branch's own overrides, as a single-task run's rollout
        # takes the run's: locally a run is one configuration throughout. (On the cluster the Sensor's rollout loads
        # the task's file: data a task is judged on belongs in configs/tasks/<task>.yaml.)
        chains = [(b.outputs, {"overrides": b.inputs.get("overrides", "[]")}) for b in self.branches]
        found = [
            {**params, **extra}
            for outputs, extra in chains or [(dict(self.scope.task_outputs), {})]
            if (params := self.follow.parameters(outputs)) is not None
        ]
        if (self.opts.only or self.opts.start_from) in [t.name for t in self.follow_workflow.tasks]:
            found = [{**params, **self.follow.rerun} for params in found]
        return found

    def _follow_on_scope(self, workflow: Workflow, params: dict[str, str], several: bool) -> tuple[Scope, str]:
        """A follow-on run's scope (named per task when there are several) and its tasks' folder prefix."""
        name = f"{workflow.name}-{self.stamp}" + (f"-{params.get('task', len(self.scopes))}" if several else "")
        self.console.print(f"[bold cyan]⚡ {name}[/] started by the publish notification")
        scope = Scope(workflow_name=name, parameters={**self._parameters(workflow), **params})
        scope.task_outputs.update(self.scope.task_outputs)
        self.scopes.append(scope)
        return scope, (f"{name}/" if several else "")

    def run(self) -> tuple[int, dict[str, Any]]:
        run_identity.record_resolved(self.run_dir, self.cfg)
        results: list[TaskResult] = []
        started = time.monotonic()
        failed = self._run_tasks(self.workflow.tasks, self.scope, "", results)
        exit_result = self._exit(self.workflow, failed, self.scope, "")
        follow_ons = self._follow_parameters()
        if self.follow_workflow is not None:
            for params in follow_ons:
                several = len(follow_ons) > 1 or bool(self.branches)
                scope, prefix = self._follow_on_scope(self.follow_workflow, params, several)
                bad = self._run_tasks(self.follow_workflow.tasks, scope, prefix, results)
                exit_result = self._exit(self.follow_workflow, bad, scope, prefix) or exit_result
                failed = failed or bad
        record = RunRecord(
            results=results,
            exit_result=exit_result,
            failed=failed,
            seconds=time.monotonic() - started,
            scopes=self.scopes,
            branches=self.branches,
            workdir=self.workdir,
            run_dir=self.run_dir,
            tracking_uri=self.handler.tracking_uri(),
            task=self.cfg.task,
            reported=self.results,
        )
        summary = {**run_summary.build(record), run_identity.IDENTITY_KEY: self.identity}
        path = self.workdir / self.opts.summary_name
        path.write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
        run_summary.show(self.console, summary, failed, path)
        return (1 if failed else 0), summary
