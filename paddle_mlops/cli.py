"""`paddle-mlops`: run the pipeline locally, compile it for Argo, browse and serve the results.

Each command imports what only it needs inside its function: the DAGs (`pipelines/`: hera), the store's
notification (boto3), the cluster checks (kubernetes) and MLflow take 2-5 s each to import, which `--help`,
`config` and every other command would otherwise pay.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from paddle_mlops import batch
from paddle_mlops.command_line import add_config_args, exit_status
from paddle_mlops.local.dag import DagError
from paddle_mlops.local.executor import FollowOn, LocalExecutor, RunOptions
from paddle_mlops_core.config import ConfigError, load_config
from paddle_mlops_core.config.loader import default_config_path
from paddle_mlops_core.config.pretrained_names import PROJECT_NAMES
from paddle_mlops_core.config.task_rules import missing_data
from paddle_mlops_core.config.tasks import DEFAULT_TASK
from paddle_mlops_core.contracts import DEFAULT_HOME, EXIT_USAGE, mlflow_ui_url

DEFAULT_WORKDIR = Path(DEFAULT_HOME)


def _workdir_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workdir",
        type=Path,
        default=DEFAULT_WORKDIR,
        help="local state: runs, MLflow DB, store (default .paddle-mlops/)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="paddle-mlops",
        description=(
            "Take a PaddlePaddle (ERNIE) model from git push to a served, monitored inference service. "
            "`run` executes the train-deploy DAG on this machine; `compile` writes the same DAG as Argo YAML."
        ),
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run(sub)
    _add_manifest_commands(sub)
    _add_local_services(sub)
    _add_preflight(sub)
    for name, (_, summary) in DELEGATED.items():
        # Parsed by the module's own parser (see main); listed here for `paddle-mlops --help`.
        sub.add_parser(name, help=summary, add_help=False)
    return parser


def _add_run(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser(
        "run",
        help="run the whole train-deploy DAG locally (embedded MLflow, object store and model server)",
        description=(
            "Run the train-deploy DAG as local processes: build-image (skipped locally), prepare-data, train "
            "(paddle.distributed.launch with training.nproc CPU processes), evaluate (gate), upload; then the "
            "published model's notification starts the rollout workflow: validate, register, rollout (a model "
            "server on 127.0.0.1). --task NAME picks the task (configs/tasks/NAME.yaml); several --task run the "
            "finetune-batch DAG, one branch per task (--set NAME:a.b=c sets one task's key). Writes a summary to "
            "WORKDIR/last-run.json."
        ),
    )
    add_config_args(run, "local", several_tasks=True)
    _workdir_arg(run)
    group = run.add_mutually_exclusive_group()
    group.add_argument("--only", metavar="STEP", help="run only this step, reusing earlier outputs of the last run")
    group.add_argument(
        "--from", dest="start_from", metavar="STEP", help="rerun from this step on, reusing earlier ones"
    )
    run.add_argument(
        "--no-cache",
        action="store_true",
        help="compute every step, reusing nothing from the step cache (the results are still recorded in it)",
    )
    run.add_argument(
        "--rerun",
        action="append",
        default=[],
        metavar="STEP",
        help="compute STEP even when the step cache holds its outputs (repeatable); docs/caching.md",
    )
    run.add_argument("--git-sha", default=None, help="commit recorded on the run (default: git rev-parse HEAD)")
    run.add_argument(
        "--library-warnings",
        action="store_true",
        help="show the libraries' own warnings and glog lines in step logs (filtered by default)",
    )


def _add_manifest_commands(sub: argparse._SubParsersAction) -> None:
    """`compile` and `config`: what the configuration renders to, written or printed."""
    comp = sub.add_parser(
        "compile",
        help="write the Argo manifests to argo/ (or check them with --check)",
        description="Generate argo/*.yaml from pipelines/. With --check, regenerate in memory and exit 1 on drift.",
    )
    comp.add_argument("--check", action="store_true", help="do not write; exit 1 with a diff if argo/ is stale")
    comp.add_argument("--out", type=Path, default=Path("argo"), help="output directory (default argo/)")
    add_config_args(comp)
    cfg = sub.add_parser(
        "config",
        help="print the merged, validated configuration",
        description="Merge base -> env overlay -> --set overrides, validate, and print the result as JSON.",
    )
    add_config_args(cfg)


def _add_local_services(sub: argparse._SubParsersAction) -> None:
    """`ui` and `serve`: the MLflow UI and the model server of local runs."""
    ui = sub.add_parser(
        "ui",
        help="open the MLflow UI on the local store (127.0.0.1)",
        description="Start `mlflow ui` on WORKDIR/mlflow.db, bound to 127.0.0.1.",
    )
    _workdir_arg(ui)
    ui.add_argument("--port", type=int, default=5000, help="port (default 5000)")
    serve = sub.add_parser(
        "serve",
        help="manage the local model server (status, stop)",
        description="Show or stop the model server that the local rollout started.",
    )
    serve.add_argument(
        "action", choices=["status", "stop"], help="status: print each server's URL and version; stop: stop them"
    )
    serve.add_argument("--task", default=None, metavar="NAME", help="only the server of this task (default: all)")
    _workdir_arg(serve)


def _add_preflight(sub: argparse._SubParsersAction) -> None:
    pre = sub.add_parser(
        "preflight",
        help=(
            "check a live cluster is ready for the install set (versions, CRDs, namespaces, secrets); exit 1 on "
            "findings"
        ),
        description=(
            "Read the cluster through the Kubernetes API and report one line per check, with a fix for each finding: "
            "Kubernetes and controller versions against the supported matrix, the CRDs the install set uses, namespace "
            "Pod Security labels, the Argo executor securityContext, Knative's feature flags for the predictors, the "
            "Secrets it references (names only) and the EventBus version. Exit 0 when ready, 1 with findings, 2 on "
            "bad usage or an unreachable cluster."
        ),
    )
    pre.add_argument("--context", default=None, help="kubeconfig context (default: the current context)")
    pre.add_argument(
        "--kubeconfig", default=None, metavar="PATH", help="kubeconfig file (default: KUBECONFIG or ~/.kube/config)"
    )
    pre.add_argument("--json", dest="as_json", action="store_true", help="print the results as JSON")
    add_config_args(pre)


def _cmd_run(args: argparse.Namespace, console: Console) -> int:
    from paddle_mlops.local import notify
    from pipelines import finetune_batch, rollout_template, train_deploy

    config_path = args.config or default_config_path()
    tasks = args.tasks or [None]
    if len(tasks) > 1:  # several tasks: the finetune-batch DAG, one branch per task
        items = batch.batch_items(tasks, args.overrides, config_path, args.env)
        cfg = load_config(config_path, args.env, [o for o in args.overrides if ":" not in o.split("=", 1)[0]])
        doc = finetune_batch.build(cfg).to_dict()
        params, overrides, results = {"tasks": batch.as_parameter(items)}, [], {}
    else:
        overrides = batch.task_overrides([tasks[0] or DEFAULT_TASK], args.overrides)[tasks[0] or DEFAULT_TASK]
        cfg = load_config(config_path, args.env, overrides, task=tasks[0])
        problem = missing_data(cfg)
        if problem:
            raise ConfigError(problem)
        doc = train_deploy.build(cfg).to_dict()
        params, results = {}, {**rollout_template.RESULTS, **train_deploy.RESULTS}  # training run and upload first
        if not (args.only or args.start_from):
            _pretrain_once(cfg, config_path, args, overrides, console)
    # The published model's notification starts the rollout workflow, as MinIO and Argo Events do on the cluster.
    follow = FollowOn(
        rollout_template.build(cfg).to_dict(), lambda outputs: notify.after_upload(cfg, outputs), {"redeploy": "true"}
    )
    opts = RunOptions(
        config_path=config_path,
        env=args.env,
        overrides=overrides,
        workdir=args.workdir,
        only=args.only,
        start_from=args.start_from,
        git_sha=args.git_sha,
        library_warnings=args.library_warnings,
        task=cfg.task,
        parameters=params,
        no_cache=args.no_cache,
        rerun=args.rerun,
        fresh_command=_fresh_run_command(args),
    )
    code, _ = LocalExecutor(cfg, doc, opts, console, results=results, follow=follow).run()
    return code


def _fresh_run_command(args: argparse.Namespace) -> str:
    """This `run` command without --only/--from: a new run of the configuration it names."""
    argv = ["paddle-mlops", "run"] + (["--config", str(args.config)] if args.config else [])
    argv += ["--env", args.env] if args.env and args.env != "local" else []
    argv += [part for task in args.tasks for part in ("--task", task)]
    argv += [part for item in args.overrides for part in ("--set", item)]
    return shlex.join(argv + (["--workdir", str(args.workdir)] if args.workdir != DEFAULT_WORKDIR else []))


def _pretrain_once(
    cfg: Any, config_path: Path, args: argparse.Namespace, overrides: list[str], console: Console
) -> None:
    """The project's own pretrained model (`model.pretrained: ernie-mini-corpus-zh`, the NER task's local default) is
    built and staged into this workdir's store before the first run that needs it, as `weights pretrain` does; later
    runs find it staged and reuse it. Production stages ERNIE 3.0 instead (configs/env/prod.yaml)."""
    from paddle_mlops import weights

    name = cfg.model.pretrained_name
    if name not in PROJECT_NAMES:
        return
    argv = ["pretrain", name, "--workdir", str(args.workdir), "--env", args.env, "--config", str(config_path),
            "--task", cfg.task]  # fmt: skip
    for item in overrides:
        argv += ["--set", item]
    console.print(f"{name}: pre-trained once per store (≈ 15 min on 2 CPU cores the first time; later runs reuse it)")
    if weights.main(argv) != 0:
        raise ConfigError(f"could not pre-train {name}; run `paddle-mlops weights pretrain {name}` to see why")


def _cmd_compile(args: argparse.Namespace, console: Console) -> int:
    from paddle_mlops import compile as compiler

    cfg = (
        load_config(args.config, args.env, args.overrides, task=args.task)
        if (args.config or args.env or args.overrides or args.task)
        else compiler.default_compile_config()
    )
    if args.check:
        problems = compiler.check(args.out, cfg)
        if problems:
            console.out("\n".join(problems), highlight=False)
            console.print(f"[red]{args.out}/ is stale.[/] Run `paddle-mlops compile` and commit the result.")
            return 1
        console.print(f"{args.out}/ is up to date.")
        return 0
    for path in compiler.write(args.out, cfg):
        console.print(f"wrote {path}")
    return 0


def _cmd_config(args: argparse.Namespace, console: Console) -> int:
    cfg = load_config(args.config, args.env, args.overrides, task=args.task)
    console.out(json.dumps(cfg.model_dump(mode="json", by_alias=True), indent=2, ensure_ascii=False), highlight=False)
    return 0


def _experiments(uri: str) -> list[tuple[str, str]]:
    """(name, id) of the store's experiments that have runs, newest first."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.search_experiments(order_by=["creation_time DESC"])
    return [(e.name, e.experiment_id) for e in found if client.search_runs([e.experiment_id], max_results=1)]


