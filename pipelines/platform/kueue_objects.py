"""The Kueue objects that admit TrainJobs in one cluster: a ResourceFlavor per region and GPU type, a ClusterQueue
per team in one Cohort, the LocalQueues, the WorkloadPriorityClasses and the network Topology, from
`configs/regions/` and `configs/teams/`.

kueue.py assembles them into argo/kueue.yaml and says why each is shaped so; multikueue.py builds the same objects
for each region's worker cluster.
"""

from __future__ import annotations

from typing import Any

from paddle_mlops_core.config import PipelineConfig, RegionConfig, TeamConfig
from paddle_mlops_core.config.placement import team_regions
from paddle_mlops_core.contracts import REGION_OBJECT_LABEL
from pipelines.kueue_names import API, COHORT, COVERED_RESOURCES, GPU, LOCAL_QUEUE, TOPOLOGY
from pipelines.labels import TEAM_LABEL
from pipelines.platform.meta import metadata
from pipelines.platform.tenancy import scaled


def resource_flavor(cfg: PipelineConfig, region: RegionConfig) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": region.node_selector()}
    if region.tolerations:
        spec["tolerations"] = [{k: v for k, v in t.model_dump().items() if v is not None} for t in region.tolerations]
    if cfg.cluster.topology_levels:
        spec["topologyName"] = TOPOLOGY
    return {
        "apiVersion": API,
        "kind": "ResourceFlavor",
        "metadata": metadata(region.flavor, labels={REGION_OBJECT_LABEL: region.name}),
        "spec": spec,
    }


def _flavor_quotas(team: TeamConfig, region: RegionConfig) -> dict[str, Any]:
    quota = next(q for q in team.regions if q.region == region.name)
    resources = []
    for name, amount in (("cpu", quota.cpu), ("memory", quota.memory), (GPU, quota.gpu)):
        entry: dict[str, Any] = {"name": name, "nominalQuota": amount}
        if quota.borrowing_limit is not None:
            entry["borrowingLimit"] = scaled(amount, quota.borrowing_limit)
        if quota.lending_limit is not None:
            entry["lendingLimit"] = scaled(amount, quota.lending_limit)
        resources.append(entry)
    return {"name": region.flavor, "resources": resources}


def cluster_queue(cfg: PipelineConfig, team: TeamConfig, regions: dict[str, RegionConfig]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "cohortName": COHORT,
        "namespaceSelector": {"matchLabels": {TEAM_LABEL: team.name}},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [
            {
                "coveredResources": list(COVERED_RESOURCES),
                "flavors": [_flavor_quotas(team, r) for r in team_regions(team, regions)],
            }
        ],
        "flavorFungibility": {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor"},
        "preemption": {
            "withinClusterQueue": "LowerPriority",
            "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "LowerPriority"},
        },
    }
    return {
        "apiVersion": API,
        "kind": "ClusterQueue",
        "metadata": metadata(team.name, labels={TEAM_LABEL: team.name}),
        "spec": spec,
    }


def local_queue(team: TeamConfig, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "LocalQueue",
        "metadata": metadata(LOCAL_QUEUE, namespace, labels={TEAM_LABEL: team.name}),
        "spec": {"clusterQueue": team.name},
    }


def priority_classes(cfg: PipelineConfig) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": API,
            "kind": "WorkloadPriorityClass",
            "metadata": metadata(name),
            "value": value,
            "description": f"paddle-mlops training priority {name!r} (workflow parameter priority={name})",
        }
        for name, value in cfg.cluster.priority_classes.items()
    ]


def topology(cfg: PipelineConfig) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "Topology",
        "metadata": metadata(TOPOLOGY),
        "spec": {"levels": [{"nodeLabel": label} for label in cfg.cluster.topology_levels]},
    }
