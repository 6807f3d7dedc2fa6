"""Kueue's flavor assignment for one pod set, reimplemented for tests over our generated objects.

kubernetes-sigs/kueue v0.19.2 pkg/scheduler/flavorassigner/flavorassigner.go:
- `findFlavorForPodSets` walks the resource group's flavors in list order; a flavor that fits in
  the queue's unused nominal quota ends the search at once;
- `checkFlavorForPodSets` skips a flavor whose taints the pods do not tolerate, or whose node labels
  the pods' node selection excludes: `flavorSelector` keeps the pod's nodeSelector and required node
  affinity terms for the label keys this flavor defines and matches them against a node labelled
  with the flavor's nodeLabels (a key the flavor does not define is ignored);
- a flavor that fits only by borrowing from the cohort is kept as a candidate, and with
  `flavorFungibility.whenCanBorrow: TryNextFlavor` the search goes on to the next flavor; when no
  flavor fits on nominal quota the best candidate (borrowing) is taken; with none the workload waits.
Borrowing follows pkg/cache/resource_node.go: a queue may use its nominal quota plus what the other
queues of the cohort lend (their lendingLimit, else their whole nominal quota) and do not use,
capped by its own borrowingLimit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

UNITS = {"": 1, "m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}


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


@dataclass(frozen=True)
class Assignment:
    flavor: str | None
    mode: str  # "Fit", "Borrow" or "NoFit"
    skipped: dict[str, str]  # flavor -> why it was not usable


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


def _nominal(cq: dict[str, Any], flavor: str) -> dict[str, dict[str, float | None]]:
    for group in cq["spec"]["resourceGroups"]:
        for f in group["flavors"]:
            if f["name"] == flavor:
                return {
                    r["name"]: {
                        "nominal": quantity(r["nominalQuota"]),
                        "borrowing": quantity(r["borrowingLimit"]) if "borrowingLimit" in r else None,
                        "lending": quantity(r["lendingLimit"]) if "lendingLimit" in r else None,
                    }
                    for r in f["resources"]
                }
    return {}


def assign(
    cq: dict[str, Any],
    flavors: dict[str, dict[str, Any]],
    cohort: list[dict[str, Any]],
    pods: PodSet,
    usage: dict[tuple[str, str], dict[str, float]] | None = None,
) -> Assignment:
    """The flavor Kueue assigns `pods` in queue `cq`; `usage[(queue, flavor)]` is what is admitted already."""
    usage = usage or {}
    need = {k: v * pods.count for k, v in pods.requests.items()}
    (group,) = cq["spec"]["resourceGroups"]
    try_next_on_borrow = cq["spec"].get("flavorFungibility", {}).get("whenCanBorrow") == "TryNextFlavor"
    skipped: dict[str, str] = {}
    candidate: str | None = None
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
        mode = _mode(cq, name, cohort, need, usage)
        if mode == "Fit":
            return Assignment(name, "Fit", skipped)
        if mode == "Borrow":
            if not try_next_on_borrow:
                return Assignment(name, "Borrow", skipped)
            candidate = candidate or name
            continue
        skipped[name] = "insufficient quota"
    if candidate:
        return Assignment(candidate, "Borrow", skipped)
    return Assignment(None, "NoFit", skipped)


def _mode(
    cq: dict[str, Any],
    flavor: str,
    cohort: list[dict[str, Any]],
    need: dict[str, float],
    usage: dict[tuple[str, str], dict[str, float]],
) -> str:
    own = _nominal(cq, flavor)
    used = usage.get((cq["metadata"]["name"], flavor), {})
    mode = "Fit"
    for resource, amount in need.items():
        if amount == 0:
            continue
        quota = own.get(resource)
        if quota is None:
            return "NoFit"  # the flavor does not cover the resource
        total = used.get(resource, 0) + amount
        if total <= quota["nominal"]:
            continue
        lendable = 0.0
        for other in cohort:
            if other["metadata"]["name"] == cq["metadata"]["name"]:
                continue
            theirs = _nominal(other, flavor).get(resource)
            if not theirs:
                continue
            lend = theirs["lending"] if theirs["lending"] is not None else theirs["nominal"]
            their_used = usage.get((other["metadata"]["name"], flavor), {}).get(resource, 0)
            lendable += max(0.0, min(lend, theirs["nominal"] - their_used))
        borrow = total - quota["nominal"]
        limit = quota["borrowing"]
        if borrow <= lendable and (limit is None or borrow <= limit):
            mode = "Borrow"
        else:
            return "NoFit"
    return mode
