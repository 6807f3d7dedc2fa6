"""Every NetworkPolicy selects pods the cluster really runs, and lets in the peers those pods need.

Pod labels are built the way the controllers build them, from our generated manifests:
- kserve/kserve v0.20.0 pkg/controller/v1beta1/inferenceservice/components/predictor.go
  `buildObjectMeta`: predictor pod labels = ServingRuntime ∪ InferenceService metadata.labels ∪
  predictor labels ∪ {serving.kserve.io/inferenceservice: <isvc name>, component: predictor}; the
  Knative revision template gets them (reconcilers/knative/ksvc_reconciler.go, minus only
  `networking.knative.dev/visibility`, constants.go RevisionTemplateLabelDisallowedList), and so
  does the RawDeployment pod template (reconcilers/deployment/deployment_reconciler.go, plus `app`).
- steps/runtime/release/inference_service.py names InferenceServices `<model>-<region>` and `<model>-<region>-canary`.
- kubeflow/training-operator v1.9.0 pkg/controller.v1/common/pod.go and PaddleFlow/paddle-operator
  v0.3.5 controllers/paddlejob_helper.go keep the pod template's labels and add their own.
- prometheus-operator v0.93.0 pkg/prometheus/server/operator.go `makeSelectorLabels`: the labels of
  every Prometheus server pod.
- Knative's gateway pods per networking layer (paddle_mlops_core/config/networking.py): net-istio release-1.21
  config/203-local-gateway.yaml (Istio's gateways in istio-system), net-kourier release-1.21 config/300-gateway.yaml
  (Deployment 3scale-kourier-gateway in kourier-system, label app: 3scale-kourier-gateway), net-contour release-1.21
  config/contour/external.yaml and internal.yaml (DaemonSet envoy, label app: envoy, in contour-external and
  contour-internal).
Selector and policy semantics are Kubernetes' (networking.k8s.io/v1 NetworkPolicy, LabelSelector).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from paddle_mlops.compile import default_compile_config
from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.config.loader import load_config, load_regions, load_task_configs
from paddle_mlops_core.contracts import PART_OF, SERVING_PORT
from pipelines import paddlejob, trainjob
from pipelines.platform import network
from steps.runtime.release import inference_service as isvc

ROOT = Path(__file__).resolve().parents[1]
NS_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class Pod:
    what: str
    namespace: str
    labels: dict[str, str] = field(default_factory=dict)


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """metav1.LabelSelector semantics; an empty selector selects everything."""
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for exp in selector.get("matchExpressions", []):
        key, op, values = exp["key"], exp["operator"], exp.get("values", [])
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def _peer_matches(peer: dict[str, Any], policy_ns: str, pod: Pod) -> bool:
    ns_labels = {NS_LABEL: pod.namespace}
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], ns_labels):
            return False
    elif pod.namespace != policy_ns:  # a bare podSelector means the policy's own namespace
        return False
    return selects(peer.get("podSelector", {}), pod.labels)


def ingress_allowed(policy: dict[str, Any], source: Pod, port: int) -> bool:
    """Is TCP traffic from `source` to `port` of a selected pod allowed by this policy?"""
    spec, policy_ns = policy["spec"], policy["metadata"]["namespace"]
    for rule in spec.get("ingress", []):
        ports = rule.get("ports")
        if ports and not any(p.get("protocol", "TCP") == "TCP" and p.get("port") == port for p in ports):
            continue
        peers = rule.get("from")
        if not peers or any(_peer_matches(peer, policy_ns, source) for peer in peers):
            return True
    return False


# ------------------------------------------------------------------ the pods the cluster runs


def training_pods(cfg: PipelineConfig) -> list[Pod]:
    """Node pods of the TrainJob (the runtime's pod template, plus the labels jobset v0.12.0
    jobset_controller.go labelAndAnnotateObject, the Job controller and Kueue's podset patch add), and
    worker pods of the PaddleJob either legacy operator creates from our pod template."""
    ns = cfg.cluster.namespace
    runtime = trainjob.cluster_training_runtime(cfg)
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    added = {
        "jobset.sigs.k8s.io/jobset-name": "wf-train-abc",
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "batch.kubernetes.io/job-name": "wf-train-abc-node-0",
        "kueue.x-k8s.io/podset": "node",
    }
    pods = [Pod("trainjob node", ns, {**node["metadata"]["labels"], **added})]
    for operator, added in (
        (
            "kubeflow",
            {"training.kubeflow.org/job-name": "wf-train-abc", "training.kubeflow.org/replica-type": "worker"},
        ),
        ("paddle", {"paddle-res-name": "wf-train-abc-worker-0", "paddle-res-type": "worker"}),
    ):
        backend = "kubeflow-paddlejob" if operator == "kubeflow" else "paddle-operator"
        job = cfg.model_copy(update={"training": cfg.training.model_copy(update={"backend": backend})})
        manifest = paddlejob.build_paddlejob(job).manifest
        spec = manifest["spec"]
        template = (spec["paddleReplicaSpecs"]["Worker"] if operator == "kubeflow" else spec["worker"])["template"]
        pods.append(Pod(f"{operator} worker", ns, {**template["metadata"]["labels"], **added}))
    return pods


def predictor_pods(cfg: PipelineConfig) -> list[Pod]:
    """The predictor pod of every InferenceService the rollout can create, for every configured task
    (configs/tasks/), in both deployment modes."""
    pods = []
    for task_cfg in load_task_configs().values():
        pods += _task_predictor_pods(task_cfg)
    return pods


def _task_predictor_pods(cfg: PipelineConfig) -> list[Pod]:
    pods = []
    for region in load_regions().values():
        for name in (isvc.service_name(cfg, region), isvc.canary_name(cfg, region)):
            body = isvc.build_inference_service(
                cfg, region, "s3://models/m/1", "img@sha256:" + "0" * 64, "1", name=name
            )
            labels = {
                **body["metadata"].get("labels", {}),
                **body["spec"]["predictor"].get("labels", {}),
                "serving.kserve.io/inferenceservice": name,
                "component": "predictor",
            }
            labels.pop("networking.knative.dev/visibility", None)
            knative = {
                **labels,
                "serving.knative.dev/revision": f"{name}-predictor-00001",
                "app": f"{name}-predictor-00001",
            }
            raw = {**labels, "app": f"isvc.{name}-predictor"}
            pods += [
                Pod(f"{name} (Serverless)", cfg.cluster.namespace, knative),
                Pod(f"{name} (Raw)", cfg.cluster.namespace, raw),
            ]
    return pods


PROMETHEUS = Pod(
    "kube-prometheus-stack Prometheus",
    network.MONITORING_NAMESPACE,
    {
        "app.kubernetes.io/managed-by": "prometheus-operator",
        "app.kubernetes.io/name": "prometheus",
        "app.kubernetes.io/instance": "kube-prometheus-stack-prometheus",
        "operator.prometheus.io/name": "kube-prometheus-stack-prometheus",
        "prometheus": "kube-prometheus-stack-prometheus",
    },
)
ACTIVATOR = Pod("Knative activator", "knative-serving", {"app": "activator"})
GATEWAY = Pod("Istio ingress gateway", "istio-system", {"app": "istio-ingressgateway"})
STRANGER = Pod("some other pod of the monitoring namespace", network.MONITORING_NAMESPACE, {"app": "grafana"})
KOURIER_GATEWAY = Pod("Kourier gateway", "kourier-system", {"app": "3scale-kourier-gateway"})
CONTOUR_ENVOYS = [Pod(f"Contour envoy ({ns})", ns, {"app": "envoy"}) for ns in ("contour-external", "contour-internal")]
GATEWAYS = {"istio": [GATEWAY], "kourier": [KOURIER_GATEWAY], "contour": CONTOUR_ENVOYS}


# ------------------------------------------------------------------ checks (also run on HEAD's manifests)


def check_policies(policies: list[dict[str, Any]], cfg: PipelineConfig) -> list[str]:
    """Problems: a policy that selects none of the project's pods, or shuts out a peer they need."""
    problems: list[str] = []
    by_name = {p["metadata"]["name"]: p for p in policies}
    train = by_name["paddle-mlops-train"]
    serve = by_name[network.PREDICTORS_POLICY]
    for pod in training_pods(cfg):
        if not selects(train["spec"]["podSelector"], pod.labels):
            problems.append(f"{train['metadata']['name']} does not select the {pod.what} pod")
    if cfg.training.metrics_port and not ingress_allowed(train, PROMETHEUS, cfg.training.metrics_port):
        problems.append(f"{train['metadata']['name']} blocks Prometheus from port {cfg.training.metrics_port}")
    for pod in predictor_pods(cfg):
        if not selects(serve["spec"]["podSelector"], pod.labels):
            problems.append(f"{serve['metadata']['name']} does not select {pod.what}")
    for peer in (PROMETHEUS, ACTIVATOR, GATEWAY):
        if not ingress_allowed(serve, peer, SERVING_PORT):
            problems.append(f"{serve['metadata']['name']} blocks {peer.what} from port {SERVING_PORT}")
    return problems


@pytest.fixture(scope="module")
def cfg() -> PipelineConfig:
    return default_compile_config()


def test_generated_policies_select_real_pods_and_admit_their_peers(cfg: PipelineConfig) -> None:
    docs = [d for d in yaml.safe_load_all((ROOT / "argo" / "network-policies.yaml").read_text()) if d]
    assert check_policies(docs, cfg) == []
    assert check_policies(network.render(cfg), cfg) == []


def test_the_check_catches_the_policies_of_issue_15(cfg: PipelineConfig) -> None:
    """Before #15 the predictor policy selected the model name (no InferenceService has it) and the
    training policy admitted replicas only."""
    train, serve, *_ = network.render(cfg)
    serve["spec"]["podSelector"] = {"matchLabels": {"serving.kserve.io/inferenceservice": cfg.serving.model_name}}
    train["spec"]["ingress"] = train["spec"]["ingress"][:1]
    problems = check_policies([train, serve], cfg)
    assert any("does not select" in p and "predictor" in p for p in problems)
    assert any("blocks Prometheus from port" in p for p in problems)


def test_training_policy_admits_prometheus_on_the_metrics_port_only(cfg: PipelineConfig) -> None:
    policy = network.training_policy(cfg)
    port = cfg.training.metrics_port
    assert port, "the compiled config exports training metrics"
    assert ingress_allowed(policy, PROMETHEUS, port)
    assert not ingress_allowed(policy, PROMETHEUS, paddlejob.KUBEFLOW_PORT)
    assert not ingress_allowed(policy, STRANGER, port)
    worker = training_pods(cfg)[0]
    assert ingress_allowed(policy, worker, paddlejob.KUBEFLOW_PORT)  # collectives between replicas


def test_no_metrics_port_means_no_prometheus_rule(cfg: PipelineConfig) -> None:
    off = cfg.model_copy(update={"training": cfg.training.model_copy(update={"metrics_port": 0})})
    policy = network.training_policy(off)
    assert not ingress_allowed(policy, PROMETHEUS, 9100)


def test_serving_policy_keeps_other_pods_out(cfg: PipelineConfig) -> None:
    policy = network.serving_policy(cfg)
    assert not ingress_allowed(policy, STRANGER, SERVING_PORT)
    assert not ingress_allowed(policy, PROMETHEUS, 9999)
    mlflow = Pod(
        "MLflow",
        cfg.cluster.namespace,
        {**PART_OF, "app.kubernetes.io/name": "mlflow"},
    )
    assert not selects(policy["spec"]["podSelector"], mlflow.labels)
    other_model = Pod("another model's predictor", cfg.cluster.namespace, {
        **PART_OF, "app.kubernetes.io/name": "other",
        "serving.kserve.io/inferenceservice": "other-cn-north",
    })  # fmt: skip
    assert not selects(policy["spec"]["podSelector"], other_model.labels)


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({}, {}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["x", "y"]}]}, {"a": "y"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["x"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "1"}, False),
    ],
)
def test_label_selector_semantics(selector: dict[str, Any], labels: dict[str, str], expected: bool) -> None:
    assert selects(selector, labels) is expected