def _cmd_ui(args: argparse.Namespace, console: Console) -> int:
    db = args.workdir.resolve() / "mlflow.db"
    if not db.is_file():
        console.print(f"[red]No MLflow store at {db}.[/] Run `paddle-mlops run` first (or pass --workdir).")
        return EXIT_USAGE
    uri = f"sqlite:///{db}"
    base = f"http://127.0.0.1:{args.port}"
    console.print(f"MLflow UI on {base} (store {uri}); Ctrl-C stops it.")
    for name, experiment_id in _experiments(uri):
        console.print(f"  {name}: {mlflow_ui_url(base, experiment_id)}", highlight=False, soft_wrap=True)
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", "127.0.0.1"]
    cmd += ["--port", str(args.port)]
    try:
        return subprocess.call(cmd, env={**os.environ, "MLFLOW_TRACKING_URI": uri})
    except KeyboardInterrupt:
        return 0


def _served_model(task: str) -> str:
    """The name the task's model is served under (`serving.model_name`, which a loaded configuration always sets)."""
    name = load_config(None, "local", task=task).serving.model_name
    assert name is not None  # task_rules.fill_defaults sets it (ernie-<task>) when the files leave it out
    return name


def _cmd_serve(args: argparse.Namespace, console: Console) -> int:
    from steps.runtime.serving.local_server import read_current, served_models, stop_local_server

    home = args.workdir.resolve()
    models = [_served_model(args.task)] if args.task else served_models(home)
    if args.action == "status":
        records = {m: read_current(home, m) for m in models}
        records = {m: r for m, r in records.items() if r}
        if not records:
            console.print("No local model server is recorded.")
            return 1
        console.out(json.dumps(records, indent=2, ensure_ascii=False), highlight=False)
        return 0
    stopped = any([stop_local_server(home, m) for m in models])
    what = f"the local model server of task {args.task}" if args.task else "the local model servers"
    console.print(f"Stopped {what}." if stopped else "No local model server was running.")
    return 0


