"""`python -m steps.runtime.training.launch`: start `paddle.distributed.launch` on one TrainJob node.

A TrainJob's rank 0 is known by its JobSet DNS name (`<trainjob>-node-0-0.<trainjob>`), but
Paddle's HTTP master starts its rendezvous store only when the `--master` host is 127.0.0.1 or the
node's own IP (paddle/distributed/launch/controllers/master.py HTTPMaster.lazy_init): given a
hostname, rank 0 would wait for a store nobody starts. So this resolves the name (waiting for the
headless Service's record, which JobSet publishes before the pods are ready) and hands the IP on;
every other argument goes to the launcher untouched. With `--nnodes 1` there is nothing to meet:
it runs the launcher without a master, as a single-node PaddleJob would.

It stays the container's first process (the one the kubelet signals) instead of exec'ing the launcher, for two
things Paddle's launcher gets wrong for a restart policy (paddle/distributed/launch/controllers/controller.py):
- SIGTERM: the launcher SIGTERMs its workers and SIGKILLs them 30 s later, whatever the grace period. This process
  passes SIGTERM to the workers themselves (their pid files in the control folder), which checkpoint at the next
  step boundary and exit 143 together (steps/runtime/training/graceful_stop.py) within the pod's grace period.
- the exit code: the launcher exits with its first worker's code, often that of a worker it terminated itself, so
  a worker that failed on bad configuration or data would be restarted in a loop. A worker exiting with the fatal
  code leaves a mark in the control folder (steps/runtime/runner.py); then this exits `EXIT_FATAL`, which the
  pod failure policy does not restart.

`--stop-timeout SECONDS` (or `PADDLE_MLOPS_LAUNCH_STOP_TIMEOUT`; default none) is a hard stop: when the launcher has
not exited that long after the forwarded SIGTERM, this SIGKILLs its whole process tree and exits `EXIT_TERMINATED`. A
rank stuck in a collective (NCCL or gloo waiting for a peer that left) then cannot outlive the grace period and turn
a retryable stop into the kubelet's SIGKILL. Meant to be the pods' grace period less the 10 s an exit takes.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil

from paddle_mlops_core.contracts import (
    EXIT_FAILED,
    EXIT_FATAL,
    EXIT_TERMINATED,
    EXIT_USER_ERROR,
    LAUNCH_CONTROL_ENV,
    LAUNCH_STOP_TIMEOUT_ENV,
    RENDEZVOUS_TIMEOUT_SECONDS,
)
from steps.runtime.training.worker_logs import FINAL_UPLOAD_AFTER_STOP_SECONDS, FINAL_UPLOAD_SECONDS, LogArchiver

RESOLVE_TIMEOUT_SECONDS = float(RENDEZVOUS_TIMEOUT_SECONDS)


class RendezvousError(Exception):
    """The launch arguments cannot work; the message says what is wrong. Exit 2: a restart changes nothing."""


class RendezvousTimeout(RendezvousError):
    """Rank 0's address did not resolve in time. Exit 1: a restart of the job may find it."""


