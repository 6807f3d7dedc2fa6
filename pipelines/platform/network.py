"""NetworkPolicies for the pods that hold data or models: training replicas and serving predictors.

A NetworkPolicy cannot name a job created at run time, so "same job" is approximated by "training
pods of this namespace" (label `paddle-mlops/component: train` on the PaddleJob pod template);
besides them only Prometheus may reach them, on the metrics port. Destinations come from the
configured in-cluster URLs (`storage.endpoint_url`, `mlflow.tracking_uri`, each region's
`store_endpoint_url`, of the form http://<service>.<namespace>.svc:<port>).

Stores, region by region (paddle_mlops_core/config/region_store_rules.py): a predictor reads its model from its own
region's store only, so the predictors' policy lets nothing out but DNS and one policy per region (selecting that
region's predictors by the `paddle-mlops/region` label KServe copies from the InferenceService) admits that region's
store. Training pods write checkpoints to the pipeline's store and read pretrained weights from the store of the
region they train in; on one cluster Kueue picks that region at admission and labels no pod with it, so their policy
admits the pipeline's store and every region's; a MultiKueue worker's training pods are all its region's, and its
policy admits the pipeline's store and that region's alone (pipelines/platform/multikueue.py).
tests/test_upstream_network_policies.py checks that each policy selects the pods the operators and KServe really
create.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from paddle_mlops_core.config import PipelineConfig, RegionConfig
from paddle_mlops_core.config.loader import load_regions, load_task_configs
from paddle_mlops_core.config.region_store_rules import store_endpoint
from paddle_mlops_core.contracts import PART_OF, REGION_OBJECT_LABEL, SERVING_PORT
from pipelines.labels import TRAIN_POD_LABELS
from pipelines.platform.meta import metadata

# prometheus-operator labels every Prometheus server pod so (v0.93.0 pkg/prometheus/server/operator.go
# makeSelectorLabels); kube-prometheus-stack's Prometheus runs in MONITORING_NAMESPACE.
PROMETHEUS_POD_LABELS = {"app.kubernetes.io/name": "prometheus"}
# KServe labels every predictor pod with the InferenceService's name (constants.go
# InferenceServicePodLabelKey); the names vary per region and canary, so the policy selects by the
# labels our InferenceServices carry, which KServe copies onto the pods (predictor.go buildObjectMeta).
ISVC_POD_LABEL = "serving.kserve.io/inferenceservice"
# Where Prometheus comes from; requests come from `serving.ingress_namespaces()` (Knative's activator and the
# networking layer's gateway namespaces, paddle_mlops_core/config/networking.py).
MONITORING_NAMESPACE = "monitoring"
NAMESPACE_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class Endpoint:
    """An in-cluster service: where egress must be allowed."""

    service: str
    namespace: str | None
    port: int


def endpoint(url: str | None, default_port: int) -> Endpoint | None:
    """`http://minio.minio.svc:9000` → Endpoint('minio', 'minio', 9000); None when no URL is set."""
    if not url:
        return None
    parsed = urlparse(url)
    host = parsed.hostname or ""
    parts = host.split(".")
    ns = parts[1] if len(parts) >= 3 and parts[2] == "svc" else None
    return Endpoint(parts[0], ns, parsed.port or default_port)


def _dns() -> dict[str, Any]:
    return {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: "kube-system"}},
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }
        ],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }


def _egress_to(target: Endpoint, pod_labels: dict[str, str]) -> dict[str, Any]:
    """To the service's namespace on its port; without a namespace in the URL, the port anywhere."""
    rule: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": target.port}]}
    if target.namespace:
        peer: dict[str, Any] = {"namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: target.namespace}}}
        if pod_labels:
            peer["podSelector"] = {"matchLabels": pod_labels}
        rule["to"] = [peer]
    return rule


def _stores(urls: list[str | None]) -> list[dict[str, Any]]:
    """Egress to each object store endpoint in `urls`, once each (a rule admits the service's namespace and port:
    two stores are told apart by their namespaces)."""
    rules = [_egress_to(t, {}) for url in urls if (t := endpoint(url, 9000)) is not None]
    return [rule for i, rule in enumerate(rules) if rule not in rules[:i]]


def _mlflow(cfg: PipelineConfig) -> list[dict[str, Any]]:
    tracking = endpoint(cfg.mlflow.tracking_uri, 5000)
    return [_egress_to(tracking, {"app.kubernetes.io/name": "mlflow"})] if tracking else []


def _prometheus(port: int | None) -> dict[str, Any]:
    """Ingress from the monitoring namespace's Prometheus pods, on `port` only when given."""
    peer = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: MONITORING_NAMESPACE}},
        "podSelector": {"matchLabels": dict(PROMETHEUS_POD_LABELS)},
    }
    rule: dict[str, Any] = {"from": [peer]}
    if port:
        rule["ports"] = [{"protocol": "TCP", "port": port}]
    return rule


