"""The generated Kueue objects admit TrainJobs the way the configuration says, as Kueue decides it.

Kueue's flavor assignment is reimplemented in tests/kueue_admission.py (kubernetes-sigs/kueue v0.19.2
pkg/scheduler/flavorassigner/flavorassigner.go); the workload is the generated TrainJob's pod as
the Trainer builds it from the runtime (paddle_mlops/lint/trainjob.py, trainer v2.3.0
plugins/jobset/builder.go), with Kueue's labels read where the integration reads them (kueue
pkg/controller/constants/constants.go QueueLabel, WorkloadPriorityClassLabel; the TrainJob's own
metadata.labels, site/content/en/docs/tasks/run/trainjobs.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from paddle_mlops.lint.trainjob import trainjob_pod_templates
from paddle_mlops_core.config import ConfigError, PipelineConfig, load_config, load_teams
from pipelines import kueue_names, train_deploy, trainjob
from pipelines.labels import TEAM_LABEL
from pipelines.platform import kueue, tenancy
from pipelines.train_step import placed_manifest
from tests.kueue_admission import Admitted, Cohort, PodSet, assign, quantity


def _cfg(*overrides: str) -> PipelineConfig:
    return load_config(overrides=list(overrides))


def _kueue(cfg: PipelineConfig) -> dict[str, dict[str, dict[str, Any]]]:
    by_kind: dict[str, dict[str, dict[str, Any]]] = {}
    for doc in kueue.render(cfg):
        by_kind.setdefault(doc["kind"], {})[doc["metadata"]["name"]] = doc
    return by_kind


def _train_manifest(cfg: PipelineConfig) -> dict[str, Any]:
    doc = train_deploy.build(cfg).to_dict()
    (train,) = [t for t in doc["spec"]["templates"] if t["name"] == "train"]
    manifest = placed_manifest(train)
    assert manifest is not None
    return manifest


def _workload(cfg: PipelineConfig) -> PodSet:
    manifest = _train_manifest(cfg)
    ((_, template),) = trainjob_pod_templates(manifest, trainjob.cluster_training_runtime(cfg))
    spec = template["spec"]
    (container,) = spec["containers"]
    requests = {k: quantity(v) for k, v in container["resources"]["requests"].items()}
    return PodSet(
        count=manifest["spec"]["trainer"]["numNodes"],
        requests=requests,
        node_selector=spec.get("nodeSelector") or {},
        affinity=spec.get("affinity") or {},
        tolerations=tuple(spec.get("tolerations") or ()),
    )


def _admit(cfg: PipelineConfig, usage: dict[tuple[str, str], dict[str, float]] | None = None):
    objects = _kueue(cfg)
    cq = objects["ClusterQueue"][cfg.cluster.team]
    return assign(cq, objects["ResourceFlavor"], list(objects["ClusterQueue"].values()), _workload(cfg), usage)


def _named(doc: dict[str, Any], name: str) -> bool:
    return doc["metadata"]["name"] == name


def _local_queue(cfg: PipelineConfig, namespace: str) -> dict[str, Any]:
    (lq,) = [d for d in kueue.render(cfg) if d["kind"] == "LocalQueue" and d["metadata"]["namespace"] == namespace]
    return lq


def _full(flavor: str, team: str, gpus: float) -> dict[tuple[str, str], dict[str, float]]:
    return {(team, flavor): {"nvidia.com/gpu": gpus}}


def test_each_team_queue_lists_its_regions_in_preference_order() -> None:
    cfg = _cfg()
    objects = _kueue(cfg)
    for team in load_teams().values():
        cq = objects["ClusterQueue"][team.name]
        (group,) = cq["spec"]["resourceGroups"]
        assert [f["name"] for f in group["flavors"]] == [
            objects["ResourceFlavor"][f["name"]]["metadata"]["name"] for f in group["flavors"]
        ]
        regions = [objects["ResourceFlavor"][f["name"]]["spec"]["nodeLabels"]["region"] for f in group["flavors"]]
        assert regions == [q.region for q in team.regions], team.name
        assert cq["spec"]["cohortName"] == kueue_names.COHORT
        assert cq["spec"]["flavorFungibility"]["whenCanBorrow"] == "TryNextFlavor"
        assert cq["spec"]["namespaceSelector"] == {"matchLabels": {TEAM_LABEL: team.name}}
        lq = next(
            d for d in kueue.render(cfg) if d["kind"] == "LocalQueue" and d["metadata"]["namespace"] == team.namespace
        )
        assert lq["spec"]["clusterQueue"] == team.name


def test_a_job_goes_to_the_first_region_that_has_room() -> None:
    cfg = _cfg()  # nlp: cn-north (4 GPUs) before cn-east (2); a job of 2 workers x 1 GPU
    assert _admit(cfg).flavor == "cn-north-a100"
    # cn-north is full: the job goes to cn-east, where it fits on the team's own quota.
    spill = _admit(cfg, _full("cn-north-a100", "nlp", 4))
    assert (spill.flavor, spill.mode) == ("cn-east-v100", "Fit")
    # search prefers cn-east; with its cn-east quota used (no borrowing there) it borrows nlp's
    # lent GPUs in cn-north, within its own borrowing limit there.
    search = _cfg("cluster.team=search")
    assert _admit(search).flavor == "cn-east-v100"
    over = _admit(search, _full("cn-east-v100", "search", 2))
    assert (over.flavor, over.mode) == ("cn-north-a100", "Borrow")
    # Both full: borrowing where the cohort has room (search lends only 1 GPU in cn-north, 2 in cn-east).
    both = _admit(cfg, {**_full("cn-north-a100", "nlp", 4), **_full("cn-east-v100", "nlp", 2)})
    assert (both.flavor, both.mode) == ("cn-east-v100", "Borrow")


def test_a_data_pinned_run_is_never_admitted_outside_its_region() -> None:
    cfg = _cfg("data.region=cn-east", "data.movable=false")
    assert _admit(cfg).flavor == "cn-east-v100"
    # Its region full: it borrows there or waits, even with cn-north empty.
    nlp_full = _full("cn-east-v100", "nlp", 2)
    borrowed = _admit(cfg, nlp_full)
    assert (borrowed.flavor, borrowed.mode) == ("cn-east-v100", "Borrow")
    everyone_full = {**nlp_full, **_full("cn-east-v100", "search", 2)}
    waiting = _admit(cfg, everyone_full)
    assert waiting.flavor is None and "doesn't match node affinity" in waiting.skipped["cn-north-a100"]
    # Movable data may go anywhere the team has room.
    assert _admit(_cfg("data.region=cn-east", "data.movable=true"), everyone_full).flavor == "cn-north-a100"


def test_an_excluded_region_is_never_used() -> None:
    cfg = _cfg("training.placement.exclude_regions=[cn-north]")
    assert _admit(cfg).flavor == "cn-east-v100"
    waiting = _admit(cfg, {**_full("cn-east-v100", "nlp", 2), **_full("cn-east-v100", "search", 2)})
    assert waiting.flavor is None


def test_impossible_placements_are_readable_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"data.region 'mars' is not a region"):
        train_deploy.build(_cfg("data.region=mars"))
    with pytest.raises(ConfigError, match=r"pins training to cn-east, but that region is excluded"):
        train_deploy.build(_cfg("data.region=cn-east", "training.placement.exclude_regions=[cn-east]"))
    with pytest.raises(ConfigError, match=r"excludes every region of team 'nlp'"):
        train_deploy.build(_cfg("training.placement.exclude_regions=[cn-north,cn-east]"))
    with pytest.raises(ConfigError, match=r"not one of cluster.priority_classes"):
        train_deploy.build(_cfg("training.placement.priority=vip"))


def test_a_region_without_team_quota_cannot_hold_pinned_data(tmp_path) -> None:
    from paddle_mlops_core.config.loader import load_regions
    from paddle_mlops_core.config.placement import allowed_regions

    team = load_teams()["search"].model_copy(update={"regions": load_teams()["search"].regions[:1]})  # cn-east only
    with pytest.raises(ConfigError) as caught:
        allowed_regions(_cfg("data.region=cn-north"), team, load_regions())
    message = str(caught.value)
    assert "not among the GPU regions of team 'search'" in message and "configs/teams/search.yaml" in message
    assert "data.movable: true" in message


def test_priority_classes_exist_and_the_run_parameter_selects_one() -> None:
    cfg = _cfg()
    classes = _kueue(cfg)["WorkloadPriorityClass"]
    assert {name: doc["value"] for name, doc in classes.items()} == cfg.cluster.priority_classes
    assert classes["urgent"]["value"] > classes["normal"]["value"] > classes["batch"]["value"]
    doc = train_deploy.build(cfg).to_dict()
    (param,) = [p for p in doc["spec"]["arguments"]["parameters"] if p["name"] == "priority"]
    assert param["enum"] == list(classes) and param["value"] == "normal"
    labels = _train_manifest(cfg)["metadata"]["labels"]
    assert labels[kueue_names.QUEUE_NAME_LABEL] == kueue_names.LOCAL_QUEUE
    assert labels[kueue_names.PRIORITY_CLASS_LABEL] == "{{workflow.parameters.priority}}"
    # What Argo substitutes for `-p priority=urgent` names an existing class.
    rendered = labels[kueue_names.PRIORITY_CLASS_LABEL].replace("{{workflow.parameters.priority}}", "urgent")
    assert rendered in classes


def test_queues_preempt_by_priority_and_reclaim_lent_quota() -> None:
    for cq in _kueue(_cfg())["ClusterQueue"].values():
        assert cq["spec"]["preemption"] == {
            "withinClusterQueue": "LowerPriority",
            "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "LowerPriority"},
        }


def test_borrowing_and_lending_limits_come_from_the_team_config() -> None:
    cq = _kueue(_cfg())["ClusterQueue"]["nlp"]
    (group,) = cq["spec"]["resourceGroups"]
    north, east = group["flavors"]
    gpu = {r["name"]: r for r in north["resources"]}["nvidia.com/gpu"]
    assert gpu["nominalQuota"] == 4 and gpu["lendingLimit"] == "2" and gpu["borrowingLimit"] == "0"
    assert {r["name"]: r for r in east["resources"]}["memory"]["borrowingLimit"] == "128Gi"
    # CEL rule of the CRD: every flavor lists exactly the covered resources, in order.
    for flavor in group["flavors"]:
        assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]


def test_the_pipeline_namespace_is_admitted_to_its_team_queue() -> None:
    cfg = _cfg()
    (ns,) = [
        d for d in tenancy.render(cfg) if d["kind"] == "Namespace" and d["metadata"]["name"] == cfg.cluster.namespace
    ]
    cq = _kueue(cfg)["ClusterQueue"][cfg.cluster.team]
    assert cq["spec"]["namespaceSelector"]["matchLabels"].items() <= ns["metadata"]["labels"].items()
    (lq,) = [
        d
        for d in kueue.render(cfg)
        if d["kind"] == "LocalQueue" and d["metadata"]["namespace"] == cfg.cluster.namespace
    ]
    assert lq["metadata"]["name"] == kueue_names.LOCAL_QUEUE and lq["spec"]["clusterQueue"] == cfg.cluster.team


@pytest.mark.parametrize("mode", ["preferred", "required"])
def test_workers_ask_to_share_one_network_block(mode: str) -> None:
    cfg = _cfg(f"training.placement.topology={mode}")
    objects = _kueue(cfg)
    (topology,) = objects["Topology"].values()
    levels = [level["nodeLabel"] for level in topology["spec"]["levels"]]
    assert levels == list(cfg.cluster.topology_levels) and levels[-1] == "kubernetes.io/hostname"
    assert all(f["spec"]["topologyName"] == topology["metadata"]["name"] for f in objects["ResourceFlavor"].values())
    manifest = _train_manifest(cfg)
    ((_, template),) = trainjob_pod_templates(manifest, trainjob.cluster_training_runtime(cfg))
    # On the pod template's annotations, where kueue jobset_controller.go PodSets reads topology requests.
    annotations = template["metadata"]["annotations"]
    assert annotations == {f"kueue.x-k8s.io/podset-{mode}-topology": cfg.training.placement.topology_level}
    assert cfg.training.placement.topology_level in levels


def test_one_cluster_queues_have_no_multikueue_check() -> None:
    """Without cluster.multikueue nothing waits for a MultiKueue check (the manager/worker split:
    tests/test_upstream_multikueue.py)."""
    objects = _kueue(_cfg())
    assert "AdmissionCheck" not in objects and "MultiKueueConfig" not in objects
    assert all("admissionChecksStrategy" not in cq["spec"] for cq in objects["ClusterQueue"].values())


def test_the_namespace_quota_admits_what_kueue_admits() -> None:
    """Every admitted pod still counts against the namespace ResourceQuota (tenancy.py); a team's Kueue
    quota plus what it may borrow must fit in it, or admitted pods would be refused at creation. Without
    a borrowing limit a queue may borrow all that the others lend in that region."""
    teams = load_teams()

    def lent(region: str, resource: str, borrower: str) -> float:
        return sum(
            quantity(getattr(q, resource)) * (q.lending_limit if q.lending_limit is not None else 1)
            for t in teams.values()
            if t.name != borrower
            for q in t.regions
            if q.region == region
        )

    for team in teams.values():
        hard = {"cpu": quantity(team.quota.cpu), "memory": quantity(team.quota.memory), "gpu": team.quota.gpu}
        for resource in hard:
            most = 0.0
            for q in team.regions:
                own = quantity(getattr(q, resource))
                others = lent(q.region, resource, team.name)
                borrow = others if q.borrowing_limit is None else min(others, own * q.borrowing_limit)
                most += own + borrow
            assert most <= hard[resource], (team.name, resource, most, hard[resource])


def test_multikueue_without_a_worker_cluster_is_a_config_error() -> None:
    from paddle_mlops_core.config.loader import load_regions

    regions = {name: r.model_copy(update={"worker_cluster": None}) for name, r in load_regions().items()}
    with pytest.raises(ConfigError, match=r"configs/regions/cn-\w+.yaml has no worker_cluster"):
        kueue.render(_cfg("cluster.multikueue=true"), regions=regions)


GPU = "nvidia.com/gpu"


def _gpus(queue: str, flavor: str, gpus: float, priority: int = 1000) -> Admitted:
    return Admitted(queue, flavor, {GPU: gpus}, priority)


def _gpu_job(gpus: float, priority: int) -> PodSet:
    return PodSet(count=1, requests={GPU: gpus}, priority=priority)


def test_quota_lent_to_another_team_is_reclaimed_only_when_no_region_fits() -> None:
    """nlp lends half of cn-north (lendingLimit 2: it keeps localQuota 2, kueue v0.19.2
    pkg/cache/scheduler/resource_node.go localQuota); search borrows it. nlp's next job is within nlp's nominal
    quota but not within what is Available, so flavorassigner.go fitsResourceQuota runs the preemption oracle
    (pkg/scheduler/preemption/preemption_oracle.go): the victims are all in search's queue, a Reclaim. With
    whenCanPreempt: TryNextFlavor the search goes on, and a region that fits without preempting wins
    (isPreferred: fit > reclaim); only when none does is the lent quota reclaimed."""
    objects = _kueue(_cfg())
    queues = list(objects["ClusterQueue"].values())
    nlp = objects["ClusterQueue"]["nlp"]
    north, east = "cn-north-a100", "cn-east-v100"
    lent = [_gpus("nlp", north, 2), _gpus("search", north, 2)]  # search: 1 of its own + 1 of nlp's lent GPUs
    pool = Cohort(queues, {("nlp", north): {GPU: 2}, ("search", north): {GPU: 2}})
    assert pool.available("nlp", north, GPU) == 1  # 4 nominal, 2 used, 1 lent out and in use by search
    assert pool.borrowing("search", north) and not pool.borrowing("nlp", north)
    job = _gpu_job(2, priority=1000)
    spill = assign(nlp, objects["ResourceFlavor"], queues, job, admitted=lent)
    assert (spill.flavor, spill.mode) == (east, "Fit") and spill.tried[north] == "Reclaim"
    east_full = [*lent, _gpus("nlp", east, 2), _gpus("search", east, 2)]
    reclaim = assign(nlp, objects["ResourceFlavor"], queues, job, admitted=east_full)
    assert (reclaim.flavor, reclaim.mode) == (north, "Reclaim")
    # reclaimWithinCohort: Any: the borrower's priority does not protect it, a lower-priority job reclaims too.
    assert assign(nlp, objects["ResourceFlavor"], queues, _gpu_job(2, 100), admitted=east_full).mode == "Reclaim"
    # What nlp does not lend (localQuota 2) stays its own: search can never get more than nominal 1 + limit 1.
    assert Cohort(queues, {}).potential("search", north, GPU) == 2
    assert assign(objects["ClusterQueue"]["search"], objects["ResourceFlavor"], queues, _gpu_job(3, 1000)).mode == (
        "NoFit"
    )


def test_borrowing_over_preemption_decides_between_regions_by_priority() -> None:
    """cn-north is full of nlp's own batch-priority jobs; in cn-east nlp fits only by borrowing. The default
    preference BorrowingOverPreemption (kueue v0.19.2 apis/kueue/v1beta2/clusterqueue_types.go
    FlavorFungibility.preference; flavorassigner.go isPreferred) takes the borrowing region rather than
    preempting; PreemptionOverBorrowing would preempt in cn-north. A job whose priority is not above the batch
    jobs has no victims there (withinClusterQueue: LowerPriority) under either preference."""
    objects = _kueue(_cfg())
    queues = list(objects["ClusterQueue"].values())
    nlp = objects["ClusterQueue"]["nlp"]
    assert "preference" not in nlp["spec"]["flavorFungibility"]  # the default, BorrowingOverPreemption
    north, east = "cn-north-a100", "cn-east-v100"
    priorities = _cfg().cluster.priority_classes
    state = [
        _gpus("nlp", north, 2, priorities["batch"]),
        _gpus("nlp", north, 2, priorities["batch"]),
        _gpus("nlp", east, 1, priorities["normal"]),
        _gpus("search", east, 1, priorities["normal"]),
    ]
    urgent = _gpu_job(2, priorities["urgent"])
    chosen = assign(nlp, objects["ResourceFlavor"], queues, urgent, admitted=state)
    assert (chosen.flavor, chosen.mode) == (east, "Borrow") and chosen.tried[north] == "Preempt"
    preempting = {**nlp, "spec": {**nlp["spec"]}}
    preempting["spec"]["flavorFungibility"] = {
        **nlp["spec"]["flavorFungibility"],
        "preference": "PreemptionOverBorrowing",
    }
    chosen = assign(preempting, objects["ResourceFlavor"], queues, urgent, admitted=state)
    assert (chosen.flavor, chosen.mode) == (north, "Preempt")
    batch = _gpu_job(2, priorities["batch"])
    for cq in (nlp, preempting):
        chosen = assign(cq, objects["ResourceFlavor"], queues, batch, admitted=state)
        assert (chosen.flavor, chosen.mode) == (east, "Borrow") and chosen.tried[north] == "NoCandidates"


# kubernetes-sigs/kueue v0.19.2 pkg/scheduler/flavorassigner/flavorassigner_test.go TestIsPreferred: Kueue's own
# expectations for isPreferred, (preemption mode, borrowing level) a vs b under a preference, run on our model.
_MODES = {"noFit": 0, "noPreemptionCandidates": 1, "preempt": 2, "reclaim": 3, "fit": 4}
IS_PREFERRED_CASES = [
    ("feature gate disabled prioritises preemption", ("fit", 0), ("preempt", 0), None, True),
    ("explicit BorrowingOverPreemption prioritises borrowing distance", ("preempt", 1), ("fit", 2),
     "BorrowingOverPreemption", False),
    ("explicit PreemptionOverBorrowing prioritises lower preemption", ("preempt", 1), ("fit", 2),
     "PreemptionOverBorrowing", True),
    ("explicit PreemptionOverBorrowing breaks borrowing ties with preemption", ("preempt", 1), ("fit", 1),
     "PreemptionOverBorrowing", False),
    ("PreemptionOverBorrowing rejects no-candidate flavor before borrowing", ("noPreemptionCandidates", 1),
     ("fit", 2), "PreemptionOverBorrowing", False),
    ("PreemptionOverBorrowing prefers fit over shallower-borrowing no-candidate", ("fit", 2),
     ("noPreemptionCandidates", 1), "PreemptionOverBorrowing", True),
    ("no-candidate flavor remains preferable to no-fit flavor", ("noPreemptionCandidates", 1), ("noFit", 0), None,
     True),
    ("no-fit flavor remains worse than no-candidate flavor", ("noFit", 0), ("noPreemptionCandidates", 1), None,
     False),
    ("no-candidate flavors retain borrowing preference", ("noPreemptionCandidates", 1),
     ("noPreemptionCandidates", 2), "PreemptionOverBorrowing", True),
    ("no-candidate flavors retain borrowing preference in reverse", ("noPreemptionCandidates", 2),
     ("noPreemptionCandidates", 1), "PreemptionOverBorrowing", False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "a", "b", "preference", "want"), IS_PREFERRED_CASES, ids=[c[0] for c in IS_PREFERRED_CASES]
)
def test_the_model_prefers_flavors_as_kueues_own_tests_expect(name, a, b, preference, want) -> None:
    from tests.kueue_admission import is_preferred

    mode_a, mode_b = (_MODES[a[0]], a[1]), (_MODES[b[0]], b[1])
    assert is_preferred(mode_a, mode_b, preference or "BorrowingOverPreemption") is want, name
