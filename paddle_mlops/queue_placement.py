"""Where Kueue would put a run now, read off the queue state (paddle_mlops/queue_state.py): admitted at once in
a region, queued behind N Workloads, or never (no allowed region can ever hold its GPUs: `submit` exits 3).

As Kueue decides it for our ClusterQueues (kubernetes-sigs/kueue v0.19.2):
- the most a queue can ever get in a flavor is pkg/cache/scheduler/resource_node.go potentialAvailable: what it
  keeps (`nominal - lendingLimit`) plus all the cohort holds, capped at `nominal + borrowingLimit`;
  pkg/scheduler/flavorassigner/flavorassigner.go fitsResourceQuota says NoFit when the request alone exceeds it;
- what it can get now is `available`: its unused kept quota plus what is unused in the cohort, within its
  borrowing limit, with every Workload that holds quota (status.flavorsReservation) counted;
- the flavors are tried in the queue's order, and with `whenCanBorrow: TryNextFlavor` a later region that fits
  on nominal quota beats an earlier one that needs borrowing;
- a run that must wait is behind every pending Workload of its ClusterQueue with a priority as high or higher
  (pkg/cache/queue/cluster_queue.go baseCompareFunc: priority, then age).
On a MultiKueue manager the ClusterQueue's one flavor has no region (ANY_REGION): it is accounting, and the
answer says so; the worker clusters choose the region (pipelines/platform/multikueue.py).
GPUs only: CPU and memory quota are sized to follow the GPUs in configs/teams/, and preemption of lower-priority
or borrowing Workloads is not predicted (a run that could preempt is reported as queued).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from paddle_mlops.queue_state import ANY_REGION, FlavorQuota, QueueState

NOW, QUEUED, NEVER = "now", "queued", "never"


@dataclass(frozen=True)
class Placement:
    verdict: str
    message: str
    region: str | None = None
    flavor: str | None = None
    position: int | None = None
    borrowing: bool = False


def _peers(state: QueueState, f: FlavorQuota) -> list[FlavorQuota]:
    cohort = state.cohorts.get(f.cluster_queue)
    if not cohort:
        return [f]
    return [p for p in state.all_flavors if p.flavor == f.flavor and state.cohorts.get(p.cluster_queue) == cohort]


def potential(state: QueueState, f: FlavorQuota) -> Decimal:
    """The most GPUs the queue can ever hold in the flavor (usage not counted)."""
    stored = sum((p.nominal - p.local for p in _peers(state, f)), Decimal(0))
    most = f.local + stored
    return min(f.nominal + f.borrowing_limit, most) if f.borrowing_limit is not None else most


def available(state: QueueState, f: FlavorQuota) -> Decimal:
    """The GPUs the queue can take now in the flavor, every reservation counted."""
    peers = _peers(state, f)
    stored = sum((p.nominal - p.local for p in peers), Decimal(0))
    stored_used = sum((max(Decimal(0), p.reserved - p.local) for p in peers), Decimal(0))
    parent = stored - stored_used
    if f.borrowing_limit is not None:
        parent = min((f.nominal - f.local) - max(Decimal(0), f.reserved - f.local) + f.borrowing_limit, parent)
    return max(Decimal(0), f.local - f.reserved) + parent


def _n(value: Decimal) -> str:
    return str(int(value)) if value == value.to_integral() else str(value)


def place(state: QueueState, cluster_queue: str, gpus: int, regions: list[str], priority: int) -> Placement:
    """Where a run of `gpus` GPUs with `priority`, allowed in `regions`, goes in `cluster_queue` now."""
    flavors = [f for f in state.of(cluster_queue) if f.region in regions or f.region == ANY_REGION]
    if not flavors:
        held = ", ".join(f"{f.flavor} ({f.region})" for f in state.of(cluster_queue)) or "none"
        return Placement(
            NEVER,
            f"ClusterQueue {cluster_queue} has no flavor in the run's regions ({', '.join(regions)}); it has: {held}",
        )
    ever = [f for f in flavors if potential(state, f) >= gpus]
    if not ever:
        limits = "; ".join(
            f"{f.flavor}: at most {_n(potential(state, f))} (nominal {_n(f.nominal)} + borrowing limit "
            f"{_n(f.borrowing_limit) if f.borrowing_limit is not None else 'none, what the cohort lends'})"
            for f in flavors
        )
        return Placement(
            NEVER,
            f"the run needs {gpus} GPUs and no allowed region of ClusterQueue {cluster_queue} can ever hold them "
            f"({limits}). Lower training.job.workers or gpus_per_worker, allow another region "
            "(training.placement.exclude_regions, data.movable), or raise the team's quota in configs/teams/.",
        )
    fits = [f for f in flavors if available(state, f) >= gpus]
    nominal = [f for f in fits if f.reserved + gpus <= f.nominal]
    if nominal or fits:
        f = (nominal or fits)[0]
        how = "on the team's own quota" if nominal else "borrowing from the cohort"
        if f.region == ANY_REGION:
            return Placement(
                NOW,
                f"would be dispatched now to the worker clusters (MultiKueue; the manager holds {_n(f.reserved)} of "
                f"{_n(f.nominal)} GPUs for ClusterQueue {cluster_queue}), which try its regions in the team's order: "
                f"{', '.join(regions)}",
                f.region,
                f.flavor,
            )
        return Placement(
            NOW,
            f"would be admitted now in region {f.region} (flavor {f.flavor}, {how}: {_n(available(state, f))} GPUs "
            f"free, {gpus} needed)",
            f.region,
            f.flavor,
            borrowing=not nominal,
        )
    ahead = [w for w in state.pending(cluster_queue) if w.priority >= priority]
    first = ever[0]
    return Placement(
        QUEUED,
        f"queued at position {len(ahead) + 1} in ClusterQueue {cluster_queue}, region {first.region} first "
        f"(flavor {first.flavor}: {_n(first.reserved)} of {_n(first.nominal)} GPUs reserved, "
        f"{_n(available(state, first))} free, {gpus} needed; {len(ahead)} pending ahead of it)",
        first.region,
        first.flavor,
        len(ahead) + 1,
    )