DELEGATED = {
    "lint": (
        "paddle_mlops.lint",
        "check the manifests' pods against the security and pinning policy (exit 1 on findings)",
    ),
    "submit": (
        "paddle_mlops.submit",
        "submit a Workflow from a WorkflowTemplate, saying where Kueue would admit its training (exit 3 when it "
        "never could); --dry-run prints it",
    ),
    "queue": (
        "paddle_mlops.queue",
        "show the Kueue training queues: quota, borrowing and lending per region, admitted and pending jobs",
    ),
    "report": ("paddle_mlops.report", "write an MLflow run's plots and an HTML summary to a local folder"),
    "logs": (
        "paddle_mlops.logs",
        "print a finished run's step logs: a local run's, or a cluster run's archived in the object store",
    ),
    "weights": (
        "paddle_mlops.weights",
        "stage pretrained ERNIE weights (a PaddleNLP name) into the object store once; list what is staged",
    ),
    "publish": (
        "paddle_mlops.publish",
        "publish an exported model directory; its notification validates and rolls it out",
    ),
    "pin-images": (
        "paddle_mlops.pin_images",
        "pin pushed release images by digest in the production overlay's images: (overlays/prod)",
    ),
}


def _cmd_preflight(args: argparse.Namespace, console: Console) -> int:
    from paddle_mlops import preflight

    cfg = load_config(args.config, args.env, args.overrides, task=args.task)
    return preflight.preflight(cfg, console, kubeconfig=args.kubeconfig, context=args.context, as_json=args.as_json)


USER_ERRORS = (
    (ConfigError, EXIT_USAGE, "configuration error: {exc}"),
    (DagError, EXIT_USAGE, "error: {exc}"),
)
COMMANDS = {
    "run": _cmd_run,
    "compile": _cmd_compile,
    "config": _cmd_config,
    "ui": _cmd_ui,
    "serve": _cmd_serve,
    "preflight": _cmd_preflight,
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        return int(importlib.import_module(DELEGATED[argv[0]][0]).main(argv[1:]))
    args = build_parser().parse_args(argv)
    console = Console(soft_wrap=True)
    return exit_status(lambda: COMMANDS[args.command](args, console), USER_ERRORS)


if __name__ == "__main__":
    sys.exit(main())
