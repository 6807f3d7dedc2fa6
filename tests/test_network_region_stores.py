"""Each region's pods may reach exactly the stores they read (#60 item 3).

NetworkPolicies are unions (networking.k8s.io/v1: a pod selected by several policies may do what any of them
admits), so what a pod may reach is computed over every policy that selects it. The predictor pods' labels are the
InferenceService's, which KServe copies onto them (kserve/kserve v0.20.0
pkg/controller/v1beta1/inferenceservice/components/predictor.go buildObjectMeta), so the `paddle-mlops/region` label
of steps/runtime/release/inference_service.py reaches the pod. A MultiKueue worker's runtime sets the same label on
its node pods (jobset keeps the pod template's labels: jobset v0.12.0 jobset_controller.go labelAndAnnotateObject).
"""

from __future__ import annotations

from typing import Any

import pytest
from test_upstream_network_policies import NS_LABEL, Pod, _task_predictor_pods, selects, training_pods

from paddle_mlops.compile import default_compile_config
from paddle_mlops_core.config import PipelineConfig, load_regions, load_teams
from paddle_mlops_core.contracts import REGION_OBJECT_LABEL
from pipelines.platform import multikueue, network

PIPELINE_STORE = Pod("the pipeline's MinIO", "minio", {"app": "minio"})
STORES = {
    "cn-east": Pod("cn-east's MinIO", "minio-cn-east", {"app": "minio"}),
    "cn-north": Pod("cn-north's MinIO", "minio-cn-north", {"app": "minio"}),
}


def _to(rule: dict[str, Any], policy_ns: str, dest: Pod, port: int) -> bool:
    ports = rule.get("ports")
    if ports and not any(p.get("protocol", "TCP") == "TCP" and p.get("port") == port for p in ports):
        return False
    peers = rule.get("to")
    if not peers:
        return True
    for peer in peers:
        if "namespaceSelector" in peer:
            if not selects(peer["namespaceSelector"], {NS_LABEL: dest.namespace}):
                continue
        elif dest.namespace != policy_ns:
            continue
        if selects(peer.get("podSelector", {}), dest.labels):
            return True
    return False


def reachable(policies: list[dict[str, Any]], pod: Pod, dest: Pod, port: int = 9000) -> bool:
    """May `pod` send to `dest` on `port`: every policy with Egress selecting it, any of their rules."""
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == pod.namespace
        and "Egress" in p["spec"]["policyTypes"]
        and selects(p["spec"]["podSelector"], pod.labels)
    ]
    assert selecting, f"no policy restricts the egress of {pod.what}"
    return any(_to(r, p["metadata"]["namespace"], dest, port) for p in selecting for r in p["spec"].get("egress", []))


@pytest.fixture(scope="module")
def cfg() -> PipelineConfig:
    return default_compile_config()


def test_shipped_regions_name_their_own_store_endpoint_and_secret() -> None:
    regions = load_regions()
    stores = {(r.store, r.store_endpoint_url, r.store_credentials_secret) for r in regions.values()}
    assert len(stores) == len(regions) and all(all(s) for s in stores)


def test_each_regions_predictors_reach_their_own_store_only(cfg: PipelineConfig) -> None:
    policies = network.render(cfg)
    for region in load_regions().values():
        pods = [p for p in _task_predictor_pods(cfg) if p.labels.get(REGION_OBJECT_LABEL) == region.name]
        assert pods
        for pod in pods:
            assert reachable(policies, pod, STORES[region.name]), pod.what
            others = [s for name, s in STORES.items() if name != region.name]
            assert not any(reachable(policies, pod, s) for s in [PIPELINE_STORE, *others]), pod.what


def test_a_region_without_its_own_store_reads_the_pipelines(cfg: PipelineConfig) -> None:
    region = load_regions()["cn-east"].model_copy(update={"store": None, "store_endpoint_url": None})
    rules = network.region_store_policy(cfg, region)["spec"]["egress"]
    assert rules == network._stores([cfg.storage.endpoint_url])


def test_training_pods_reach_the_pipeline_store_and_every_regions(cfg: PipelineConfig) -> None:
    """One cluster: Kueue picks the region at admission and labels no pod with it, so a training pod may read the
    weights of any region it can be admitted in, and writes checkpoints to the pipeline's store."""
    policies = network.render(cfg)
    for pod in training_pods(cfg):
        assert reachable(policies, pod, PIPELINE_STORE), pod.what
        assert all(reachable(policies, pod, s) for s in STORES.values()), pod.what
        assert not reachable(policies, pod, Pod("another MinIO", "minio-elsewhere", {"app": "minio"})), pod.what


def test_a_multikueue_workers_training_pods_reach_its_region_store_and_the_pipelines_only(cfg: PipelineConfig) -> None:
    mk = cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"multikueue": True})})
    for path, docs in multikueue.workers(mk, load_teams(), load_regions()).items():
        region = path.removeprefix(f"{multikueue.WORKERS_DIR}/").removesuffix(".yaml")
        policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
        (runtime,) = [d for d in docs if d["kind"] == "ClusterTrainingRuntime"]
        template = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        assert template["metadata"]["labels"][REGION_OBJECT_LABEL] == region
        for ns in multikueue.job_namespaces(mk, load_teams()):
            pod = Pod(f"{region} trainer in {ns}", ns, template["metadata"]["labels"])
            assert reachable(policies, pod, PIPELINE_STORE) and reachable(policies, pod, STORES[region])
            assert not any(reachable(policies, pod, s) for name, s in STORES.items() if name != region)
