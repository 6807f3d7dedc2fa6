"""The training job on this machine: the cluster job's node command re-targeted at local processes.

On the cluster the train task creates a TrainJob (or a legacy PaddleJob) whose nodes each run
`paddle.distributed.launch`; locally that same node command runs once, as one node with `training.nproc`
processes (or the parameter servers and trainers of a PS job), its workers' logs under the task's folder.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from paddle_mlops_core.config.training import TrainingConfig

# The checkout the steps run from (their working directory and PYTHONPATH).
PROJECT_ROOT = Path(__file__).resolve().parents[2]
PS_PYTHON_ENV = "PADDLE_MLOPS_PS_PYTHON"


def ps_python() -> str:
    """The interpreter for parameter-server jobs: PADDLE_MLOPS_PS_PYTHON, else the checkout's
    `.venv-ps` (`make ps-env`: paddlepaddle 3.0.0, the last CPU wheel built WITH_PSCORE), else this one."""
    chosen = os.environ.get(PS_PYTHON_ENV)
    if chosen:
        return chosen
    candidate = PROJECT_ROOT / ".venv-ps" / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def local_launch(cmd: list[str], training: TrainingConfig, log_dir: Path) -> list[str]:
    """The training job's node command (TrainJob or PaddleJob), re-targeted at this machine's
    processes: one node, `training.nproc` processes, logs in `log_dir`."""
    out = _one_node(cmd)
    for i, part in enumerate(out):
        if part == "--nproc_per_node" and i + 1 < len(out):
            out[i + 1] = str(training.nproc)
        elif part == "--log_dir" and i + 1 < len(out):
            out[i + 1] = str(log_dir)
        elif part.endswith(".py") and not Path(part).is_absolute():
            out[i] = str(PROJECT_ROOT / part)
    if training.topology == "ps" or training.job.ps_replicas > 0:
        # Parameter-server mode: the launcher starts the servers and trainers on this machine.
        at = out.index("--nproc_per_node")
        servers = str(max(1, training.job.ps_replicas))
        out[at : at + 2] = ["--server_num", servers, "--trainer_num", str(training.nproc)]
        if "--run_mode" not in out:
            out[at:at] = ["--run_mode", "ps"]
        out[0] = ps_python()
    return out


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
