"""Kueue: the queues, quotas, priorities and regions every TrainJob is admitted through (argo/kueue.yaml).

From `configs/regions/` and `configs/teams/`:
- one ResourceFlavor per region × GPU type (node labels `region`, `gpu-type`, `cost-tier`; the
  region's tolerations, which Kueue adds to the pods it admits there; the network Topology);
- one ClusterQueue per team, all in one Cohort: its regions' flavors in the team's preference order
  with nominal quota and borrowing/lending limits. `whenCanBorrow: TryNextFlavor` makes a job that
  would have to borrow in the first region try the next region where it fits on the team's own
  quota first (kueue pkg/scheduler/flavorassigner/flavorassigner.go walks the flavors in list
  order); preemption within the queue by priority, reclaim of lent quota within the cohort;
- a LocalQueue `training` in every team namespace (and in the pipeline namespace, for cluster.team);
- the WorkloadPriorityClasses a run picks with its `priority` parameter;
- the Topology whose levels TrainJobs ask to share (Topology Aware Scheduling);
- with `cluster.multikueue` this file is the manager's: an accounting flavor and ClusterQueue per team, the
  MultiKueueClusters, per team a MultiKueueConfig and AdmissionCheck; each region's worker cluster gets
  argo/workers/<region>.yaml with the flavors and queues that place and run the jobs (multikueue.py says why).

The namespace ResourceQuota and the PriorityClass (tenancy.py) stay for what Kueue does not
manage (workflow pods, serving); docs/training.md says which limit applies where.
"""

from __future__ import annotations

from typing import Any

from paddle_mlops.config import PipelineConfig, RegionConfig, TeamConfig, load_regions, load_teams
from paddle_mlops.config.placement import team_regions
from pipelines.platform.meta import metadata
from pipelines.platform.tenancy import scaled

API = "kueue.x-k8s.io/v1beta2"
COHORT = "paddle-mlops"
LOCAL_QUEUE = "training"
TOPOLOGY = "paddle-mlops-network"
MULTIKUEUE_CHECK = "multikueue"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
TEAM_LABEL = "paddle-mlops/team"
GPU = "nvidia.com/gpu"
COVERED_RESOURCES = ("cpu", "memory", GPU)
# Labels Kueue reads on a job (kueue pkg/controller/constants/constants.go QueueLabel, WorkloadPriorityClassLabel).
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"


def resource_flavor(cfg: PipelineConfig, region: RegionConfig) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": region.node_selector()}
    if region.tolerations:
        spec["tolerations"] = [{k: v for k, v in t.model_dump().items() if v is not None} for t in region.tolerations]
    if cfg.cluster.topology_levels:
        spec["topologyName"] = TOPOLOGY
    return {
        "apiVersion": API,
        "kind": "ResourceFlavor",
        "metadata": metadata(region.flavor, labels={"paddle-mlops/region": region.name}),
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


def render(
    cfg: PipelineConfig,
    teams: dict[str, TeamConfig] | None = None,
    regions: dict[str, RegionConfig] | None = None,
) -> list[dict[str, Any]]:
    teams = load_teams() if teams is None else teams
    regions = load_regions() if regions is None else regions
    used = [r for r in regions.values() if any(q.region == r.name for t in teams.values() for q in t.regions)]
    docs: list[dict[str, Any]] = []
    if cfg.cluster.topology_levels:
        docs.append(topology(cfg))
    from pipelines.platform import multikueue

    if cfg.cluster.multikueue:
        docs.append(multikueue.manager_flavor(cfg))
    else:
        docs += [resource_flavor(cfg, r) for r in used]
        docs.append({"apiVersion": API, "kind": "Cohort", "metadata": metadata(COHORT), "spec": {}})
    docs += priority_classes(cfg)
    for team in teams.values():
        if not team.regions:
            continue
        if cfg.cluster.multikueue:
            docs.append(multikueue.manager_cluster_queue(team, teams))
        else:
            docs.append(cluster_queue(cfg, team, regions))
        docs.append(local_queue(team, team.namespace))
        if team.name == cfg.cluster.team and cfg.cluster.namespace != team.namespace:
            docs.append(local_queue(team, cfg.cluster.namespace))
    if cfg.cluster.multikueue:
        docs += multikueue.manager(cfg, teams, regions)
    return docs