def test_every_policy_of_the_install_set_selects_a_pod_it_is_for(cfg: PipelineConfig) -> None:
    """Beyond network-policies.yaml: the BuildKit daemon's policy selects the daemon's own pods and
    admits the build-image step (a workflow pod of the pipeline namespace) on the daemon port, and
    nothing from another namespace."""
    from pipelines.platform import buildkit

    policies = [
        d
        for path in sorted((ROOT / "argo").glob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if d and d.get("kind") == "NetworkPolicy"
    ]
    names = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in policies}
    assert names == {
        (cfg.cluster.namespace, "paddle-mlops-train"),
        (cfg.cluster.namespace, network.PREDICTORS_POLICY),
        *((cfg.cluster.namespace, f"{network.PREDICTORS_POLICY}-{r}") for r in load_regions()),
        (cfg.cluster.build_namespace, buildkit.NAME),
    }, "a new NetworkPolicy needs its own selection check here (per-region ones: test_network_region_stores.py)"
    (policy,) = [p for p in policies if p["metadata"]["name"] == buildkit.NAME]
    daemon = buildkit.deployment(cfg)["spec"]["template"]["metadata"]["labels"]
    assert selects(policy["spec"]["podSelector"], daemon)
    build_step = Pod("build-image step", cfg.cluster.namespace, {"workflows.argoproj.io/workflow": "train-deploy-x"})
    assert ingress_allowed(policy, build_step, buildkit.PORT)
    assert not ingress_allowed(policy, Pod("elsewhere", "default", {}), buildkit.PORT)


