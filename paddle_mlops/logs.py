"""`paddle-mlops logs RUN [STEP]`: the logs of a finished run, from this machine or from the object store.

A local run (`paddle-mlops run`) keeps each step's log in `WORKDIR/runs/RUN/<step>/step.log` and a training job's
worker logs beside it (`paddle-log/workerlog.N`). A cluster run's pods are gone once it succeeded, but Argo archived
each pod's log (`archiveLogs`, pipelines/platform/log_archive.py) at `<storage.workspace>/RUN/logs/<pod>/main.log`,
and the training workers' logs are beside the run's checkpoints (`<run>/logs/node-N/workerlog.M`), which the workflow
workspace's `training-run.json` points to. RUN is the local run's or the Argo workflow's name (`last`: the last local
run); STEP a step (template) name: only that step's logs, a train step's with its workers'. `--list` names the
steps and their files instead of printing them.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paddle_mlops.command_line import add_config_args, exit_status
from paddle_mlops.local.task_handler import RUNS_DIR, STEP_LOG, WORKER_LOG_DIR, WORKER_LOG_GLOB
from paddle_mlops_core.config import ConfigError, load_config
from paddle_mlops_core.contracts import (
    ARCHIVED_LOG_FILE,
    DEFAULT_HOME,
    EXIT_FAILED,
    EXIT_USAGE,
    TRAINING_RUN_RECORD,
    archived_logs_prefix,
)

LAST = "last"
TRAIN_STEP = "train"
SHOWN_RUNS = 10


class LogsError(Exception):
    """No such run or step; the message lists what exists."""


class StoreUnreachable(Exception):
    """The object store refused or could not be reached."""


@dataclass(frozen=True)
class LogFile:
    """One log of a step: where it came from and how to read it."""

    step: str
    where: str
    size: int
    read: Callable[[], bytes]


# --------------------------------------------------------------------------------------------- local runs


def local_run_dir(workdir: Path, run: str) -> Path | None:
    """`WORKDIR/runs/RUN`, `last` being the run `WORKDIR/last-run.json` names; None when there is none."""
    if run == LAST:
        try:
            run = json.loads((workdir / "last-run.json").read_text(encoding="utf-8"))["run_name"]
        except (OSError, ValueError, KeyError):
            return None
    folder = workdir / RUNS_DIR / run
    return folder if run and folder.is_dir() else None


def local_logs(run_dir: Path) -> list[LogFile]:
    """Every step's `step.log` (a branch's steps as `<branch>/<step>`) in the order they ended, each followed by its
    workers' logs."""
    files: list[LogFile] = []
    for step_log in sorted(run_dir.rglob(STEP_LOG), key=lambda p: p.stat().st_mtime):
        step = step_log.parent.relative_to(run_dir).as_posix()
        for path in [step_log, *sorted((step_log.parent / WORKER_LOG_DIR).glob(WORKER_LOG_GLOB))]:
            files.append(LogFile(step, str(path), path.stat().st_size, path.read_bytes))
    return files


def local_runs(workdir: Path) -> list[str]:
    runs = workdir / RUNS_DIR
    found = sorted(runs.iterdir(), key=lambda p: p.stat().st_mtime) if runs.is_dir() else []
    return [p.name for p in found if p.is_dir()]


# --------------------------------------------------------------------------------------------- cluster runs


def step_of_pod(workflow: str, pod: str) -> str:
    """The template a pod ran: Argo names pods `<workflow>-<template>-<fnv32a of the node name>` (argo-workflows
    v4.1.2 workflow/util/pod_name.go GeneratePodName, POD_NAMES v2, the default)."""
    match = re.fullmatch(re.escape(workflow) + r"-(.+)-\d+", pod)
    return match.group(1) if match else pod


