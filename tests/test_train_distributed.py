"""Data-parallel training under paddle.distributed.launch: equivalence with one process, and the parameter-server
mode. A worker killed mid-run and resuming from its checkpoints: tests/test_train_interruptions.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_ernie import common, train_args
from test_train import assert_same_params, launch_command, launch_env, write_workspace

from steps import train

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

# 128 training texts, 2 processes × 8 = 16 per step: 8 steps per epoch, all batches full.
EPOCHS = 5
TOTAL_STEPS = EPOCHS * 128 // 16
RUN = ["model.dropout=0", f"training.epochs={EPOCHS}", "training.learning_rate=0.005", "training.nproc=2"]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dist")


@pytest.fixture(scope="module")
def env(base: Path) -> dict[str, str]:
    return launch_env(base)


def launch(ws: Path, log_dir: Path, env: dict[str, str], *overrides: str, dump: Path | None = None) -> subprocess.Popen:
    cmd = launch_command(ws, log_dir, *RUN, *overrides)
    if dump:
        cmd += ["--dump-params", str(dump)]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, log_dir: Path, timeout: float = 240) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    logs = "".join(p.read_text(errors="replace") for p in sorted(log_dir.glob("workerlog.*")))
    return proc.returncode, out + logs


@pytest.fixture(scope="module")
def reference(base: Path, env: dict[str, str]) -> tuple[dict, Path]:
    """An uninterrupted 2-process run: per-process batch 8, final parameters dumped."""
    ws = write_workspace(base / "reference")
    dump = base / "reference.npz"
    code, logs = finish(
        launch(ws, base / "reference-log", env, "training.batch_size=8", dump=dump), base / "reference-log"
    )
    assert code == 0, logs[-4000:]
    training = json.loads((ws / "model" / "training.json").read_text())
    assert (training["world_size"], training["global_steps"], training["resumed_from_step"]) == (2, TOTAL_STEPS, 0)
    return training, dump


def test_two_processes_match_one_process_with_double_batch(
    reference: tuple[dict, Path], env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", env["MLFLOW_TRACKING_URI"])  # already created: no migrations
    ws = write_workspace(tmp_path / "single")
    dump = tmp_path / "single.npz"
    assert train.main(train_args(ws, dump, *RUN, "training.nproc=1", "training.batch_size=16")) == 0
    training = json.loads((ws / "model" / "training.json").read_text())
    assert (training["world_size"], training["global_steps"]) == (1, TOTAL_STEPS)
    assert_same_params(reference[1], dump)


def ps_available() -> bool:
    from steps.runtime.training import ps

    return ps.available()


def ps_python() -> str | None:
    """An interpreter whose paddlepaddle has the parameter server, or None.

    The one local runs launch PS jobs with (`job_launch.ps_python()`: PADDLE_MLOPS_PS_PYTHON, else
    the checkout's `.venv-ps`, which `make test` builds with paddlepaddle 3.0.0, the last CPU wheel
    with WITH_PSCORE; else this interpreter), checked for the parameter server.
    """
    from paddle_mlops.local.job_launch import ps_python as local_ps_python

    candidate = local_ps_python()
    if candidate == sys.executable:
        return candidate if ps_available() else None
    if not Path(candidate).exists():
        return None
    probe = subprocess.run(
        [candidate, "-W", "ignore", "-c", "from steps.runtime.training import ps; print(ps.available())"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    return candidate if probe.stdout.strip().endswith("True") else None


@pytest.mark.skipif(ps_available(), reason="this paddlepaddle build has the parameter server")
def test_ps_topology_on_a_build_without_the_parameter_server_is_a_user_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = write_workspace(tmp_path / "ws", n_train=32, n_dev=8, n_test=8)
    assert train.main([*common("training.topology=ps"), "--workspace", str(ws)]) == 2
    err = capsys.readouterr().err
    assert "WITH_PSCORE" in err and "training.topology=collective" in err and "Traceback" not in err


def test_parameter_server_training_lowers_the_loss(env: dict[str, str], tmp_path: Path) -> None:
    python = ps_python()
    if python is None:
        message = (
            "no paddlepaddle with the parameter server: run `make ps-env` (make test does) or set "
            "PADDLE_MLOPS_PS_PYTHON"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    ws = write_workspace(tmp_path / "ws")
    # 1 server, 2 trainers: the launcher starts all three and sets their roles and endpoints.
    cmd = [
        python,
        "-m",
        "paddle.distributed.launch",
        "--run_mode",
        "ps",
        "--server_num",
        "1",
        "--trainer_num",
        "2",
        "--log_dir",
        str(tmp_path / "log"),
        str(ROOT / "steps" / "train.py"),
        *common("training.topology=ps", "training.epochs=30", "training.learning_rate=0.05"),
        "--workspace",
        str(ws),
    ]
    # cwd outside the checkout: fleet's gloo rendezvous server writes http.log into it
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    code, logs = finish(proc, tmp_path / "log")
    assert code == 0, logs[-4000:]
    summary = json.loads((ws / "model" / "ps_training.json").read_text())
    assert summary["trainers"] == 2 and summary["steps"] > 0
    assert summary["last_loss"] < summary["first_loss"], summary
