"""The one step runner (steps/runtime/runner.py): every step is a `Step`, declared outputs match the DAG's,
errors map to exit codes once, and library noise stays out of step logs."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddle_mlops_core.config import load_config
from paddle_mlops_core.contracts import EXIT_FAILED, EXIT_OK, EXIT_ROLLED_BACK, EXIT_USER_ERROR, OUTPUTS_FLAG
from pipelines import rollout_template, train_deploy
from pipelines.train_step import placed_manifest
from steps.runtime import noise, runner
from steps.runtime.runner import Finished, Output, Step, StepError, StepFailed

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "pipeline.yaml")
STEP_MODULES = sorted(p.stem for p in (ROOT / "steps").glob("*.py") if p.stem != "__init__")


def _container_templates() -> dict[str, dict]:
    cfg = load_config(CONFIG, "local")
    found = {}
    for wt in (train_deploy.build(cfg), rollout_template.build(cfg)):
        for template in wt.to_dict()["spec"]["templates"]:
            command = template.get("container", {}).get("command", [])
            if command[:2] == ["python", "-m"] and command[2].startswith("steps."):
                found[command[2].removeprefix("steps.")] = template
    return found


@pytest.mark.parametrize("module", STEP_MODULES)
def test_every_step_module_is_a_step_run_by_the_runner(module: str) -> None:
    step = importlib.import_module(f"steps.{module}")
    assert isinstance(step.STEP, Step) and step.main == step.STEP.main
    assert step.STEP.name.replace("-", "_") == module


def test_step_outputs_are_the_outputs_the_dag_reads() -> None:
    """A template's output parameter is read from /tmp/outputs/<name>; the step must write that name there."""
    templates = _container_templates()
    assert templates, "no step templates found"
    for module, template in templates.items():
        step = importlib.import_module(f"steps.{module}").STEP
        declared = {p["name"]: p["valueFrom"]["path"] for p in template.get("outputs", {}).get("parameters", [])}
        outputs = step.declared_outputs()
        assert {out.name for out in outputs} == set(declared), module
        args = template["container"]["args"]
        if outputs:
            written_to = args[args.index(OUTPUTS_FLAG) + 1]
            assert all(declared[out.name] == f"{written_to}/{out.name}" for out in outputs), module
        # A cacheable step is given the cache root and what to rerun by every template that runs it.
        assert step.cacheable == ("--step-cache" in args and "--rerun" in args), module


def _step(run, outputs=()) -> Step:  # noqa: ANN001
    return Step("probe", "A probe step.", run, outputs=tuple(Output(name, "a probe output") for name in outputs))


def _argv(tmp_path: Path, *extra: str) -> list[str]:
    return ["--config", CONFIG, "--env", "local", *extra]


def test_outputs_are_written_by_name_in_the_outputs_dir(tmp_path: Path) -> None:
    step = _step(lambda cfg, args: {"answer": f"{cfg.serving.model_name}"}, ["answer", "unset"])
    assert step.main(_argv(tmp_path, OUTPUTS_FLAG, str(tmp_path / "out"))) == EXIT_OK
    assert (tmp_path / "out" / "answer").read_text(encoding="utf-8") == load_config(CONFIG, "local").serving.model_name
    assert not (tmp_path / "out" / "unset").exists()


def test_a_finished_result_sets_the_exit_code_after_writing_outputs(tmp_path: Path) -> None:
    step = _step(lambda cfg, args: Finished({"outcome": "rolled-back"}, EXIT_ROLLED_BACK), ["outcome"])
    assert step.main(_argv(tmp_path, OUTPUTS_FLAG, str(tmp_path))) == EXIT_ROLLED_BACK
    assert (tmp_path / "outcome").read_text(encoding="utf-8") == "rolled-back"


@pytest.mark.parametrize(
    ("error", "code", "prefix"),
    [(StepError("bad data"), EXIT_USER_ERROR, "[probe] error: bad data"),
     (StepFailed("server down"), EXIT_FAILED, "[probe] failed: server down")],
)  # fmt: skip
def test_errors_become_one_line_and_their_exit_code(tmp_path: Path, capsys, error, code, prefix) -> None:  # noqa: ANN001
    def run(cfg, args):  # noqa: ANN001, ANN202
        raise error

    assert _step(run, ["x"]).main(_argv(tmp_path, OUTPUTS_FLAG, str(tmp_path))) == code
    assert capsys.readouterr().err.strip() == prefix
    assert not (tmp_path / "x").exists(), "a failed step writes no outputs"


