"""`paddle-mlops run`: the train-deploy DAG as local processes, on embedded defaults.

Each task runs its container's command (`python -m steps.<name> …`) with parameters and outputs
passed the way Argo passes them; the PaddleJob resource becomes a local
`paddle.distributed.launch` with `training.nproc` processes. The first failure stops the run and
shows that step's log tail; the exit handler runs either way, as `onExit` does on Argo.

A `FollowOn` is the workflow the first one starts when it ends well: the `rollout` that the published
model's bucket notification starts (paddle_mlops/local/notify.py), run the same way, one summary for both.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from paddle_mlops.config import PipelineConfig
from paddle_mlops.config.placement import run_time_overrides
from paddle_mlops.contracts import (
    CACHE_LOOKUP_SUFFIX,
    CACHE_OUTPUT,
    CLUSTER_ONLY_ANNOTATION,
    HOME_ENV,
    RERUN_ALL,
    RERUN_PARAMETER,
    STEP_CACHE_DIR,
    STEP_CACHE_PARAMETER,
    TRACKING_URI_ENV,
    tracking_uri,
)
from paddle_mlops.local import fanout
from paddle_mlops.local import summary as run_summary
from paddle_mlops.local.dag import (
    CONTAINER_OUTPUTS,
    DagError,
    Scope,
    Task,
    Workflow,
    container_command,
    depends_met,
    evaluate_when,
    load_workflow,
    resource_command,
    task_inputs,
)
from paddle_mlops.local.library_lines import library_of
from steps.runtime import noise

PROJECT_ROOT = Path(__file__).resolve().parents[2]
TAIL_LINES = 40


@dataclass
class TaskResult:
    name: str
    status: str  # Succeeded | Failed | Skipped | Reused
    seconds: float = 0.0
    exit_code: int | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    log: str | None = None
    reason: str | None = None


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


def _git_sha() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10, check=True
        )
        return out.stdout.strip() or "local"
    except (OSError, subprocess.SubprocessError):
        return "local"


def ps_python() -> str:
    """The interpreter for parameter-server jobs: PADDLE_MLOPS_PS_PYTHON, else the checkout's
    `.venv-ps` (`make ps-env`: paddlepaddle 3.0.0, the last CPU wheel built WITH_PSCORE), else this one."""
    chosen = os.environ.get("PADDLE_MLOPS_PS_PYTHON")
    if chosen:
        return chosen
    candidate = PROJECT_ROOT / ".venv-ps" / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


class LocalExecutor:
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
        self.order = [t.name for t in self.workflow.tasks]
        self.order += [t.name for t in self.follow_workflow.tasks] if self.follow_workflow else []
        unknown = sorted(set(opts.rerun) - set(self.order) - {RERUN_ALL})
        if unknown:
            raise DagError(
                f"--rerun: no step named {', '.join(map(repr, unknown))}; the steps are: {', '.join(self.order)}"
            )
        reuse = opts.only or opts.start_from
        if reuse:
            names = self.order
            if reuse not in names:
                raise DagError(f"no step named {reuse!r}; the steps are: {', '.join(names)}")
            if not self.previous:
                raise DagError(
                    f"--only/--from need an earlier run in {self.workdir} (no {self.opts.summary_name} there)"
                )
        self.stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        run_name = self.previous["run_name"] if reuse and self.previous else f"{self.workflow.name}-{self.stamp}"
        self.run_dir = self.workdir / "runs" / run_name
        self.scope = Scope(workflow_name=run_name, parameters={**self._parameters(self.workflow), **opts.parameters})
        self.scopes = [self.scope]
        self.prefix = ""  # the current fan-out branch's or follow-on run's folder, when there are several
        self.branches: list[fanout.Branch] = []

    # -- set-up ---------------------------------------------------------------------------------

    def _load_previous(self) -> dict[str, Any] | None:
        path = self.workdir / self.opts.summary_name
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return None

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

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                HOME_ENV: str(self.workdir),
                "PADDLE_MLOPS_RUN": self.scope.workflow_name,
                "GIT_SHA": self.scope.parameters["git-sha"],
                "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p),
            }
        )
        env.setdefault(TRACKING_URI_ENV, self.tracking_uri())
        return noise.showing(env) if self.opts.library_warnings else env

    def tracking_uri(self) -> str:
        return tracking_uri(self.cfg.mlflow.tracking_uri, self.workdir)

    # -- commands -------------------------------------------------------------------------------

    def _outputs_dir(self, task: Task) -> Path:
        return self._task_dir(task) / "outputs"

    def _task_dir(self, task: Task) -> Path:
        """A task's folder in the run: its log, outputs and workers' logs (a branch's tasks under the branch)."""
        return self.run_dir / f"{self.prefix}{task.name}"

    def _localise(self, arg: str, task: Task) -> str:
        if arg == CONTAINER_OUTPUTS or arg.startswith(CONTAINER_OUTPUTS + "/"):
            return str(self._outputs_dir(task)) + arg[len(CONTAINER_OUTPUTS) :]
        return arg

    def command_for(self, task: Task) -> list[str]:
        inputs = task_inputs(task, self.scope)
        raw = container_command(task) if task.kind == "container" else resource_command(task)
        cmd = [self._localise(self.scope.render(part, inputs), task) for part in raw]
        if cmd and cmd[0] in ("python", "python3"):
            cmd[0] = sys.executable
        if task.kind == "resource":
            cmd = self._local_launch(cmd, task)
        return cmd

    def _local_launch(self, cmd: list[str], task: Task) -> list[str]:
        """The training job's node command (TrainJob or PaddleJob), re-targeted at this machine's
        processes: one node, `training.nproc` processes, logs under the run directory."""
        out = _one_node(cmd)
        tcfg = self.cfg.training
        for i, part in enumerate(out):
            if part == "--nproc_per_node" and i + 1 < len(out):
                out[i + 1] = str(tcfg.nproc)
            elif part == "--log_dir" and i + 1 < len(out):
                out[i + 1] = str(self._task_dir(task) / "paddle-log")
            elif part.endswith(".py") and not Path(part).is_absolute():
                out[i] = str(PROJECT_ROOT / part)
        if tcfg.topology == "ps" or tcfg.job.ps_replicas > 0:
            # Parameter-server mode: the launcher starts the servers and trainers on this machine.
            at = out.index("--nproc_per_node")
            servers = str(max(1, tcfg.job.ps_replicas))
            out[at : at + 2] = ["--server_num", servers, "--trainer_num", str(tcfg.nproc)]
            if "--run_mode" not in out:
                out[at:at] = ["--run_mode", "ps"]
            out[0] = ps_python()
        return out

    # -- running --------------------------------------------------------------------------------

    def _run_process(self, task: Task, cmd: list[str]) -> TaskResult:
        log_path = self._task_dir(task) / "step.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._outputs_dir(task).mkdir(parents=True, exist_ok=True)
        deadline = task.template.get("activeDeadlineSeconds")
        tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        started = time.monotonic()
        name = f"{self.prefix}{task.name}"
        self.console.print(f"[bold cyan]▶ {name}[/]  [dim]{' '.join(cmd)}[/]", highlight=False)
        with (
            open(log_path, "w", encoding="utf-8") as log,
            subprocess.Popen(
                cmd,
                cwd=PROJECT_ROOT,
                env=self._env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
                bufsize=1,
            ) as proc,
        ):
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.rstrip("\n")
                log.write(line + "\n")
                tail.append(line)
                if self.opts.library_warnings or library_of(line) is None:  # library chatter: step.log only
                    self.console.out(f"[{name}] {line}", highlight=False)
                if deadline and time.monotonic() - started > float(deadline):
                    proc.kill()
                    tail.append(f"killed: step ran past its deadline of {deadline}s")
                    break
            code = proc.wait()
        seconds = time.monotonic() - started
        result = TaskResult(name, "Succeeded" if code == 0 else "Failed", seconds, code, log=str(log_path))
        if code == 0:
            result.outputs = self._read_outputs(task)
            if not task.name.endswith(CACHE_LOOKUP_SUFFIX):  # a lookup's report is about the task it looks up
                self._note_reuse(result, result.outputs)
        else:
            result.reason = "\n".join([*tail, *self._worker_log_tails(task)])
        return result

    def _note_reuse(self, result: TaskResult, outputs: dict[str, str]) -> bool:
        """A step that reused its outputs from the step cache (its `cache` output) is Reused, and says from where."""
        try:
            report = json.loads(outputs.get(CACHE_OUTPUT) or "{}")
        except json.JSONDecodeError:
            return False
        if not isinstance(report, dict) or report.get("reused") is not True:
            return False
        result.status = "Reused"
        result.reason = f"reused from run {report.get('run') or '?'} (key {str(report.get('key') or '')[:12]})"
        self.console.print(f"[bold blue]↺ {result.name} {result.reason}[/]", highlight=False)
        return True

    def _worker_log_tails(self, task: Task) -> list[str]:
        """paddle.distributed.launch keeps other ranks' output in workerlog.N files."""
        lines: list[str] = []
        for worker_log in sorted((self._task_dir(task) / "paddle-log").glob("workerlog.*")):
            content = worker_log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
            lines += [f"--- {worker_log.name} ---", *content]
        return lines

    def _read_outputs(self, task: Task) -> dict[str, str]:
        outputs = {}
        for name, path in task.output_paths.items():
            local = Path(self._localise(path, task))
            if local.is_file():
                outputs[name] = local.read_text(encoding="utf-8").strip()
        return outputs

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

    def _run_tasks(self, tasks: list[Task], results: list[TaskResult]) -> TaskResult | None:
        """Run `tasks` in the current scope, appending to `results`; the first that failed, if any. After a failure
        only tasks whose `depends` allows it still run (a summary after a fan-out), as on Argo."""
        failed: TaskResult | None = None
        statuses: dict[str, str] = {}
        for task in tasks:
            if failed is not None and not depends_met(task.depends_expr, statuses, task.depends):
                continue  # what it depends on failed: Argo omits it
            result = self._run_task(task, results)
            statuses[task.name] = result.status
            if result.status == "Failed" and failed is None:
                failed = result
        return failed

    def _run_task(self, task: Task, results: list[TaskResult]) -> TaskResult:
        cluster_only = ((task.template.get("metadata") or {}).get("annotations") or {}).get(CLUSTER_ONLY_ANNOTATION)
        if cluster_only:  # never run here, so never reused either (--only/--from)
            result = TaskResult(task.name, "Skipped", reason=f"cluster only: {cluster_only}")
            self.console.print(f"[yellow]⤼ {task.name} skipped[/] ({result.reason})")
        elif task.kind == "dag":
            return fanout.run(self, task, results)
        elif not self._should_run(task):
            if self.opts.only and self.order.index(task.name) > self.order.index(self.opts.only):
                result = TaskResult(task.name, "Not run")
                results.append(result)
                return result
            result = self._reused(task)
        elif task.when and not evaluate_when(self.scope.render(task.when)):
            result = TaskResult(f"{self.prefix}{task.name}", "Skipped", reason=f"when: {self.scope.render(task.when)}")
            # skipped because its cache lookup task (train-cache for train) found its outputs: Reused, not Skipped
            lookup = self.scope.task_outputs.get(f"{task.name}{CACHE_LOOKUP_SUFFIX}") or {}
            if not self._note_reuse(result, lookup):
                self.console.print(f"[yellow]⤼ {result.name} skipped[/] ({result.reason})")
        else:
            result = self._run_process(task, self.command_for(task))
        results.append(result)
        self.scope.task_outputs[task.name] = result.outputs
        return result

    def _exit(self, workflow: Workflow, failed: TaskResult | None) -> TaskResult | None:
        """The workflow's exit handler, as `onExit` runs it on Argo: after success and failure alike."""
        self.scope.status = "Failed" if failed else "Succeeded"
        if not workflow.exit_task:
            return None
        return self._run_process(workflow.exit_task, self.command_for(workflow.exit_task))

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

    def _enter_follow_on(self, workflow: Workflow, params: dict[str, str], several: bool) -> None:
        """Switch to a follow-on run's scope (named per task when there are several)."""
        outputs = dict(self.scopes[0].task_outputs)
        name = f"{workflow.name}-{self.stamp}" + (f"-{params.get('task', len(self.scopes))}" if several else "")
        self.console.print(f"[bold cyan]⚡ {name}[/] started by the publish notification")
        self.scope = Scope(workflow_name=name, parameters={**self._parameters(workflow), **params})
        self.scope.task_outputs.update(outputs)
        self.scopes.append(self.scope)
        self.prefix = f"{name}/" if several else ""

    def run(self) -> tuple[int, dict[str, Any]]:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        results: list[TaskResult] = []
        started = time.monotonic()
        failed = self._run_tasks(self.workflow.tasks, results)
        exit_result = self._exit(self.workflow, failed)
        follow_ons = self._follow_parameters()
        for params in follow_ons:
            assert self.follow_workflow is not None
            self._enter_follow_on(self.follow_workflow, params, several=len(follow_ons) > 1 or bool(self.branches))
            bad = self._run_tasks(self.follow_workflow.tasks, results)
            exit_result = self._exit(self.follow_workflow, bad) or exit_result
            failed = failed or bad
        self.prefix = ""
        summary = run_summary.build(self, results, exit_result, failed, time.monotonic() - started)
        path = self.workdir / self.opts.summary_name
        path.write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
        run_summary.show(self.console, summary, failed, path)
        return (1 if failed else 0), summary


def _one_node(cmd: list[str]) -> list[str]:
    """A multi-node launch as a single-node one: `--nnodes 1`, no rendezvous master or node rank
    (the values are the kubelet's `$(VAR)` references, meaningless here)."""
    out: list[str] = []
    skip = False
    for i, part in enumerate(cmd):
        if skip:
            skip = False
            continue
        if part in ("--master", "--rank") and i + 1 < len(cmd):
            skip = True
            continue
        out.append(part)
    if "--nnodes" in out:
        out[out.index("--nnodes") + 1] = "1"
    return out
