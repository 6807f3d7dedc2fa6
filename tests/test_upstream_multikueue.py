"""`cluster.multikueue: true`: the manager's install set (argo/) and each region's worker set (argo/workers/) do
what Kueue's MultiKueue code needs, as kubernetes-sigs/kueue v0.19.2 does it:

- pkg/controller/admissionchecks/multikueue/workload.go: cloneForCreate copies the Workload's metadata and spec
  (queue name, priority class) but not its admission, so the worker admits it in its own LocalQueue of the same
  name with its own flavors; nominateAndSynchronizeWorkers nominates every worker (AllAtOnce) or the dispatcher's
  nominees; bestMatchByCondition: the first worker to admit wins;
- pkg/controller/workloaddispatcher/incrementaldispatcher.go getNextNominatedWorkers: stepSize more workers a
  round, in the MultiKueueConfig's order (feature MultiKueueIncrementalDispatcherRespectConfigOrder, on by default
  in 0.19, pkg/features/kube_features.go), sorted by name without it;
- pkg/controller/jobs/trainjob/trainjob_multikueue_adapter.go SyncJob: the remote TrainJob is the local spec with
  managedBy cleared and Kueue's own runtime patch (manager kueue.x-k8s.io/manager) removed;
- pkg/cache/scheduler/clusterqueue.go: one MultiKueue AdmissionCheck per ClusterQueue, never per flavor;
  pkg/scheduler/flavorassigner/tas_flavorassigner.go: a run asking for a topology needs a flavor with one.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from paddle_mlops.lint import lint_paths
from paddle_mlops_core.config import PipelineConfig, load_config, load_regions, load_teams
from pipelines import k8s, kueue_names, train_deploy, trainjob
from pipelines.platform import kueue, multikueue
from pipelines.train_step import placed_manifest
from tests.kueue_admission import Cohort, assign, flavor_matches
from tests.test_upstream_kueue import _workload
from tests.validate_manifests import validate_documents

KUEUE_PATCH_MANAGER = "kueue.x-k8s.io/manager"  # pkg/controller/jobs/trainjob runtimePatchManagerName


def _cfg(*overrides: str) -> PipelineConfig:
    return load_config(overrides=["cluster.multikueue=true", *overrides])


def _by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[tuple[str | None, str], dict[str, Any]]]:
    out: dict[str, dict[tuple[str | None, str], dict[str, Any]]] = {}
    for doc in docs:
        out.setdefault(doc["kind"], {})[(doc["metadata"].get("namespace"), doc["metadata"]["name"])] = doc
    return out


def _named(objects: dict[tuple[str | None, str], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: doc for (_, name), doc in objects.items()}


def _workers(cfg: PipelineConfig) -> dict[str, list[dict[str, Any]]]:
    return multikueue.workers(cfg, load_teams(), load_regions())


def test_manager_and_worker_sets_validate_strictly_and_pass_lint(tmp_path: Path) -> None:
    from paddle_mlops import compile as compiler

    cfg = _cfg()
    files = compiler.render_all(cfg)
    assert {"workers/cn-north.yaml", "workers/cn-east.yaml"} <= set(files)
    assert validate_documents(files) == []
    compiler.write(tmp_path, cfg)
    assert (tmp_path / "workers" / "cn-east.yaml").is_file()
    assert lint_paths([tmp_path]) == []


def test_each_team_has_one_check_whose_config_lists_its_workers_in_region_order() -> None:
    objects = _by_kind(kueue.render(_cfg()))
    checks, configs = _named(objects["AdmissionCheck"]), _named(objects["MultiKueueConfig"])
    regions = load_regions()
    for team in load_teams().values():
        (cq,) = [d for (_, n), d in objects["ClusterQueue"].items() if n == team.name]
        strategy = cq["spec"]["admissionChecksStrategy"]["admissionChecks"]
        assert len(strategy) == 1 and "onFlavors" not in strategy[0]  # clusterqueue.go: one, for all flavors
        check = checks[strategy[0]["name"]]
        assert check["spec"]["controllerName"] == "kueue.x-k8s.io/multikueue"
        config = configs[check["spec"]["parameters"]["name"]]
        assert config["spec"]["clusters"] == [regions[q.region].worker_cluster for q in team.regions]
    for cluster in _named(objects["MultiKueueCluster"]).values():
        assert cluster["spec"]["clusterSource"]["kubeConfig"] == {
            "locationType": "Secret",
            "location": cluster["metadata"]["name"],
        }
    # No region flavors on the manager: placement is the workers'.
    assert list(_named(objects["ResourceFlavor"])) == [multikueue.FLAVOR]


def _incremental(clusters: list[str], step: int, rounds: int, respect_order: bool = True) -> list[list[str]]:
    """incrementaldispatcher.go nominateWorkers/getNextNominatedWorkers over `rounds` rounds."""
    nominated: list[str] = []
    history = []
    for _ in range(rounds):
        rest = [c for c in clusters if c not in nominated]
        if not respect_order:
            rest.sort()
        if not rest:
            break
        nominated = nominated + rest[:step]
        history.append(list(nominated))
    return history


def test_the_incremental_dispatcher_tries_the_teams_regions_in_order() -> None:
    objects = _by_kind(kueue.render(_cfg()))
    nlp = _named(objects["MultiKueueConfig"])["nlp"]["spec"]["clusters"]
    search = _named(objects["MultiKueueConfig"])["search"]["spec"]["clusters"]
    assert _incremental(nlp, 1, 3) == [["cn-north-worker"], ["cn-north-worker", "cn-east-worker"]]
    assert _incremental(search, 1, 3) == [["cn-east-worker"], ["cn-east-worker", "cn-north-worker"]]
    # Without the config order (the feature gate off) the names decide, and nlp would try cn-east first;
    # with the default step (3) or AllAtOnce both workers race from the start.
    assert _incremental(nlp, 1, 1, respect_order=False) == [["cn-east-worker"]]
    assert _incremental(nlp, 3, 1) == [["cn-north-worker", "cn-east-worker"]]


def _worker_objects(cfg: PipelineConfig, region: str) -> dict[str, dict[tuple[str | None, str], dict[str, Any]]]:
    return _by_kind(_workers(cfg)[f"workers/{region}.yaml"])


def _remote_trainjob(cfg: PipelineConfig) -> dict[str, Any]:
    """The TrainJob the manager's Kueue webhook leaves (managedBy, its own runtime patch) and what the trainjob
    adapter's SyncJob creates on a worker from it."""
    doc = train_deploy.build(cfg).to_dict()
    (train,) = [t for t in doc["spec"]["templates"] if t["name"] == "train"]
    local = placed_manifest(train)
    assert local is not None
    local["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"  # jobframework ApplyDefaultForManagedBy
    local["spec"]["runtimePatches"].append({"manager": KUEUE_PATCH_MANAGER, "trainingRuntimeSpec": {"template": {}}})
    remote = {"apiVersion": local["apiVersion"], "kind": local["kind"], "metadata": copy.deepcopy(local["metadata"])}
    remote["spec"] = copy.deepcopy(local["spec"])
    remote["spec"].pop("managedBy")
    remote["spec"]["runtimePatches"] = [
        p for p in remote["spec"]["runtimePatches"] if p["manager"] != KUEUE_PATCH_MANAGER
    ]
    return remote


@pytest.mark.parametrize("overrides", [(), ("training.placement.exclude_regions=[cn-north]",)], ids=["any", "pinned"])
def test_a_worker_admits_the_remote_copy_only_in_the_runs_regions(overrides: tuple[str, ...]) -> None:
    """The remote TrainJob keeps our placement patch (region affinity), so a worker outside the run's regions
    never admits it: its only flavor fails flavorSelector; one inside admits it on the team's quota there."""
    cfg = _cfg(*overrides)
    remote = _remote_trainjob(cfg)
    assert [p["manager"] for p in remote["spec"]["runtimePatches"]] == [trainjob.PATCH_MANAGER]
    assert "managedBy" not in remote["spec"]
    pods = _workload(cfg)
    allowed = {r.name for r in k8s.training_regions(cfg)}
    for region in ("cn-north", "cn-east"):
        objects = _worker_objects(cfg, region)
        flavors = _named(objects["ResourceFlavor"])
        queues = list(_named(objects["ClusterQueue"]).values())
        nlp = _named(objects["ClusterQueue"])["nlp"]
        result = assign(nlp, flavors, queues, pods)
        if region in allowed:
            assert result.mode == "Fit", (region, result)
        else:
            assert result.flavor is None and "doesn't match node affinity" in next(iter(result.skipped.values()))


def test_the_remote_workload_finds_its_queue_and_priority_on_every_worker() -> None:
    """cloneForCreate keeps spec.queueName and priorityClassRef and drops status.admission: each worker needs the
    LocalQueue `training` in the job's namespace, a ClusterQueue without admission checks behind it (the copy is
    admitted there, not checked again), the team label its namespaceSelector matches, and the priority classes."""
    cfg = _cfg()
    for name, docs in _workers(cfg).items():
        objects = _by_kind(docs)
        lq = objects["LocalQueue"][(cfg.cluster.namespace, kueue_names.LOCAL_QUEUE)]
        cq = _named(objects["ClusterQueue"])[lq["spec"]["clusterQueue"]]
        assert "admissionChecksStrategy" not in cq["spec"], name
        ns = objects["Namespace"][(None, cfg.cluster.namespace)]
        assert cq["spec"]["namespaceSelector"]["matchLabels"].items() <= ns["metadata"]["labels"].items()
        assert set(_named(objects["WorkloadPriorityClass"])) == set(cfg.cluster.priority_classes)
        assert (cfg.cluster.namespace, "paddle-mlops-train") in objects["ServiceAccount"]
        (runtime,) = objects["ClusterTrainingRuntime"].values()
        region = name.removeprefix(f"{multikueue.WORKERS_DIR}/").removesuffix(".yaml")
        assert runtime == trainjob.cluster_training_runtime(cfg, region)  # the manager's, and its region (below)


def test_worker_queues_hold_the_teams_quota_in_that_region_and_the_manager_the_sum() -> None:
    """The worker queue is the one-cluster queue cut to its region (quota, borrowing, lending, preemption); the
    manager's accounting queue holds what all the workers could admit for the team at once (resource_node.go
    potentialAvailable per region, summed), so it never holds back a run some worker could take."""
    cfg = _cfg()
    teams = load_teams()
    single = kueue.render(load_config())
    one_cluster = {d["metadata"]["name"]: d for d in single if d["kind"] == "ClusterQueue"}
    manager = _named(_by_kind(kueue.render(cfg))["ClusterQueue"])
    for team in teams.values():
        most = 0.0
        for quota in team.regions:
            objects = _worker_objects(cfg, quota.region)
            worker_cq = _named(objects["ClusterQueue"])[team.name]
            (flavor,) = worker_cq["spec"]["resourceGroups"][0]["flavors"]
            (expected,) = [
                f for f in one_cluster[team.name]["spec"]["resourceGroups"][0]["flavors"] if f["name"] == flavor["name"]
            ]
            assert flavor == expected
            for key in ("cohortName", "flavorFungibility", "preemption", "namespaceSelector"):
                assert worker_cq["spec"][key] == one_cluster[team.name]["spec"][key]
            pool = Cohort(list(_named(objects["ClusterQueue"]).values()), {})
            most += pool.potential(team.name, flavor["name"], "nvidia.com/gpu")
        (accounting,) = manager[team.name]["spec"]["resourceGroups"][0]["flavors"]
        gpu = {r["name"]: r for r in accounting["resources"]}["nvidia.com/gpu"]
        assert gpu["nominalQuota"] == most and "borrowingLimit" not in gpu


def test_the_manager_flavor_admits_every_run_and_supports_its_topology_request() -> None:
    cfg = _cfg()
    flavor = _named(_by_kind(kueue.render(cfg))["ResourceFlavor"])[multikueue.FLAVOR]
    assert flavor_matches(_workload(cfg), flavor)
    assert flavor_matches(_workload(_cfg("training.placement.exclude_regions=[cn-north]")), flavor)
    assert flavor["spec"]["topologyName"] == kueue_names.TOPOLOGY  # the pod template asks for a topology level


def test_the_runtime_is_installed_on_the_manager_too() -> None:
    """Trainer's webhook validates a TrainJob against its runtime and Kueue's trainjob controller builds the
    PodSets from it (trainjob_controller.go getRuntimeSpec): the manager's `kubectl apply -k argo/` applies it."""
    root = Path(__file__).resolve().parents[1]
    kustomization = yaml.safe_load((root / "argo" / "kustomization.yaml").read_text(encoding="utf-8"))
    assert "training-runtime.yaml" in kustomization["resources"]
    assert not any(r.startswith(multikueue.WORKERS_DIR) for r in kustomization["resources"])


def test_a_workers_runtime_tells_its_pods_their_region_and_the_trainjob_keeps_it() -> None:
    """The train step reads pretrained weights from its region's store (steps/runtime/weights/pretrained.py): a worker's
    runtime sets PADDLE_MLOPS_REGION on the node container. kubeflow/trainer v2.3.0
    pkg/runtime/framework/plugins/jobset/builder.go Trainer() upserts the TrainJob's trainer.env into the
    runtime container's env by name, so the variable stays unless the TrainJob names it too, which ours never does;
    the manager's runtime (one for every region) sets none."""
    from paddle_mlops_core.contracts import REGION_ENV

    def node_env(runtime: dict[str, Any]) -> dict[str, Any]:
        job = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
        (node,) = [c for c in job["template"]["spec"]["template"]["spec"]["containers"] if c["name"] == trainjob.NODE]
        return {e["name"]: e.get("value") for e in node.get("env", [])}

    cfg = _cfg()
    for name, docs in _workers(cfg).items():
        (runtime,) = [d for d in docs if d["kind"] == "ClusterTrainingRuntime"]
        assert node_env(runtime)[REGION_ENV] == name.removeprefix(f"{multikueue.WORKERS_DIR}/").removesuffix(".yaml")
    assert REGION_ENV not in node_env(trainjob.cluster_training_runtime(cfg))
    assert REGION_ENV not in {e["name"] for e in trainjob.trainjob(cfg).manifest["spec"]["trainer"]["env"]}