PREDICTORS_POLICY = "paddle-mlops-predictors"
TRAINING_POLICY = "paddle-mlops-train"


def predictor_selector(cfg: PipelineConfig) -> dict[str, Any]:
    """Every predictor pod of every configured task's model (configs/tasks/) in every region, stable and canary
    (one InferenceService each, named `<model>-<region>[-canary]`): labels set on the InferenceService, plus
    KServe's own."""
    # Every loaded configuration names its model (config/task_rules.py fill_defaults: ernie-<task> when unset).
    served = [cfg.serving.model_name, *(t.serving.model_name for t in load_task_configs().values())]
    names = sorted({name for name in served if name is not None})
    return {
        "matchLabels": dict(PART_OF),
        "matchExpressions": [
            {"key": "app.kubernetes.io/name", "operator": "In", "values": names},
            {"key": ISVC_POD_LABEL, "operator": "Exists"},
        ],
    }


def training_policy(
    cfg: PipelineConfig, regions: list[RegionConfig] | None = None, namespace: str | None = None
) -> dict[str, Any]:
    """The training pods of `namespace` (cluster.namespace): each other, Prometheus in; DNS, MLflow, the pipeline's
    store and the stores of `regions` (every region: one cluster's pods may be admitted in any) out."""
    regions = list(load_regions().values()) if regions is None else regions
    stores = [cfg.storage.endpoint_url, *(store_endpoint(cfg, r) for r in regions)]
    same_job = [{"podSelector": {"matchLabels": dict(TRAIN_POD_LABELS)}}]
    # Collective (NCCL/gloo) and parameter-server traffic between replicas; Prometheus on the metrics port.
    ingress: list[dict[str, Any]] = [{"from": same_job}]
    if cfg.training.metrics_port:
        ingress.append(_prometheus(cfg.training.metrics_port))
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(TRAINING_POLICY, namespace or cfg.cluster.namespace),
        "spec": {
            "podSelector": {"matchLabels": dict(TRAIN_POD_LABELS)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": [_dns(), *_stores(stores), *_mlflow(cfg), {"to": same_job}],
        },
    }


def serving_policy(cfg: PipelineConfig) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(PREDICTORS_POLICY, cfg.cluster.namespace),
        "spec": {
            "podSelector": predictor_selector(cfg),
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {
                    "from": [
                        # Requests arrive through Knative's activator or the networking layer's gateway pods.
                        *(
                            {"namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: ns}}}
                            for ns in cfg.serving.ingress_namespaces()
                        ),
                        # The rollout step's canary probe runs in an Argo workflow pod of this namespace.
                        {
                            "podSelector": {
                                "matchExpressions": [{"key": "workflows.argoproj.io/workflow", "operator": "Exists"}]
                            }
                        },
                    ]
                },
                # Prometheus scrapes the model server's /metrics on the serving port.
                _prometheus(SERVING_PORT),
            ],
            # Names resolve; the model comes from the region's store (region_store_policy); nothing else leaves.
            "egress": [_dns()],
        },
    }


def region_store_policy(cfg: PipelineConfig, region: RegionConfig) -> dict[str, Any]:
    """`region`'s predictors (the label KServe copies from the InferenceService) may reach its store: its own
    (configs/regions store_endpoint_url), else the pipeline's."""
    selector = predictor_selector(cfg)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(f"{PREDICTORS_POLICY}-{region.name}", cfg.cluster.namespace),
        "spec": {
            "podSelector": {**selector, "matchLabels": {**selector["matchLabels"], REGION_OBJECT_LABEL: region.name}},
            "policyTypes": ["Egress"],
            "egress": _stores([store_endpoint(cfg, region)]),
        },
    }


def render(cfg: PipelineConfig) -> list[dict[str, Any]]:
    regions = sorted(load_regions().values(), key=lambda r: r.name)
    return [training_policy(cfg), serving_policy(cfg), *(region_store_policy(cfg, r) for r in regions)]
