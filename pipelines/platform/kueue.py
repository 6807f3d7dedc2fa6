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

from paddle_mlops_core.config import PipelineConfig, RegionConfig, TeamConfig, load_regions, load_teams
from pipelines.kueue_names import API, COHORT
from pipelines.kueue_names import LOCAL_QUEUE as LOCAL_QUEUE  # paddle_mlops/submit.py takes it from here
from pipelines.platform import multikueue
from pipelines.platform.kueue_objects import cluster_queue, local_queue, priority_classes, resource_flavor, topology
from pipelines.platform.meta import metadata


def render(
    cfg: PipelineConfig,
    teams: dict[str, TeamConfig] | None = None,
    regions: dict[str, RegionConfig] | None = None,
) -> list[dict[str, Any]]:
    """argo/kueue.yaml: one cluster's queues, or with `cluster.multikueue` the manager's (multikueue.py)."""
    teams = load_teams() if teams is None else teams
    regions = load_regions() if regions is None else regions
    used = [r for r in regions.values() if any(q.region == r.name for t in teams.values() for q in t.regions)]
    docs: list[dict[str, Any]] = []
    if cfg.cluster.topology_levels:
        docs.append(topology(cfg))
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
