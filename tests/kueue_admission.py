"""Kueue's flavor assignment for one pod set, reimplemented for tests over our generated objects.

kubernetes-sigs/kueue v0.19.2 pkg/scheduler/flavorassigner/flavorassigner.go:
- `findFlavorForPodSets` walks the resource group's flavors in list order;
- `checkFlavorForPodSets` skips a flavor whose taints the pods do not tolerate, or whose node labels
  the pods' node selection excludes: `flavorSelector` keeps the pod's nodeSelector and required node
  affinity terms for the label keys this flavor defines and matches them against a node labelled
  with the flavor's nodeLabels (a key the flavor does not define is ignored);
- `fitsResourceQuota` gives each flavor a mode: noFit when the request alone exceeds what the queue could
  ever get (`PotentialAvailable`, usage not counted), fit when it is within `Available` (borrowing level 0
  on the queue's own nominal quota, 1 when it takes cohort quota), otherwise what a preemption simulation finds: reclaim
  (every victim is in another queue), preempt (some victim is in this queue) or no candidates;
- `shouldTryNextFlavor`: the search stops at a fit on nominal quota, and goes on past a flavor that needs
  borrowing (`whenCanBorrow: TryNextFlavor`) or preemption (`whenCanPreempt: TryNextFlavor`);
  `isPreferred` keeps the best flavor seen: with `preference` BorrowingOverPreemption (the default) a better
  preemption mode first (fit > reclaim > preempt > no candidates), then less borrowing; with
  PreemptionOverBorrowing less borrowing first. Ties keep the earlier flavor.
Quota arithmetic follows pkg/cache/scheduler/resource_node.go: a queue keeps `nominal - lendingLimit` for
itself (`localQuota`; all of it is lent without a lendingLimit), stores the rest in the cohort, and may take
from the cohort what is unused there, capped by its borrowingLimit (`available`, `potentialAvailable`).
The preemption simulation follows pkg/scheduler/preemption/preemption_oracle.go SimulatePreemption, with the
candidates of our queues' policy: workloads of other queues that borrow in the flavor (reclaimWithinCohort:
Any), lower-priority workloads of this queue (withinClusterQueue: LowerPriority) and, when the workload would
borrow, lower-priority workloads of borrowing queues (borrowWithinCohort: LowerPriority).

Not modelled: hierarchical cohorts (one flat cohort only), fair sharing, Topology Aware Scheduling, more than
one resource group or pod set, the partial-admission and elastic paths, the order and minimality of the
victims Kueue actually picks (the simulation asks only whether removing every candidate makes room), and the
flavor Kueue resumes from on the next attempt (`LastAssignment.NextFlavorToTryForPodSetResource`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

UNITS = {"": 1, "m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}
# flavorassigner.go preemptionMode, worst to best.
NO_FIT, NO_CANDIDATES, PREEMPT, RECLAIM, FIT = range(5)
MODE_NAMES = {NO_FIT: "NoFit", NO_CANDIDATES: "NoCandidates", PREEMPT: "Preempt", RECLAIM: "Reclaim"}


def quantity(value: Any) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([A-Za-z]*)", str(value))
    assert match, value
    return float(match.group(1)) * UNITS[match.group(2)]


@dataclass(frozen=True)
class PodSet:
    count: int
    requests: dict[str, float]
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity: dict[str, Any] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()
    priority: int = 0


@dataclass(frozen=True)
class Admitted:
    """A workload holding quota: its queue, flavor, total requests and priority (a preemption candidate)."""

    queue: str
    flavor: str
    requests: dict[str, float]
    priority: int = 0


@dataclass(frozen=True)
class Assignment:
    flavor: str | None
    mode: str  # "Fit" (nominal quota), "Borrow" (fits with cohort quota), "Reclaim", "Preempt" or "NoFit"
    skipped: dict[str, str]  # flavor -> why it was not usable
    tried: dict[str, str] = field(default_factory=dict)  # flavor -> the mode it would have had


def _expression_matches(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    value = labels.get(expr["key"])
    op = expr["operator"]
    if op == "In":
        return value in expr.get("values", [])
    if op == "NotIn":
        return value not in expr.get("values", [])
    if op == "Exists":
        return expr["key"] in labels
    if op == "DoesNotExist":
        return expr["key"] not in labels
    raise AssertionError(f"operator {op} not modelled")


def flavor_matches(pods: PodSet, flavor: dict[str, Any]) -> bool:
    """flavorassigner.go flavorSelector + the node-affinity match against the flavor's node labels."""
    labels = flavor["spec"].get("nodeLabels") or {}
    for key, value in pods.node_selector.items():
        if key in labels and labels[key] != value:
            return False
    required = ((pods.affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    for term in terms:  # terms are ORed, expressions ANDed; only keys the flavor defines count
        exprs = [e for e in term.get("matchExpressions") or [] if e["key"] in labels]
        if all(_expression_matches(e, labels) for e in exprs):
            return True
    return False


def _tolerated(taint: dict[str, Any], tolerations: tuple[dict[str, Any], ...]) -> bool:
    for t in tolerations:
        if (
            t.get("key") == taint["key"]
            and (t.get("operator") == "Exists" or t.get("value") == taint.get("value"))
            and t.get("effect") in (None, taint.get("effect"))
        ):
            return True
    return False


@dataclass(frozen=True)
class Quota:
    nominal: float
    borrowing: float | None
    lending: float | None

    @property
    def local(self) -> float:
        """resource_node.go localQuota: what is never lent (0 without a lendingLimit: all of it is lent)."""
        return max(0.0, self.nominal - self.lending) if self.lending is not None else 0.0


def quotas(cq: dict[str, Any], flavor: str) -> dict[str, Quota]:
    for group in cq["spec"]["resourceGroups"]:
        for f in group["flavors"]:
            if f["name"] == flavor:
                return {
                    r["name"]: Quota(
                        quantity(r["nominalQuota"]),
                        quantity(r["borrowingLimit"]) if "borrowingLimit" in r else None,
                        quantity(r["lendingLimit"]) if "lendingLimit" in r else None,
                    )
                    for r in f["resources"]
                }
    return {}


Usage = dict[tuple[str, str], dict[str, float]]


class Cohort:
    """One flat cohort's quota and usage in a flavor and resource (resource_node.go, a root cohort)."""

    def __init__(self, queues: list[dict[str, Any]], usage: Usage) -> None:
        self.queues = {q["metadata"]["name"]: q for q in queues}
        self.usage = usage

    def used(self, queue: str, flavor: str, resource: str) -> float:
        return self.usage.get((queue, flavor), {}).get(resource, 0.0)

    def quota(self, queue: str, flavor: str, resource: str) -> Quota | None:
        return quotas(self.queues[queue], flavor).get(resource)

    def _stored(self, flavor: str, resource: str) -> tuple[float, float]:
        """(cohort SubtreeQuota, cohort Usage): what the queues store in it, and what they use beyond their local."""
        total = used = 0.0
        for name in self.queues:
            q = self.quota(name, flavor, resource)
            if q is None:
                continue
            total += q.nominal - q.local
            used += max(0.0, self.used(name, flavor, resource) - q.local)
        return total, used

    def available(self, queue: str, flavor: str, resource: str) -> float:
        q = self.quota(queue, flavor, resource)
        if q is None:
            return 0.0
        mine = self.used(queue, flavor, resource)
        stored, stored_used = self._stored(flavor, resource)
        parent = stored - stored_used
        if q.borrowing is not None:
            in_parent = q.nominal - q.local
            used_in_parent = max(0.0, mine - q.local)
            parent = min(in_parent - used_in_parent + q.borrowing, parent)
        return max(0.0, q.local - mine) + parent

    def potential(self, queue: str, flavor: str, resource: str) -> float:
        q = self.quota(queue, flavor, resource)
        if q is None:
            return 0.0
        stored, _ = self._stored(flavor, resource)
        most = q.local + stored
        return min(q.nominal + q.borrowing, most) if q.borrowing is not None else most

    def borrows(self, queue: str, flavor: str, resource: str, amount: float) -> int:
        """classical FindHeightOfLowestSubtreeThatFits for a flat cohort: 0 within nominal quota, else 1."""
        q = self.quota(queue, flavor, resource)
        return 0 if q is not None and self.used(queue, flavor, resource) + amount <= q.nominal else 1

    def borrowing(self, queue: str, flavor: str) -> bool:
        return any(self.used(queue, flavor, r) > q.nominal for r, q in quotas(self.queues[queue], flavor).items())


def _without(usage: Usage, victims: list[Admitted]) -> Usage:
    out = {k: dict(v) for k, v in usage.items()}
    for v in victims:
        for resource, amount in v.requests.items():
            out.setdefault((v.queue, v.flavor), {})[resource] = (
                out.get((v.queue, v.flavor), {}).get(resource, 0) - amount
            )
    return out


def _flavor_mode(
    cq: dict[str, Any],
    flavor: str,
    cohort: list[dict[str, Any]],
    need: dict[str, float],
    usage: Usage,
    admitted: list[Admitted],
    priority: int,
) -> tuple[int, int]:
    """(preemption mode, borrowing level) of the flavor for the whole request (the worst of its resources)."""
    name = cq["metadata"]["name"]
    pool = Cohort(cohort, usage)
    mode, borrow = FIT, 0
    short = False
    for resource, amount in need.items():
        if amount == 0:
            continue
        if pool.quota(name, flavor, resource) is None:
            return NO_FIT, 0  # the flavor does not cover the resource
        # fitsResourceQuota: noFit only when the request alone exceeds the most the queue could ever get.
        if amount > pool.potential(name, flavor, resource):
            return NO_FIT, 0
        borrow = max(borrow, pool.borrows(name, flavor, resource, amount))
        if amount > pool.available(name, flavor, resource):
            short = True
    if not short:
        return mode, borrow
    # SimulatePreemption: the candidates our queues' preemption policy allows; does removing them make room?
    would_borrow = borrow > 0
    victims = [
        w
        for w in admitted
        if w.flavor == flavor
        and (
            (w.queue == name and w.priority < priority)
            or (w.queue != name and pool.borrowing(w.queue, flavor) and (not would_borrow or w.priority < priority))
        )
    ]
    if not victims:
        return NO_CANDIDATES, borrow
    after = Cohort(cohort, _without(usage, victims))
    if any(a > after.available(name, flavor, r) for r, a in need.items() if a):
        return NO_CANDIDATES, borrow
    borrow = max((after.borrows(name, flavor, r, a) for r, a in need.items() if a), default=0)
    return (PREEMPT if any(v.queue == name for v in victims) else RECLAIM), borrow


def is_preferred(a: tuple[int, int], b: tuple[int, int], preference: str) -> bool:
    """flavorassigner.go isPreferred."""
    if a[0] == NO_FIT:
        return False
    if b[0] == NO_FIT:
        return True
    if (a[0] == NO_CANDIDATES) != (b[0] == NO_CANDIDATES):
        return a[0] != NO_CANDIDATES
    if preference == "PreemptionOverBorrowing":
        return a[1] < b[1] if a[1] != b[1] else a[0] > b[0]
    return a[0] > b[0] if a[0] != b[0] else a[1] < b[1]


def _try_next(mode: tuple[int, int], fungibility: dict[str, Any]) -> bool:
    """flavorassigner.go shouldTryNextFlavor (whenCanBorrow defaults to MayStopSearch, whenCanPreempt to
    TryNextFlavor: apis/kueue/v1beta2/clusterqueue_types.go)."""
    if mode[0] in (NO_FIT, NO_CANDIDATES):
        return True
    if mode[0] in (PREEMPT, RECLAIM) and fungibility.get("whenCanPreempt", "TryNextFlavor") == "TryNextFlavor":
        return True
    return mode[1] > 0 and fungibility.get("whenCanBorrow", "MayStopSearch") == "TryNextFlavor"


def _label(mode: tuple[int, int]) -> str:
    return MODE_NAMES.get(mode[0]) or ("Borrow" if mode[1] else "Fit")


def assign(
    cq: dict[str, Any],
    flavors: dict[str, dict[str, Any]],
    cohort: list[dict[str, Any]],
    pods: PodSet,
    usage: Usage | None = None,
    admitted: list[Admitted] | None = None,
) -> Assignment:
    """The flavor Kueue assigns `pods` in queue `cq`. What is admitted already: `usage[(queue, flavor)]`, or the
    `admitted` workloads (which are also the preemption candidates; their requests make up `usage` when it is None)."""
    admitted = admitted or []
    if usage is None:
        usage = {}
        for w in admitted:
            for resource, amount in w.requests.items():
                usage.setdefault((w.queue, w.flavor), {})[resource] = (
                    usage.get((w.queue, w.flavor), {}).get(resource, 0) + amount
                )
    need = {k: v * pods.count for k, v in pods.requests.items()}
    (group,) = cq["spec"]["resourceGroups"]
    fungibility = cq["spec"].get("flavorFungibility") or {}
    preference = fungibility.get("preference", "BorrowingOverPreemption")
    skipped: dict[str, str] = {}
    tried: dict[str, str] = {}
    best: tuple[str | None, tuple[int, int]] = (None, (NO_FIT, 0))
    for entry in group["flavors"]:
        name = entry["name"]
        flavor = flavors[name]
        taints = flavor["spec"].get("nodeTaints") or []
        if any(not _tolerated(t, pods.tolerations) for t in taints):
            skipped[name] = "untolerated taint"
            continue
        if not flavor_matches(pods, flavor):
            skipped[name] = f"flavor {name} doesn't match node affinity"
            continue
        mode = _flavor_mode(cq, name, cohort, need, usage, admitted, pods.priority)
        tried[name] = _label(mode)
        if mode[0] == NO_FIT:
            skipped[name] = "insufficient quota"
        if not _try_next(mode, fungibility):
            return Assignment(name, _label(mode), skipped, tried)
        if is_preferred(mode, best[1], preference):
            best = (name, mode)
    if best[0] is None or best[1][0] == NO_CANDIDATES:
        return Assignment(None, "NoFit", skipped, tried)
    return Assignment(best[0], _label(best[1]), skipped, tried)