def _with_serving(cfg: PipelineConfig, **serving: Any) -> PipelineConfig:
    return cfg.model_copy(update={"serving": cfg.serving.model_validate({**cfg.serving.model_dump(), **serving})})


@pytest.mark.parametrize("layer", sorted(GATEWAYS))
def test_each_networking_layers_gateway_reaches_the_predictors(cfg: PipelineConfig, layer: str) -> None:
    """With Kourier or Contour the gateway pods send requests straight to the predictors once the activator leaves
    the path: the policy must admit that layer's namespaces (and the activator's), and not another layer's."""
    policy = network.serving_policy(_with_serving(cfg, networking_layer=layer))
    for gateway in GATEWAYS[layer]:
        assert ingress_allowed(policy, gateway, SERVING_PORT), gateway.what
    assert ingress_allowed(policy, ACTIVATOR, SERVING_PORT)
    for other, pods in GATEWAYS.items():
        if other != layer:
            assert not any(ingress_allowed(policy, pod, SERVING_PORT) for pod in pods), other


def test_a_kourier_install_is_dropped_by_the_istio_default_and_admitted_when_configured(cfg: PipelineConfig) -> None:
    """The policy of issue #39: istio-system only. A Kourier cluster left at the default loses the gateway's traffic."""
    assert cfg.serving.networking_layer == "istio"
    assert not ingress_allowed(network.serving_policy(cfg), KOURIER_GATEWAY, SERVING_PORT)
    kourier = load_config(overrides=["serving.networking_layer=kourier"])
    assert ingress_allowed(network.serving_policy(kourier), KOURIER_GATEWAY, SERVING_PORT)
    custom = _with_serving(cfg, gateway_namespaces=("envoy-gateway-system",))
    gateway = Pod("Envoy Gateway", "envoy-gateway-system", {"app": "envoy"})
    assert ingress_allowed(network.serving_policy(custom), gateway, SERVING_PORT)
    assert not ingress_allowed(network.serving_policy(custom), GATEWAY, SERVING_PORT)
