"""MultiKueue (`cluster.multikueue: true`): one manager cluster queues the runs, one worker cluster per region runs
them. What each side needs, and why placement is the workers' (kubernetes-sigs/kueue v0.19.2):

- The manager creates the TrainJob. Trainer validates it against the ClusterTrainingRuntime and Kueue's trainjob
  integration builds its PodSets from the runtime (pkg/controller/jobs/trainjob/trainjob_controller.go
  getRuntimeSpec), so argo/training-runtime.yaml is applied on the manager too (argo/kustomization.yaml).
  Kueue's webhook sets `spec.managedBy: kueue.x-k8s.io/multikueue` because the queue has a MultiKueue check
  (pkg/controller/jobframework/defaults.go ApplyDefaultForManagedBy), so Trainer on the manager never runs it.
- Once the manager's ClusterQueue reserves quota, the MultiKueue check copies the Workload to the nominated
  workers: metadata and spec only (pkg/controller/admissionchecks/multikueue/workload.go cloneForCreate), so
  the worker's Kueue admits it again, in its own LocalQueue of the same name and namespace, with its own flavors:
  the manager's flavor choice does not travel. The TrainJob follows with its spec (the trainjob adapter
  trainjob_multikueue_adapter.go SyncJob: managedBy cleared, Kueue's own runtime patch removed, ours kept, so the
  region node affinity still picks the worker's flavor). The first worker to admit wins; the others' copies are
  deleted (workload.go reconcileGroup, bestMatchByCondition).
- So the workers decide placement and quota: each worker cluster holds its region's flavors and, per team, a
  ClusterQueue with the team's quota in that region (borrowing and lending between teams as in one cluster),
  no admission check. The manager's ClusterQueue per team is accounting: one flavor without node labels (any
  region: the run's affinity never excludes it) holding the most the team could run in all its regions at once,
  so the manager never holds back what some worker could admit.
- Region order: the default dispatcher (AllAtOnce) nominates every worker at once, and the first to admit
  wins, whatever the team's order. The Incremental dispatcher with `stepSize: 1` nominates one more worker per
  round, in the MultiKueueConfig's order (pkg/controller/workloaddispatcher/incrementaldispatcher.go
  getNextNominatedWorkers; MultiKueueIncrementalDispatcherRespectConfigOrder is on by default in 0.19), every
  5 minutes (incrementalDispatcherRoundTimeout) while no nominated worker admits it. Each team gets its own
  MultiKueueConfig listing its regions' workers in its preference order, and its own AdmissionCheck (a
  ClusterQueue may have only one MultiKueue check: pkg/cache/scheduler/clusterqueue.go). Kueue's configuration
  is not ours to write; `paddle-mlops preflight` checks the dispatcher (pipelines/platform/kueue_config.py).
  A run that may not use the team's first region (data pinned elsewhere, an excluded region) waits one round
  there before the next worker is nominated.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from paddle_mlops_core.config import ConfigError, PipelineConfig, RegionConfig, TeamConfig
from paddle_mlops_core.config.placement import team_regions
from pipelines import kueue_names, trainjob
from pipelines.labels import TEAM_LABEL
from pipelines.platform import kueue_objects, network, rbac, tenancy
from pipelines.platform.meta import metadata
from pipelines.service_accounts import TRAIN_SERVICE_ACCOUNT

FLAVOR = "multikueue"  # the manager's accounting flavor
WORKERS_DIR = "workers"


def check_name(team: TeamConfig) -> str:
    return f"{kueue_names.MULTIKUEUE_CHECK}-{team.name}"


def _amount(value: Any) -> Decimal:
    # Heavy, not a cycle: kubernetes.utils loads the whole API client (~0.4 s), which only a MultiKueue install uses;
    # every other import of the install set (the local run's notifications included) goes without it.
    from kubernetes.utils import parse_quantity

    return Decimal(parse_quantity(str(value)))


def _share(amount: Any, fraction: float | None) -> Decimal:
    return _amount(tenancy.scaled(amount, fraction)) if fraction is not None else _amount(amount)


def team_ceiling(team: TeamConfig, teams: dict[str, TeamConfig]) -> dict[str, Decimal]:
    """The most the team can hold in all its regions at once (per region kueue pkg/cache/scheduler/
    resource_node.go potentialAvailable: what it keeps plus what the cohort holds there, capped at its nominal
    quota plus borrowing limit), per covered resource."""
    total = {name: Decimal(0) for name in ("cpu", "memory", "gpu")}
    for own in team.regions:
        for resource in total:
            mine = _amount(getattr(own, resource))
            kept = mine - _share(getattr(own, resource), own.lending_limit) if own.lending_limit is not None else 0
            stored = mine - kept
            for other in teams.values():
                if other.name == team.name:
                    continue
                for q in other.regions:
                    if q.region == own.region:
                        stored += _share(getattr(q, resource), q.lending_limit)
            most = kept + stored
            if own.borrowing_limit is not None:
                most = min(most, mine + _share(getattr(own, resource), own.borrowing_limit))
            total[resource] += most
    return total


def _quantity(resource: str, value: Decimal) -> str | int:
    if resource == "memory":
        return f"{int(value / 2**30)}Gi"
    return int(value) if resource == "gpu" else str(int(value))


def manager_flavor(cfg: PipelineConfig) -> dict[str, Any]:
    # No node labels: Kueue's flavorSelector ignores the run's region affinity here (flavorassigner.go); the
    # worker's flavors place it. The topology is the workers' too (Kueue skips TAS on a MultiKueue queue,
    # pkg/cache/scheduler/clusterqueue.go isTASViolated), but a run asking for a topology needs a TAS flavor
    # (tas_flavorassigner.go checkPodSetAndFlavorMatchForTAS).
    spec: dict[str, Any] = {"topologyName": kueue_names.TOPOLOGY} if cfg.cluster.topology_levels else {}
    return {"apiVersion": kueue_names.API, "kind": "ResourceFlavor", "metadata": metadata(FLAVOR), "spec": spec}


def manager_cluster_queue(team: TeamConfig, teams: dict[str, TeamConfig]) -> dict[str, Any]:
    ceiling = team_ceiling(team, teams)
    resources = [
        {"name": name, "nominalQuota": _quantity(key, ceiling[key])}
        for name, key in (("cpu", "cpu"), ("memory", "memory"), (kueue_names.GPU, "gpu"))
    ]
    return {
        "apiVersion": kueue_names.API,
        "kind": "ClusterQueue",
        "metadata": metadata(team.name, labels={TEAM_LABEL: team.name}),
        "spec": {
            "namespaceSelector": {"matchLabels": {TEAM_LABEL: team.name}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": list(kueue_names.COVERED_RESOURCES),
                    "flavors": [{"name": FLAVOR, "resources": resources}],
                }
            ],
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "admissionChecksStrategy": {"admissionChecks": [{"name": check_name(team)}]},
        },
    }


def _worker_clusters(team: TeamConfig, regions: dict[str, RegionConfig]) -> list[str]:
    held = team_regions(team, regions)
    missing = [r.name for r in held if r.worker_cluster is None]
    if missing:
        raise ConfigError(
            f"cluster.multikueue is true but configs/regions/{missing[0]}.yaml has no worker_cluster (the Secret "
            "in Kueue's namespace holding that region's worker-cluster kubeconfig, key `kubeconfig`); set it for "
            "every region a team uses, or set cluster.multikueue: false"
        )
    return list(dict.fromkeys(r.worker_cluster for r in held if r.worker_cluster))


def manager(
    cfg: PipelineConfig, teams: dict[str, TeamConfig], regions: dict[str, RegionConfig]
) -> list[dict[str, Any]]:
    """The manager's MultiKueue objects beside its accounting flavor and queues: one MultiKueueCluster per worker
    cluster (kubeconfig Secret by name, in Kueue's namespace, key `kubeconfig`), per team a MultiKueueConfig in the
    team's region order and the AdmissionCheck that names it."""
    queued = [t for t in teams.values() if t.regions]
    per_team = {t.name: _worker_clusters(t, regions) for t in queued}
    clusters = list(dict.fromkeys(c for names in per_team.values() for c in names))
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": kueue_names.API,
            "kind": "MultiKueueCluster",
            "metadata": metadata(name),
            "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": name}}},
        }
        for name in clusters
    ]
    for team in queued:
        docs.append(
            {
                "apiVersion": kueue_names.API,
                "kind": "MultiKueueConfig",
                "metadata": metadata(team.name, labels={TEAM_LABEL: team.name}),
                "spec": {"clusters": per_team[team.name]},
            }
        )
        docs.append(
            {
                "apiVersion": kueue_names.API,
                "kind": "AdmissionCheck",
                "metadata": metadata(check_name(team), labels={TEAM_LABEL: team.name}),
                "spec": {
                    "controllerName": kueue_names.MULTIKUEUE_CONTROLLER,
                    "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": team.name},
                },
            }
        )
    return docs