def test_a_bad_configuration_is_a_user_error(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    step = _step(lambda cfg, args: None)
    assert step.main(["--config", CONFIG, "--overrides", '["training.epochs=-1"]']) == EXIT_USER_ERROR
    assert capsys.readouterr().err.startswith("[probe] configuration error: ")


def test_an_undeclared_output_is_a_programming_error(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="does not declare: surprise"):
        _step(lambda cfg, args: {"surprise": "1"}).main(_argv(tmp_path))


def test_env_defaults_apply_only_when_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROBE_SET", "mine")
    monkeypatch.delenv("PROBE_UNSET", raising=False)
    seen = {}
    step = Step(
        "probe",
        "A probe.",
        lambda cfg, args: seen.update(os.environ),
        env_defaults={"PROBE_SET": "d", "PROBE_UNSET": "d"},
    )
    step.main(_argv(tmp_path))
    assert seen["PROBE_SET"] == "mine" and seen["PROBE_UNSET"] == "d"


def _import_paddle(extra_env: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", noise.SHOW_ENV, "GLOG_minloglevel")}
    result = subprocess.run(
        [sys.executable, "-c", "import steps, paddle"], cwd=ROOT, env={**env, **extra_env},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stderr


def test_library_noise_is_filtered_and_a_flag_shows_it() -> None:
    assert "No ccache found" in _import_paddle({noise.SHOW_ENV: "1"}), "the probe no longer sees Paddle's warning"
    assert "No ccache found" not in _import_paddle({})


def test_worker_processes_inherit_the_filter() -> None:
    import steps  # noqa: F401  (installs the filter in this process)

    if noise.shown():
        pytest.skip(f"{noise.SHOW_ENV} is set")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", "import paddle"], env=env, capture_output=True, text=True, timeout=300
    )  # a worker `paddle.distributed.launch` starts: nothing of ours imported, only the environment inherited
    assert result.returncode == 0 and "No ccache found" not in result.stderr, result.stderr


def test_a_renamed_output_in_the_results_fails_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(train_deploy.RESULTS, "metrics", ("evaluate", "metrics-json"))
    with pytest.raises(KeyError, match="metrics-json"):
        train_deploy.build(load_config(CONFIG, "local"))


def test_the_runner_is_the_only_launcher() -> None:
    """No step parses arguments or maps errors itself any more."""
    for module in STEP_MODULES:
        source = (ROOT / "steps" / f"{module}.py").read_text(encoding="utf-8")
        for launcher in ("ArgumentParser(", "def _parse_args", "run_step(", "write_output("):
            assert launcher not in source, f"steps/{module}.py: {launcher}"
    assert not hasattr(runner, "run_step")


def test_showing_removes_only_our_filters() -> None:
    env = {"PYTHONWARNINGS": "error::ResourceWarning,ignore:No ccache found:UserWarning", "GLOG_minloglevel": "2"}
    shown = noise.showing(env)
    assert shown[noise.SHOW_ENV] == "1" and shown["PYTHONWARNINGS"] == "error::ResourceWarning"
    assert noise.showing({"PYTHONWARNINGS": "ignore:No ccache found:UserWarning"}).get("PYTHONWARNINGS") is None


def test_paddle_mlops_run_library_warnings_reaches_the_steps(tmp_path: Path) -> None:
    from rich.console import Console

    from paddle_mlops.local.executor import LocalExecutor, RunOptions

    cfg = load_config(CONFIG, "local")
    doc = train_deploy.build(cfg).to_dict()
    for flag in (False, True):
        opts = RunOptions(Path(CONFIG), "local", [], tmp_path, library_warnings=flag)
        executor = LocalExecutor(cfg, doc, opts, Console(quiet=True))
        env = executor.handler.env(executor.scope)
        assert (env.get(noise.SHOW_ENV) == "1") is flag


def test_cluster_pods_are_quiet_from_the_start() -> None:
    """Every step container and the training job's nodes (TrainJob trainer env, PaddleJob workers) get the
    filter in their environment: the launcher (`python -m paddle.distributed.launch`) imports Paddle before
    any step module could filter."""
    from paddle_mlops_core.contracts import QUIET_LIBRARIES_ENV
    from pipelines import image_rollout, rollout_template

    cfg = load_config(CONFIG, "prod")
    doc = train_deploy.build(cfg).to_dict()
    templates = [
        t for m in (train_deploy, rollout_template, image_rollout) for t in m.build(cfg).to_dict()["spec"]["templates"]
    ]
    containers = [t["container"] for t in templates if "container" in t]
    job = next(placed_manifest(t) for t in doc["spec"]["templates"] if t["name"] == "train")
    assert job is not None
    containers.append(job["spec"]["trainer"])  # the TrainJob's node container env
    legacy = train_deploy.build(load_config(CONFIG, "prod", ["training.backend=kubeflow-paddlejob"])).to_dict()
    legacy_job = next(placed_manifest(t) for t in legacy["spec"]["templates"] if t["name"] == "train")
    assert legacy_job is not None
    replicas = legacy_job["spec"]["paddleReplicaSpecs"].values()
    containers += [c for replica in replicas for c in replica["template"]["spec"]["containers"]]
    assert len(containers) > 10
    for container in containers:
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        assert {k: env.get(k) for k in QUIET_LIBRARIES_ENV} == QUIET_LIBRARIES_ENV, container.get("name")


def test_a_run_time_override_of_the_placement_is_refused_naming_the_compile_time_way() -> None:
    """data.region and training.placement.* are compiled into the TrainJob's node affinity and the Kueue objects;
    as a run's `overrides` parameter they would reach train.py and nothing else (issue 31 item 4)."""
    import argparse
    import json

    import pytest

    from paddle_mlops_core.config import ConfigError
    from steps.runtime.runner import config_from_args

    def args(overrides: list[str]) -> argparse.Namespace:
        return argparse.Namespace(config=None, env=None, task=None, overrides=json.dumps(overrides))

    for item in ("data.region=cn-east", "data.movable=false", "training.placement.exclude_regions=[cn-north]"):
        with pytest.raises(ConfigError) as caught:
            config_from_args(args(["training.epochs=1", item]))
        message = str(caught.value)
        assert item in message and "paddle-mlops compile --set" in message and "kubectl apply -k argo/" in message
    with pytest.raises(ConfigError, match=r"-p priority=NAME"):
        config_from_args(args(["training.placement.priority=urgent"]))
    # Every other key is still a run-time override.
    assert config_from_args(args(["training.epochs=1", "training.learning_rate=0.001"])).training.epochs == 1