class StoreRun:
    """A cluster run's logs in the object store (`s3://bucket/prefix` of `storage.workspace`)."""

    def __init__(self, workspace: str, run: str, endpoint_url: str | None) -> None:
        from steps.runtime.storage import s3  # boto3: imported when a store is read

        self.workspace, self.run = workspace.rstrip("/"), run
        self.client = s3.client(endpoint_url)
        self.split = s3.split_s3

    def _objects(self, uri: str) -> list[dict[str, Any]]:
        bucket, prefix = self.split(uri.rstrip("/") + "/")
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [obj for page in pages for obj in page.get("Contents", [])]

    def _file(self, step: str, bucket: str, obj: dict[str, Any]) -> LogFile:
        key = obj["Key"]
        return LogFile(
            step,
            f"s3://{bucket}/{key}",
            int(obj.get("Size", 0)),
            lambda: self.client.get_object(Bucket=bucket, Key=key)["Body"].read(),
        )

    def pod_logs(self) -> list[LogFile]:
        """`<workspace>/RUN/logs/<pod>/main.log`, in the order they were written."""
        uri = archived_logs_prefix(self.workspace, self.run)
        bucket, prefix = self.split(uri + "/")
        found = [o for o in self._objects(uri) if o["Key"].endswith("/" + ARCHIVED_LOG_FILE)]
        found.sort(key=lambda o: o["LastModified"])
        return [self._file(step_of_pod(self.run, o["Key"][len(prefix) :].split("/")[0]), bucket, o) for o in found]

    def training_records(self) -> list[dict[str, Any]]:
        """The `training-run.json` of the run's workspace and of each of its branches' (finetune-batch)."""
        bucket, prefix = self.split(f"{self.workspace}/{self.run}/")
        listing = self.client.list_objects_v2(Bucket=bucket, Prefix=prefix, Delimiter="/")
        folders = ["", *(p["Prefix"][len(prefix) :] for p in listing.get("CommonPrefixes", []))]
        records = []
        for folder in folders:
            try:
                body = self.client.get_object(Bucket=bucket, Key=f"{prefix}{folder}{TRAINING_RUN_RECORD}")["Body"]
            except self.client.exceptions.NoSuchKey:
                continue
            records.append(json.loads(body.read()))
        return records

    def worker_logs(self) -> list[LogFile]:
        """The training workers' logs the run's records point to, as the train step's."""
        files = []
        for record in self.training_records():
            bucket, _ = self.split(record["worker_logs"] + "/")
            for obj in sorted(self._objects(record["worker_logs"]), key=lambda o: o["Key"]):
                files.append(self._file(TRAIN_STEP, bucket, obj))
        return files

    def logs(self) -> list[LogFile]:
        return [*self.pod_logs(), *self.worker_logs()]

    def known_runs(self) -> list[str]:
        """The newest run folders of the workspace (at most SHOWN_RUNS), for an error message."""
        bucket, prefix = self.split(self.workspace + "/")
        listing = self.client.list_objects_v2(Bucket=bucket, Prefix=prefix, Delimiter="/")
        names = [p["Prefix"][len(prefix) :].rstrip("/") for p in listing.get("CommonPrefixes", [])]
        return names[-SHOWN_RUNS:]


# --------------------------------------------------------------------------------------------- the command


def find_logs(args: argparse.Namespace) -> list[LogFile]:
    """The run's logs: the local run of that name, else the cluster run's in the configured store."""
    workdir = args.workdir.resolve()
    run_dir = local_run_dir(workdir, args.run)
    if run_dir is not None:
        return local_logs(run_dir)
    cfg = load_config(args.config, args.env, args.overrides, task=args.task)
    runs = ", ".join(local_runs(workdir)) or "none"
    where = f"no local run {args.run!r} in {workdir / RUNS_DIR} (runs there: {runs})"
    if args.run == LAST or not cfg.storage.workspace.startswith("s3://"):
        raise LogsError(where)
    from botocore.exceptions import BotoCoreError, ClientError

    from paddle_mlops.local import notify

    store = StoreRun(cfg.storage.workspace, args.run, notify.endpoint_url(cfg))
    try:
        files = store.logs()
        if not files:
            known = store.known_runs()
            raise LogsError(
                f"{where}, and no archived logs under {archived_logs_prefix(cfg.storage.workspace, args.run)}/ "
                f"(runs in {cfg.storage.workspace}: {', '.join(known) or 'none'}). Give the workflow's name "
                "(`argo list`) or a local run's"
            )
    except (BotoCoreError, ClientError) as exc:
        raise StoreUnreachable(
            f"cannot read {cfg.storage.workspace} at {notify.endpoint_url(cfg) or 'the AWS default endpoint'}: {exc}. "
            "Check storage.endpoint_url (or S3_ENDPOINT_URL, e.g. a `kubectl port-forward` to MinIO) and the "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY credentials"
        ) from None
    return files


def select(files: list[LogFile], run: str, step: str | None) -> list[LogFile]:
    if step is None:
        return files
    chosen = [f for f in files if f.step == step]
    if not chosen:
        steps = list(dict.fromkeys(f.step for f in files))
        raise LogsError(f"run {run} has no logs of step {step!r}; its steps: {', '.join(steps)}")
    return chosen


def show(files: list[LogFile], listing: bool) -> None:
    out = sys.stdout
    for log in files:
        if listing:
            out.write(f"{log.step}\t{log.size}\t{log.where}\n")
            continue
        out.write(f"==> {log.step}: {log.where} <==\n")
        text = log.read().decode("utf-8", errors="replace")
        out.write(text if text.endswith("\n") or not text else text + "\n")
    out.flush()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="paddle-mlops logs", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    parser.add_argument("run", metavar="RUN", help=f"a local run's or an Argo workflow's name ('{LAST}': the last run)")
    parser.add_argument("step", metavar="STEP", nargs="?", default=None, help="only this step's logs")
    parser.add_argument("--list", dest="listing", action="store_true", help="list the steps' log files (step, bytes)")
    parser.add_argument("--workdir", type=Path, default=Path(DEFAULT_HOME), help="local state (default .paddle-mlops/)")
    add_config_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def action() -> int:
        show(select(find_logs(args), args.run, args.step), args.listing)
        return 0

    errors = (
        (ConfigError, EXIT_USAGE, "configuration error: {exc}"),
        (LogsError, EXIT_USAGE, "paddle-mlops logs: {exc}"),
        (StoreUnreachable, EXIT_FAILED, "paddle-mlops logs: {exc}"),
    )
    return exit_status(action, errors)


if __name__ == "__main__":
    sys.exit(main())