def resolve(host: str, timeout: float, lookup: Callable[[str], str] = socket.gethostbyname) -> str:
    """The IPv4 address of `host`, retrying while its DNS record does not exist yet."""
    deadline = time.monotonic() + timeout
    delay = 0.5
    while True:
        try:
            return lookup(host)
        except OSError as exc:
            if time.monotonic() + delay > deadline:
                raise RendezvousTimeout(
                    f"rank-0 address {host!r} did not resolve within {timeout:.0f}s ({exc}). The JobSet's headless "
                    "Service publishes it once the pods exist: check that the TrainJob's pods were created "
                    "(kubectl get pods -l jobset.sigs.k8s.io/jobset-name=<trainjob>) and that DNS works in the "
                    "namespace."
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


def stop_timeout(argv: Sequence[str], environ: dict[str, str] | None = None) -> tuple[float | None, list[str]]:
    """`--stop-timeout SECONDS` (else LAUNCH_STOP_TIMEOUT_ENV, else None: no hard stop) and the other arguments."""
    parser = argparse.ArgumentParser(prog="python -m steps.runtime.training.launch", add_help=False, allow_abbrev=False)
    parser.add_argument("--stop-timeout", default=None)
    known, rest = parser.parse_known_args(list(argv))
    value = known.stop_timeout
    if value is None:
        value = (os.environ if environ is None else environ).get(LAUNCH_STOP_TIMEOUT_ENV) or None
    if value is None:
        return None, rest
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise RendezvousError(f"--stop-timeout ({LAUNCH_STOP_TIMEOUT_ENV}) {value!r} is not a number of seconds > 0")
    return seconds, rest


def launcher_argv(argv: Sequence[str], lookup: Callable[[str], str] = socket.gethostbyname) -> list[str]:
    """The `python -m paddle.distributed.launch ...` command for these arguments."""
    parser = argparse.ArgumentParser(prog="python -m steps.runtime.training.launch", add_help=False)
    parser.add_argument("--master", default=None, help="HOST:PORT of rank 0")
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--rank", default=None, help="this node's rank (JOB_COMPLETION_INDEX)")
    parser.add_argument("--resolve-timeout", type=float, default=RESOLVE_TIMEOUT_SECONDS)
    known, rest = parser.parse_known_args(list(argv))
    command = [sys.executable, "-m", "paddle.distributed.launch"]
    if known.nnodes <= 1:
        return [*command, *rest]
    if not known.master or known.rank is None:
        raise RendezvousError(f"--nnodes {known.nnodes} needs --master HOST:PORT and --rank N")
    host, sep, port = known.master.rpartition(":")
    if not sep or not port.isdigit():
        raise RendezvousError(f"--master {known.master!r} is not HOST:PORT")
    if not str(known.rank).isdigit() or int(known.rank) >= known.nnodes:
        raise RendezvousError(
            f"--rank {known.rank!r} is not a node index below --nnodes {known.nnodes} (is JOB_COMPLETION_INDEX set?)"
        )
    address = resolve(host, known.resolve_timeout, lookup)
    return [
        *command,
        "--master", f"{address}:{port}",
        "--nnodes", str(known.nnodes),
        "--rank", str(known.rank),
        *rest,
    ]  # fmt: skip


def log_dir_and_node(argv: Sequence[str]) -> tuple[Path | None, str]:
    """The launcher's `--log_dir` (None: not given) and this node's rank (`--rank`, 0 on one node)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--log_dir", default=None)
    parser.add_argument("--rank", default="0")
    known, _ = parser.parse_known_args(list(argv))
    return (Path(known.log_dir) if known.log_dir else None), str(known.rank)


class Supervisor:
    """Runs the launcher as a child and turns SIGTERM and the workers' outcome into the container's exit code.
    `stop_timeout`: seconds from SIGTERM to the hard stop (module docstring); None: none. `log_dir`: the launcher's,
    copied beside the run's checkpoints as node `node_rank`'s worker logs."""

    def __init__(
        self, command: list[str], stop_timeout: float | None = None, log_dir: Path | None = None, node_rank: str = "0"
    ) -> None:
        self.command = command
        self.stop_timeout = stop_timeout
        self.control = Path(tempfile.mkdtemp(prefix="paddle-mlops-launch-"))
        self.logs = LogArchiver(log_dir, self.control, node_rank) if log_dir else None
        self.proc: subprocess.Popen[bytes] | None = None
        self.terminated = False
        self.deadline: float | None = None  # when the hard stop comes, once signalled

    def _workers(self) -> list[int]:
        found = []
        for path in self.control.glob("pid.*"):
            with contextlib.suppress(OSError):
                text = path.read_text().strip()
                if text.isdigit():
                    found.append(int(text))
        return found

    def _forward(self, signum: int, frame: Any) -> None:
        """SIGTERM to every worker that registered (they stop together at a step boundary); to the launcher while
        none has yet (nothing trained, nothing to save)."""
        del frame
        self.terminated = True
        if self.deadline is None and self.stop_timeout is not None:
            self.deadline = time.monotonic() + self.stop_timeout
        for pid in self._workers() or ([self.proc.pid] if self.proc else []):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._forward)
        try:
            self.proc = subprocess.Popen(self.command, env={**os.environ, LAUNCH_CONTROL_ENV: str(self.control)})
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's ^C reaches the launcher in our group
            code = self._wait(self.proc)
            if self.logs is not None:
                self.logs.final(FINAL_UPLOAD_AFTER_STOP_SECONDS if self.terminated else FINAL_UPLOAD_SECONDS)
            return self.exit_code(code)
        finally:
            shutil.rmtree(self.control, ignore_errors=True)

    def _wait(self, proc: subprocess.Popen[bytes]) -> int:
        """The launcher's exit code; past the hard stop's deadline, its whole tree SIGKILLed first."""
        while True:
            left = None if self.deadline is None else self.deadline - time.monotonic()
            if left is not None and left <= 0:
                self._kill_tree(proc)
                return proc.wait()
            if self.logs is not None and self.deadline is None:
                self.logs.tick()
            try:
                # Once a second at least: the SIGTERM handler only sets the deadline, this loop keeps it.
                return proc.wait(timeout=1.0 if left is None else min(left, 1.0))
            except subprocess.TimeoutExpired:
                continue

    def _kill_tree(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL the launcher, everything below it and every registered worker (one its launcher no longer
        parents included)."""
        print(f"launch: still running {self.stop_timeout:g} s after SIGTERM (--stop-timeout); killing the launcher "
              "and its workers", file=sys.stderr, flush=True)  # fmt: skip
        victims: list[psutil.Process] = []
        with contextlib.suppress(psutil.NoSuchProcess):
            launcher = psutil.Process(proc.pid)
            victims = [launcher, *launcher.children(recursive=True)]
        known = {p.pid for p in victims}
        for pid in self._workers():
            if pid not in known:
                with contextlib.suppress(psutil.NoSuchProcess):
                    victims.append(psutil.Process(pid))
        for victim in victims:
            with contextlib.suppress(psutil.NoSuchProcess):
                victim.kill()

    def exit_code(self, code: int) -> int:
        fatal = sorted(self.control.glob("fatal.*"))
        if fatal:
            print(f"launch: a worker failed for good: {fatal[0].read_text().strip()}", file=sys.stderr)
            return EXIT_FATAL
        if code < 0:  # the launcher itself was killed by a signal
            code = 128 - code
        if self.terminated and code != 0:
            return EXIT_TERMINATED
        return code


def main(argv: Sequence[str] | None = None) -> int:
    try:
        timeout, rest = stop_timeout(sys.argv[1:] if argv is None else argv)
        command = launcher_argv(rest)
    except RendezvousTimeout as exc:
        print(f"launch: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except RendezvousError as exc:
        print(f"launch: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    print("launch: " + " ".join(command), file=sys.stderr, flush=True)
    log_dir, node = log_dir_and_node(rest)
    return Supervisor(command, timeout, log_dir, node).run()


if __name__ == "__main__":
    raise SystemExit(main())
