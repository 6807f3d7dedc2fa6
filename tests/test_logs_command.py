"""`paddle-mlops logs RUN [STEP]` reads a finished run's logs: a local run's from its folders, a cluster run's from
where Argo's executor archived them and where the training nodes copied their workers' logs (S3, moto's server)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from paddle_mlops import logs
from paddle_mlops.local.executor import LocalExecutor, RunOptions
from paddle_mlops_core.config import load_config
from paddle_mlops_core.contracts import EXIT_TERMINATED, EXIT_USAGE, LAUNCH_CONTROL_ENV, RUN_URI_FILE
from steps.runtime.storage import s3
from steps.runtime.training import launch, worker_logs
from tests.s3server import moto_s3_server
from tests.test_log_archive import archived_log_key, pod_name, resolve


def _step(name: str, line: str) -> dict:
    return {"name": name, "container": {"image": "x:1", "command": ["python", "-c"], "args": [f"print({line!r})"]}}


TRAIN_TASK = {"name": "train", "template": "train", "depends": "prepare-data"}


def _tiny_run(tmp_path: Path, project_root: Path) -> str:
    doc = {
        "metadata": {"name": "tiny"},
        "spec": {
            "entrypoint": "main",
            "arguments": {"parameters": [{"name": "workspace", "value": "x"}]},
            "templates": [
                {"name": "main", "dag": {"tasks": [{"name": "prepare-data", "template": "prepare-data"}, TRAIN_TASK]}},
                _step("prepare-data", "prepared 40 examples"),
                _step("train", "epoch 1 done"),
            ],
        },
    }
    cfg = load_config(project_root / "configs/pipeline.yaml", "local")
    opts = RunOptions(project_root / "configs/pipeline.yaml", "local", [], workdir=tmp_path, git_sha="abc")
    executor = LocalExecutor(cfg, doc, opts, Console(file=open(tmp_path / "console.txt", "w"), width=200))
    code, _ = executor.run()
    assert code == 0
    # the workers' logs paddle.distributed.launch leaves beside a training step's log
    (executor.run_dir / "train" / "paddle-log").mkdir()
    (executor.run_dir / "train" / "paddle-log" / "workerlog.1").write_text("rank 1 says hello\n")
    return executor.scope.workflow_name


def test_logs_reads_a_finished_local_run(tmp_path: Path, project_root: Path, capsys: pytest.CaptureFixture) -> None:
    run = _tiny_run(tmp_path, project_root)
    capsys.readouterr()
    assert logs.main([run, "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.index("prepared 40 examples") < out.index("epoch 1 done") < out.index("rank 1 says hello")
    assert "==> prepare-data:" in out
    assert logs.main(["last", "train", "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "epoch 1 done" in out and "rank 1 says hello" in out and "prepared" not in out
    assert logs.main([run, "--list", "--workdir", str(tmp_path)]) == 0
    listed = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [(step, Path(where).name) for step, _, where in listed] == [
        ("prepare-data", "step.log"), ("train", "step.log"), ("train", "workerlog.1"),
    ]  # fmt: skip
    assert logs.main([run, "evaluate", "--workdir", str(tmp_path)]) == EXIT_USAGE
    assert "its steps: prepare-data, train" in capsys.readouterr().err


@pytest.fixture
def s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with moto_s3_server() as endpoint:
        monkeypatch.setenv("S3_ENDPOINT_URL", endpoint)
        s3.client(endpoint).create_bucket(Bucket="paddle-mlops")
        yield endpoint


def test_logs_reads_a_stored_cluster_run(
    tmp_path: Path, s3_endpoint: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The objects are where argo's executor writes them (tests/test_log_archive.py models it from the generated
    repository) and where the real worker-log copy and training record put them."""
    workflow = "train-deploy-x7k2p"
    repository = resolve({"configMap": "artifact-repositories", "key": "paddle-mlops"}, "ml-pipelines")
    client = s3.client(s3_endpoint)
    for template, text in [("prepare-data", '{"msg": "prepared 40 examples"}\n'), ("train", "job admitted\n")]:
        key = archived_log_key(repository, workflow, pod_name(workflow, template, f"{workflow}.{template}"))
        client.put_object(Bucket=repository["s3"]["bucket"], Key=key, Body=text.encode())
        time.sleep(1.1)  # LastModified has second resolution: the order they ran in
    run_uri = "s3://paddle-mlops/runs/train/sentiment/r-0123456789abcdef0123"
    worker_logs.record_run(f"s3://paddle-mlops/runs/{workflow}", "r-0123456789abcdef0123", run_uri, s3_endpoint)
    log_dir = tmp_path / "paddle-log"
    log_dir.mkdir()
    (log_dir / "workerlog.0").write_text("rank 0 step 10 loss 0.3\n")
    control = tmp_path / "control"
    control.mkdir()
    (control / RUN_URI_FILE).write_text(run_uri)
    assert worker_logs.LogArchiver(log_dir, control, "1").upload()

    monkeypatch.chdir(tmp_path)  # no local run of that name
    assert logs.main([workflow, "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.index("prepared 40 examples") < out.index("job admitted") < out.index("rank 0 step 10")
    assert f"{run_uri}/logs/node-1/workerlog.0" in out
    assert logs.main([workflow, "prepare-data", "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "prepared 40 examples" in out and "job admitted" not in out
    assert logs.main(["train-deploy-nope1", "--workdir", str(tmp_path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "s3://paddle-mlops/runs/train-deploy-nope1/logs/" in err and workflow in err


def test_a_training_node_archives_its_worker_logs_even_when_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """launch.Supervisor copies `--log_dir` into the announced run's folder after a SIGTERM, in bounded time."""
    run_uri = tmp_path / "store" / "train" / "sentiment" / "r-1"
    log_dir = tmp_path / "paddle-log"
    worker = (
        "import os, sys, time, pathlib; sys.path.insert(0, os.getcwd());"
        "from steps.runtime.training import worker_logs;"
        f"pathlib.Path({str(log_dir)!r}).mkdir(exist_ok=True);"
        f"pathlib.Path({str(log_dir)!r}, 'workerlog.0').write_text('step 1\\n');"
        f"worker_logs.announce({str(run_uri)!r}); time.sleep(60)"
    )
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    supervisor = launch.Supervisor([sys.executable, "-c", worker], None, log_dir, "0")
    previous = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        timer.start()
        started = time.monotonic()
        code = supervisor.run()
        elapsed = time.monotonic() - started
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, previous)
    assert code == EXIT_TERMINATED
    assert elapsed < 3.0 + worker_logs.FINAL_UPLOAD_AFTER_STOP_SECONDS + 2
    assert (run_uri / "logs" / "node-0" / "workerlog.0").read_text() == "step 1\n"
    assert LAUNCH_CONTROL_ENV not in os.environ
