"""`python -m steps.runtime.launch`: start `paddle.distributed.launch` on one TrainJob node.

A TrainJob's rank 0 is known by its JobSet DNS name (`<trainjob>-node-0-0.<trainjob>`), but
Paddle's HTTP master starts its rendezvous store only when the `--master` host is 127.0.0.1 or the
node's own IP (paddle/distributed/launch/controllers/master.py HTTPMaster.lazy_init): given a
hostname, rank 0 would wait for a store nobody starts. So this resolves the name (waiting for the
headless Service's record, which JobSet publishes before the pods are ready) and hands the IP on;
every other argument goes to the launcher untouched. With `--nnodes 1` there is nothing to meet:
it runs the launcher without a master, as a single-node PaddleJob would.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence

RESOLVE_TIMEOUT_SECONDS = 600.0


class RendezvousError(Exception):
    """The master's address could not be found; the message says what was tried."""


def resolve(host: str, timeout: float, lookup: Callable[[str], str] = socket.gethostbyname) -> str:
    """The IPv4 address of `host`, retrying while its DNS record does not exist yet."""
    deadline = time.monotonic() + timeout
    delay = 0.5
    while True:
        try:
            return lookup(host)
        except OSError as exc:
            if time.monotonic() + delay > deadline:
                raise RendezvousError(
                    f"rank-0 address {host!r} did not resolve within {timeout:.0f}s ({exc}). The JobSet's headless "
                    "Service publishes it once the pods exist: check that the TrainJob's pods were created "
                    "(kubectl get pods -l jobset.sigs.k8s.io/jobset-name=<trainjob>) and that DNS works in the "
                    "namespace."
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


def launcher_argv(argv: Sequence[str], lookup: Callable[[str], str] = socket.gethostbyname) -> list[str]:
    """The `python -m paddle.distributed.launch ...` command for these arguments."""
    parser = argparse.ArgumentParser(prog="python -m steps.runtime.launch", add_help=False)
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


def main(argv: Sequence[str] | None = None) -> int:
    try:
        command = launcher_argv(sys.argv[1:] if argv is None else argv)
    except RendezvousError as exc:
        print(f"launch: {exc}", file=sys.stderr)
        return 2
    print("launch: " + " ".join(command), file=sys.stderr, flush=True)
    os.execv(command[0], command)
    return 0  # pragma: no cover - execv does not return


if __name__ == "__main__":
    raise SystemExit(main())
