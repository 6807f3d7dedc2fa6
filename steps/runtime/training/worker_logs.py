"""A training node's worker logs, kept beside its run's checkpoints: `<run>/logs/node-<node rank>/<file>`.

`paddle.distributed.launch --log_dir DIR` writes each worker's output to `DIR/workerlog.<local rank>` (and its own to
`DIR/endpoints.log` and the like); those files die with the pod. The trainer knows its run's folder (the run id is
computed from the data: steps/runtime/training/run_id.py), the launch supervisor (launch.py) outlives the workers: so
each worker leaves the folder in the supervisor's control folder (`announce`), and the supervisor copies the log folder
there every `UPLOAD_EVERY_SECONDS` while the workers run and once more when they have exited, a SIGTERM included,
within a bounded time (`LogArchiver.final`) that keeps the grace period's guarantee. Rank 0 also records in its
workflow's workspace which run it trained (`record_run`), so that `paddle-mlops logs RUN train` finds these files.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path

from paddle_mlops_core.contracts import LAUNCH_CONTROL_ENV, RUN_URI_FILE, TRAINING_RUN_RECORD, WORKER_LOGS
from steps.runtime.storage import workspace

log = logging.getLogger("steps.train")

UPLOAD_EVERY_SECONDS = 300.0
# After the workers exited on SIGTERM: what the last copy may take (the launcher's hard stop leaves the pod 10 s of
# its grace period, pipelines/trainjob.py STOP_MARGIN_SECONDS).
FINAL_UPLOAD_AFTER_STOP_SECONDS = 5.0
FINAL_UPLOAD_SECONDS = 60.0


def node_prefix(run_uri: str, node_rank: str) -> str:
    """Where one node's worker logs go: `<run>/logs/node-<node rank>`."""
    return workspace.join(run_uri, WORKER_LOGS, f"node-{node_rank}")


def announce(run_uri: str) -> None:
    """Under the launch supervisor: tell it the run's folder (every worker of the node says the same)."""
    control = os.environ.get(LAUNCH_CONTROL_ENV)
    if not control or not Path(control).is_dir():
        return
    target = Path(control) / RUN_URI_FILE
    partial = target.with_name(f"{RUN_URI_FILE}.{os.getpid()}")
    partial.write_text(run_uri, encoding="utf-8")
    partial.replace(target)  # atomic: the supervisor never reads half a URI


def record_run(ws: str, run_id: str, run_uri: str, endpoint_url: str | None) -> None:
    """Rank 0: `<workspace>/training-run.json` says which run this workflow trained and where its worker logs are."""
    record = {"run_id": run_id, "run": run_uri, "worker_logs": workspace.join(run_uri, WORKER_LOGS)}
    if workspace.s3.is_s3(ws):
        bucket, key = workspace.s3.split_s3(workspace.join(ws, TRAINING_RUN_RECORD))
        body = json.dumps(record).encode()
        workspace.s3.client(endpoint_url).put_object(Bucket=bucket, Key=key, Body=body)
        return
    Path(ws).mkdir(parents=True, exist_ok=True)
    (Path(ws) / TRAINING_RUN_RECORD).write_text(json.dumps(record), encoding="utf-8")


class LogArchiver:
    """Copies a node's `--log_dir` to its run's folder once a worker announced it (module docstring)."""

    def __init__(self, log_dir: Path, control: Path, node_rank: str) -> None:
        self.log_dir, self.control, self.node_rank = log_dir, control, node_rank
        self.last = time.monotonic()
        self.thread: threading.Thread | None = None

    def destination(self) -> str | None:
        with contextlib.suppress(OSError):
            run_uri = (self.control / RUN_URI_FILE).read_text(encoding="utf-8").strip()
            return node_prefix(run_uri, self.node_rank) if run_uri else None
        return None

    def upload(self) -> bool:
        """One copy now; False (said on stderr, never raised) when there is nothing to copy or the store refused."""
        target = self.destination()
        if target is None or not self.log_dir.is_dir():
            return False
        try:
            workspace.stage_out(self.log_dir, target)
        except Exception as exc:  # noqa: BLE001 - a log copy must never fail or stall the training it records
            print(f"launch: could not archive the worker logs to {target}: {exc}", file=sys.stderr, flush=True)
            return False
        return True

    def tick(self) -> None:
        """While the workers run: a copy in the background every UPLOAD_EVERY_SECONDS, one at a time."""
        if time.monotonic() - self.last < UPLOAD_EVERY_SECONDS or (self.thread and self.thread.is_alive()):
            return
        self.last = time.monotonic()
        self.thread = threading.Thread(target=self.upload, name="worker-logs", daemon=True)
        self.thread.start()

    def final(self, timeout: float) -> bool:
        """The last copy, after the workers exited: given at most `timeout` seconds (a daemon thread past it dies with
        the process), so that a stop still ends within the grace period. True when it completed."""
        deadline = time.monotonic() + timeout
        done = threading.Event()

        def copy() -> None:
            if self.upload():
                done.set()

        if self.thread is not None:  # a periodic copy still in flight finishes first (both write the same keys)
            self.thread.join(timeout)
        thread = threading.Thread(target=copy, name="worker-logs-final", daemon=True)
        thread.start()
        thread.join(max(0.0, deadline - time.monotonic()))
        return done.is_set()
