"""One task as one local process: its container's command, run the way the task's pod would run it.

The task handler of the local runner (Kubeflow Pipelines' local runner has one per kind of runner; here every task is
a subprocess): it renders the task's command (`python -m steps.<name> …`) with parameters and output paths passed as
Argo passes them, turns the training job a train step places into a local `paddle.distributed.launch` (job_launch.py)
(the step that would place and watch it on a cluster is not run: locally the job's processes are the step), runs it
with the run's environment, streams its log, kills it past its deadline, reads its declared outputs and says when the
step cache served it. It never decides whether a task runs: the orchestrator (executor.py) does.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from rich.console import Console

from paddle_mlops.local.dag import CONTAINER_OUTPUTS, Scope, Task, container_command, job_command, task_inputs
from paddle_mlops.local.job_launch import PROJECT_ROOT, local_launch
from paddle_mlops.local.library_lines import library_of
from paddle_mlops.local.results import TaskResult
from paddle_mlops_core.config.models import PipelineConfig
from paddle_mlops_core.contracts import (
    CACHE_LOOKUP_SUFFIX,
    CACHE_OUTPUT,
    HOME_ENV,
    RUN_ENV,
    TRACKING_URI_ENV,
    tracking_uri,
)
from steps.runtime import noise

TAIL_LINES = 40
# A task's folder in the run (`<workdir>/runs/<run>/<task>/`, RUNS_DIR) holds its log and, for a training job, the
# workers' logs paddle.distributed.launch writes (`paddle-mlops logs` reads both).
RUNS_DIR = "runs"
STEP_LOG = "step.log"
WORKER_LOG_DIR = "paddle-log"
WORKER_LOG_GLOB = "workerlog.*"


class ProcessTaskHandler:
    """Runs a run's tasks as processes on this machine, each in its folder under `run_dir`."""

    def __init__(
        self, cfg: PipelineConfig, workdir: Path, run_dir: Path, console: Console, library_warnings: bool = False
    ):
        self.cfg = cfg
        self.workdir = workdir
        self.run_dir = run_dir
        self.console = console
        self.library_warnings = library_warnings

    def tracking_uri(self) -> str:
        return tracking_uri(self.cfg.mlflow.tracking_uri, self.workdir)

    def env(self, scope: Scope) -> dict[str, str]:
        """The environment every step of the run gets: the run's name and commit, the local state's home."""
        env = dict(os.environ)
        env.update(
            {
                HOME_ENV: str(self.workdir),
                RUN_ENV: scope.workflow_name,
                "GIT_SHA": scope.parameters["git-sha"],
                "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p),
            }
        )
        env.setdefault(TRACKING_URI_ENV, self.tracking_uri())
        return noise.showing(env) if self.library_warnings else env

    def task_dir(self, task: Task, prefix: str = "") -> Path:
        """A task's folder in the run: its log, outputs and workers' logs (a branch's tasks under the branch)."""
        return self.run_dir / f"{prefix}{task.name}"

    def command_for(self, task: Task, scope: Scope, prefix: str = "") -> list[str]:
        """The task's command with its parameters rendered in `scope` and its output paths in its folder."""
        inputs = task_inputs(task, scope)
        job = job_command(task)
        raw = container_command(task) if job is None else job
        cmd = [self._localise(scope.render(part, inputs), task, prefix) for part in raw]
        if cmd and cmd[0] in ("python", "python3"):
            cmd[0] = sys.executable
        if job is not None:  # the training job itself, here as processes: its run is the step's
            cmd = local_launch(cmd, self.cfg.training, self.task_dir(task, prefix) / WORKER_LOG_DIR)
        return cmd

    def run(self, task: Task, scope: Scope, prefix: str = "") -> TaskResult:
        """Run the task to its end (or deadline): Succeeded with its outputs, Reused, or Failed with its log tail."""
        cmd = self.command_for(task, scope, prefix)
        log_path = self.task_dir(task, prefix) / STEP_LOG
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._outputs_dir(task, prefix).mkdir(parents=True, exist_ok=True)
        name = f"{prefix}{task.name}"
        self.console.print(f"[bold cyan]▶ {name}[/]  [dim]{' '.join(cmd)}[/]", highlight=False)
        started = time.monotonic()
        with open(log_path, "w", encoding="utf-8") as log:
            code, tail = self._stream(cmd, scope, name, log, task.template.get("activeDeadlineSeconds"))
        seconds = time.monotonic() - started
        result = TaskResult(name, "Succeeded" if code == 0 else "Failed", seconds, code, log=str(log_path))
        if code == 0:
            result.outputs = self._read_outputs(task, prefix)
            if not task.name.endswith(CACHE_LOOKUP_SUFFIX):  # a lookup's report is about the task it looks up
                self.note_reuse(result, result.outputs)
        else:
            result.reason = "\n".join([*tail, *self._worker_log_tails(task, prefix)])
        return result

    def note_reuse(self, result: TaskResult, outputs: dict[str, str]) -> bool:
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

    def _stream(
        self, cmd: list[str], scope: Scope, name: str, log: IO[str], deadline: int | str | None
    ) -> tuple[int, collections.deque[str]]:
        """Run `cmd`, writing its output to `log` and the console; its exit code and its last lines. `deadline`:
        the template's activeDeadlineSeconds, past which the process is killed."""
        tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        started = time.monotonic()
        with subprocess.Popen(
            cmd,
            cwd=PROJECT_ROOT,
            env=self.env(scope),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            bufsize=1,
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.rstrip("\n")
                log.write(line + "\n")
                tail.append(line)
                if self.library_warnings or library_of(line) is None:  # library chatter: step.log only
                    self.console.out(f"[{name}] {line}", highlight=False)
                if deadline and time.monotonic() - started > float(deadline):
                    proc.kill()
                    tail.append(f"killed: step ran past its deadline of {deadline}s")
                    break
            return proc.wait(), tail

    def _outputs_dir(self, task: Task, prefix: str) -> Path:
        return self.task_dir(task, prefix) / "outputs"

    def _localise(self, arg: str, task: Task, prefix: str) -> str:
        if arg == CONTAINER_OUTPUTS or arg.startswith(CONTAINER_OUTPUTS + "/"):
            return str(self._outputs_dir(task, prefix)) + arg[len(CONTAINER_OUTPUTS) :]
        return arg

    def _read_outputs(self, task: Task, prefix: str) -> dict[str, str]:
        outputs = {}
        for name, path in task.output_paths.items():
            local = Path(self._localise(path, task, prefix))
            if local.is_file():
                outputs[name] = local.read_text(encoding="utf-8").strip()
        return outputs

    def _worker_log_tails(self, task: Task, prefix: str) -> list[str]:
        """paddle.distributed.launch keeps other ranks' output in workerlog.N files."""
        lines: list[str] = []
        for worker_log in sorted((self.task_dir(task, prefix) / WORKER_LOG_DIR).glob(WORKER_LOG_GLOB)):
            content = worker_log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
            lines += [f"--- {worker_log.name} ---", *content]
        return lines