def job_namespaces(cfg: PipelineConfig, teams: dict[str, TeamConfig]) -> dict[str, TeamConfig]:
    """Every namespace a TrainJob may be created in (it has a LocalQueue), with the team whose queue admits it."""
    out = {t.namespace: t for t in teams.values() if t.regions}
    if cfg.cluster.team in teams and teams[cfg.cluster.team].regions:
        out.setdefault(cfg.cluster.namespace, teams[cfg.cluster.team])
    return out


def worker(
    cfg: PipelineConfig, region: RegionConfig, teams: dict[str, TeamConfig], regions: dict[str, RegionConfig]
) -> list[dict[str, Any]]:
    """What one region's worker cluster needs to admit and run the copies the manager sends: the job namespaces
    (team label for the queues' namespaceSelector, restricted Pod Security), the training pods' ServiceAccount,
    the region's flavor, per team a ClusterQueue with its quota here (no admission check) and the LocalQueue of the
    same name as on the manager, the priority classes, the Topology, the ClusterTrainingRuntime (whose pods get
    PADDLE_MLOPS_REGION: the train step reads pretrained weights from this region's store) and, per job namespace,
    the training pods' NetworkPolicy admitting the pipeline's store and this region's alone."""
    here = {name: t for name, t in teams.items() if any(q.region == region.name for q in t.regions)}
    only_here = {name: t.model_copy(update={"regions": tuple(q for q in t.regions if q.region == region.name)})
                 for name, t in here.items()}  # fmt: skip
    docs: list[dict[str, Any]] = []
    for ns, team in job_namespaces(cfg, teams).items():
        labels = {**tenancy.pod_security_labels("restricted"), TEAM_LABEL: team.name}
        docs.append(tenancy.namespace(ns, labels))
        docs.append(rbac.service_account(TRAIN_SERVICE_ACCOUNT, ns, False, "training pods: no Kubernetes API access"))
        docs.append(network.training_policy(cfg, [region], ns))
    if cfg.cluster.topology_levels:
        docs.append(kueue_objects.topology(cfg))
    docs.append(kueue_objects.resource_flavor(cfg, region))
    docs.append({"apiVersion": kueue_names.API, "kind": "Cohort", "metadata": metadata(kueue_names.COHORT), "spec": {}})
    docs += kueue_objects.priority_classes(cfg)
    single = cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"multikueue": False})})
    for team in only_here.values():
        docs.append(kueue_objects.cluster_queue(single, team, regions))
    for ns, team in job_namespaces(cfg, teams).items():
        if team.name in only_here:
            docs.append(kueue_objects.local_queue(team, ns))
    docs.append(trainjob.cluster_training_runtime(cfg, region.name))  # its pods know their region's store
    return docs


def workers(
    cfg: PipelineConfig, teams: dict[str, TeamConfig], regions: dict[str, RegionConfig]
) -> dict[str, list[dict[str, Any]]]:
    """`workers/<region>.yaml` → the documents to apply on that region's worker cluster."""
    used = [r for r in regions.values() if any(q.region == r.name for t in teams.values() for q in t.regions)]
    return {f"{WORKERS_DIR}/{r.name}.yaml": worker(cfg, r, teams, regions) for r in used}
