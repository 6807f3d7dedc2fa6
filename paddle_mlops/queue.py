"""`paddle-mlops queue`: the training queues as Kueue sees them. Per ClusterQueue and flavor (region × GPU type)
the GPUs nominal, borrowing limit, lent, borrowed, reserved and used; then the admitted Workloads with the flavor
they were given and the pending ones with their position (the visibility API's where it is served, else Kueue's
queue order over the Workloads' status: paddle_mlops/queue_state.py), priority class and value."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from rich.console import Console
from rich.table import Table

from paddle_mlops.command_line import exit_status
from paddle_mlops.queue_state import KueueApi, QueueState, read_state
from paddle_mlops_core.contracts import EXIT_API


def _n(value: Decimal | None) -> str:
    if value is None:
        return "-"
    return str(int(value)) if value == value.to_integral() else str(value)


def render(state: QueueState, console: Console) -> None:
    queues = sorted({f.cluster_queue for f in state.flavors})
    if not queues:
        console.print("No Kueue ClusterQueue found (kubectl apply -f argo/kueue.yaml installs them).")
        return
    for name in queues:
        team = state.teams.get(name) or "-"
        table = Table(title=f"ClusterQueue {name} (team {team}, cohort {state.cohorts.get(name) or '-'})")
        for column in ("flavor", "region", "gpu", "nominal", "borrow limit", "lent", "borrowed", "reserved", "used"):
            table.add_column(column, justify="left" if column in ("flavor", "region", "gpu") else "right")
        for f in state.of(name):
            table.add_row(
                f.flavor, f.region, f.gpu_type, _n(f.nominal), _n(f.borrowing_limit), _n(f.lent), _n(f.borrowed),
                _n(f.reserved), _n(f.used),
            )  # fmt: skip
        console.print(table)
        rows = [w for w in state.workloads if w.cluster_queue == name]
        if not rows:
            console.print("  no workloads")
            continue
        source = "visibility API" if state.visibility.get(name) else "Workload status (visibility API not served)"
        jobs = Table(title=f"workloads of {name} (positions from the {source})")
        for column in ("position", "state", "workload", "job", "priority", "gpus", "flavor", "region"):
            jobs.add_column(column)
        ordered = sorted(rows, key=lambda w: (w.state == "pending", w.position or 0, w.name))
        for w in ordered:
            jobs.add_row(
                str(w.position) if w.position else "-", w.state, f"{w.namespace}/{w.name}", w.job,
                f"{w.priority_class} ({w.priority})", _n(w.gpus), w.flavor or "-", w.region or "-",
            )  # fmt: skip
        console.print(jobs)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="paddle-mlops queue",
        description=(
            "Show the Kueue training queues: per ClusterQueue and flavor (region x GPU type) the GPUs nominal, "
            "borrowing limit, lent to other teams, borrowed, reserved and used (ClusterQueue status), and the "
            "admitted and pending Workloads with their position, priority and the flavor they were given. Positions "
            "come from Kueue's visibility API (visibility.kueue.x-k8s.io) where it is served, else from the Workloads' "
            "status in Kueue's queue order. Exit 0, or 4 when the API cannot be read."
        ),
    )
    p.add_argument("--team", default=None, metavar="NAME", help="only this team's ClusterQueue (default: all)")
    p.add_argument("--json", dest="as_json", action="store_true", help="print the state as JSON")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None, api: Any = None) -> int:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException

    args = _parse_args(argv)

    def show() -> int:
        state = read_state(api or KueueApi.connect(), team=args.team)
        if args.as_json:
            print(json.dumps(state.as_json(), indent=2, default=str))
        else:
            # Piped output (scripts, CI logs) gets the full width instead of truncated cells.
            render(state, Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200))
        return 0

    errors = (
        (
            ConfigException,
            EXIT_API,
            "queue: no Kubernetes credentials ({exc}). Set KUBECONFIG or run inside the cluster.",
        ),
        (
            ApiException,
            EXIT_API,
            "queue: the Kubernetes API refused the request ({exc.status} {exc.reason}). Check that Kueue is installed "
            "(kueue.x-k8s.io/v1beta2) and that your account may list clusterqueues, localqueues, resourceflavors and "
            "workloads.",
        ),
    )
    return exit_status(show, errors)


if __name__ == "__main__":
    sys.exit(main())
