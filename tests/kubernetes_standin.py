"""A stand-in of the Kubernetes API for `paddle-mlops preflight` tests: the API classes of the
official client, answering with its model objects from a `Cluster`, shaped like what the upstream
installs create:

- argo-workflows v4.1.2 manifests/base/workflow-controller/workflow-controller-deployment.yaml
  (image quay.io/argoproj/workflow-controller), config/controller.go parseConfigMap (a `config` key
  or one key per setting), cmd/workflow-controller/main.go (`--configmap`).
- argo-events v1.9.11 manifests/install.yaml (Deployment controller-manager, args [controller];
  ConfigMap argo-events-controller-config, key controller-config.yaml, eventBus.jetstream.versions;
  v1.9.9 lists 2.10.10 instead of 2.10.29), pkg/reconciler/config.go GetJetStreamVersion (exact
  match), manifests/base/crds/argoproj.io_eventbus.yaml (plural `eventbus`).
- kserve v0.20.0 config/manager/manager.yaml; kyverno v1.19.0 charts/kyverno/values.yaml (its
  version label is the chart's, 3.9.0); prometheus-operator v0.93.0
  example/rbac/prometheus-operator/prometheus-operator-deployment.yaml; training-operator v1.9.0
  manifests/overlays/standalone/kustomization.yaml (tag v1-5170a36); trainer v2.3.0
  manifests/base/manager (kubeflow-system); jobset v0.12.0 and kueue v0.19.2 release manifests
  (registry.k8s.io/{jobset/jobset,kueue/kueue}); paddle-operator v0.3.5
  deploy/v1/operator.yaml; knative serving config/core/deployments/controller.yaml (digest image,
  app.kubernetes.io/version label).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError

from paddle_mlops import preflight
from paddle_mlops.compile import default_compile_config
from pipelines.platform import controller_settings

SECRET_VALUE = "s3cr3t-VALUE-never-printed-7f3a"
EXPECTED_CRDS = {
    "clusterpolicies.kyverno.io": ("kyverno.io", "ClusterPolicy", ["v1", "v2beta1"]),
    "cronworkflows.argoproj.io": ("argoproj.io", "CronWorkflow", ["v1alpha1"]),
    "eventbus.argoproj.io": ("argoproj.io", "EventBus", ["v1alpha1"]),
    "eventsources.argoproj.io": ("argoproj.io", "EventSource", ["v1alpha1"]),
    "inferenceservices.serving.kserve.io": ("serving.kserve.io", "InferenceService", ["v1beta1"]),
    "trainjobs.trainer.kubeflow.org": ("trainer.kubeflow.org", "TrainJob", ["v1alpha1"]),
    "clustertrainingruntimes.trainer.kubeflow.org": ("trainer.kubeflow.org", "ClusterTrainingRuntime", ["v1alpha1"]),
    "jobsets.jobset.x-k8s.io": ("jobset.x-k8s.io", "JobSet", ["v1alpha2"]),
    **{
        f"{plural}.kueue.x-k8s.io": ("kueue.x-k8s.io", kind, ["v1beta2", "v1beta1"])
        for plural, kind in (
            ("resourceflavors", "ResourceFlavor"),
            ("clusterqueues", "ClusterQueue"),
            ("localqueues", "LocalQueue"),
            ("cohorts", "Cohort"),
            ("workloadpriorityclasses", "WorkloadPriorityClass"),
            ("topologies", "Topology"),
            ("workloads", "Workload"),
        )
    },
    "podmonitors.monitoring.coreos.com": ("monitoring.coreos.com", "PodMonitor", ["v1"]),
    "prometheusrules.monitoring.coreos.com": ("monitoring.coreos.com", "PrometheusRule", ["v1"]),
    "sensors.argoproj.io": ("argoproj.io", "Sensor", ["v1alpha1"]),
    "workflows.argoproj.io": ("argoproj.io", "Workflow", ["v1alpha1"]),
    "workflowtaskresults.argoproj.io": ("argoproj.io", "WorkflowTaskResult", ["v1alpha1"]),
    "workflowtemplates.argoproj.io": ("argoproj.io", "WorkflowTemplate", ["v1alpha1"]),
}
NAMESPACES = {
    "ml-pipelines": "restricted",
    "team-nlp": "restricted",
    "team-search": "restricted",
    "ml-build": "privileged",
}
SECRETS = {
    ("ml-pipelines", "minio-credentials"),
    # each region's own store (configs/regions/*.yaml store_credentials_secret): the rollout and the steps read them
    ("ml-pipelines", "minio-cn-east-credentials"),
    ("ml-pipelines", "minio-cn-north-credentials"),
    ("ml-pipelines", "cosign-signing-key"),
    ("ml-pipelines", "registry-push-credentials"),
    ("ml-pipelines", "buildkit-client-certs"),
    ("ml-pipelines", "github-webhook-secret"),
    ("ml-pipelines", "gitea-webhook-token"),
    ("ml-pipelines", "mlflow-backend"),
    ("ml-build", "buildkitd-server-certs"),
    ("kyverno", "registry-push-credentials"),  # verifyImages imageRegistryCredentials (argo/policies.yaml)
}
# (component, namespace, deployment, image, args, labels)
CONTROLLER_DEPLOYMENTS = {
    "argo-workflows": ("argo", "workflow-controller", "quay.io/argoproj/workflow-controller:v4.1.2", [], {}),
    "argo-events": ("argo-events", "controller-manager", "quay.io/argoproj/argo-events:v1.9.11", ["controller"], {}),
    "kserve": ("kserve", "kserve-controller-manager", "kserve/kserve-controller:v0.20.0", [], {}),
    "kyverno": (
        "kyverno",
        "kyverno-admission-controller",
        "ghcr.io/kyverno/kyverno:v1.19.0",
        [],
        {"app.kubernetes.io/version": "3.9.0"},
    ),
    "prometheus-operator": (
        "monitoring",
        "prometheus-operator",
        "quay.io/prometheus-operator/prometheus-operator:v0.93.0",
        [],
        {},
    ),
    "kubeflow-trainer": (
        "kubeflow-system",
        "kubeflow-trainer-controller-manager",
        "ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0",
        [],
        {},
    ),
    "jobset": ("jobset-system", "jobset-controller-manager", "registry.k8s.io/jobset/jobset:v0.12.0", [], {}),
    "kueue": ("kueue-system", "kueue-controller-manager", "registry.k8s.io/kueue/kueue:v0.19.2", [], {}),
    "knative-serving": (
        "knative-serving",
        "controller",
        "gcr.io/knative-releases/knative.dev/serving/cmd/controller@sha256:" + "a" * 64,
        [],
        {"app.kubernetes.io/version": "1.21.0"},
    ),
}
# Controllers only a legacy training backend needs (training.backend: kubeflow-paddlejob / paddle-operator).
LEGACY_CONTROLLER_DEPLOYMENTS = {
    "training-operator": ("kubeflow", "training-operator", "kubeflow/training-operator:v1.9.0", [], {}),
}
JETSTREAM_1_9_11 = ["latest", "2.8.1", "2.8.1-alpine", "2.8.2", "2.8.2-alpine", "2.9.1", "2.9.12", "2.9.16", "2.10.29"]
JETSTREAM_1_9_9 = [*JETSTREAM_1_9_11[:-1], "2.10.10"]
EXECUTOR = "resources:\n  requests: {cpu: 100m, memory: 64Mi}\nsecurityContext:\n" + "".join(
    f"  {line}\n"
    for line in (
        "runAsNonRoot: true",
        "runAsUser: 1000",
        "allowPrivilegeEscalation: false",
        "capabilities: {drop: [ALL]}",
        "seccompProfile: {type: RuntimeDefault}",
    )
)


COSIGN_PUB = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"


def not_found(kind: str, name: str) -> ApiException:
    exc = ApiException(status=404, reason="Not Found")
    exc.body = json.dumps({"kind": "Status", "message": f'{kind} "{name}" not found', "code": 404})
    return exc


def crd(name: str, group: str, kind: str, versions: list[str]) -> client.V1CustomResourceDefinition:
    return client.V1CustomResourceDefinition(
        api_version="apiextensions.k8s.io/v1",
        kind="CustomResourceDefinition",
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1CustomResourceDefinitionSpec(
            group=group,
            names=client.V1CustomResourceDefinitionNames(kind=kind, plural=name.split(".", 1)[0]),
            scope="Namespaced",
            versions=[
                client.V1CustomResourceDefinitionVersion(name=v, served=True, storage=i == 0)
                for i, v in enumerate(versions)
            ],
        ),
    )


def deployment(namespace: str, name: str, image: str, args: list[str], labels: dict[str, str], ready: int = 1):
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace, labels=labels or None),
        spec=client.V1DeploymentSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels={"app": name}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": name}),
                spec=client.V1PodSpec(containers=[client.V1Container(name=name, image=image, args=args or None)]),
            ),
        ),
        status=client.V1DeploymentStatus(replicas=1, ready_replicas=ready or None, available_replicas=ready or None),
    )


def controller_config(versions: list[str]) -> client.V1ConfigMap:
    config = {
        "eventBus": {
            "nats": {"versions": [{"version": "0.22.1", "natsStreamingImage": "nats-streaming:0.22.1"}]},
            "jetstream": {"versions": [{"version": v, "natsImage": f"nats:{v}"} for v in versions]},
        }
    }
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="argo-events-controller-config", namespace="argo-events"),
        data={"controller-config.yaml": yaml.safe_dump(config)},
    )


# kueue v0.19.2 config/components/manager/controller_manager_config.yaml: what the release manifests enable
# (a Helm or hand-written configuration without `integrations` gets batch/job alone, defaults.go).
KUEUE_RELEASE_FRAMEWORKS = [
    "batch/job",
    "kubeflow.org/mpijob",
    "ray.io/rayjob",
    "ray.io/raycluster",
    "ray.io/rayservice",
    "jobset.x-k8s.io/jobset",
    "workload.codeflare.dev/appwrapper",
    "trainer.kubeflow.org/trainjob",
    "pod",
    "deployment",
    "statefulset",
    "leaderworkerset.x-k8s.io/leaderworkerset",
]


def kueue_manager_config(
    frameworks: list[str] | None, multikueue: dict[str, Any] | None = None, **settings: Any
) -> client.V1ConfigMap:
    """ConfigMap kueue-system/kueue-manager-config (config/default namePrefix kueue-, key
    controller_manager_config.yaml) holding a Configuration config.kueue.x-k8s.io/v1beta2, with the documented
    waitForPodsReady unless `settings` say otherwise (`waitForPodsReady=None` drops it, `apiVersion=…` …)."""
    from pipelines.platform.kueue_config import WAIT_FOR_PODS_READY

    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "webhook": {"port": 9443},
        "waitForPodsReady": WAIT_FOR_PODS_READY,
    }
    config.update(settings)
    config = {k: v for k, v in config.items() if v is not None}
    if frameworks is not None:
        config["integrations"] = {"frameworks": frameworks}
    if multikueue is not None:
        config["multiKueue"] = multikueue
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="kueue-manager-config", namespace="kueue-system"),
        data={"controller_manager_config.yaml": yaml.safe_dump(config)},
    )


@dataclass
class Cluster:
    """What the stand-in API serves; the API classes below read it."""

    version: str = "v1.34.1"
    crds: dict[str, Any] = field(default_factory=dict)
    namespaces: dict[str, Any] = field(default_factory=dict)
    config_maps: dict[tuple[str, str], Any] = field(default_factory=dict)
    secrets: dict[tuple[str, str], Any] = field(default_factory=dict)
    deployments: dict[str, Any] = field(default_factory=dict)
    event_buses: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    refuse: set[str] = field(default_factory=set)
    unreachable: bool = False
    secret_reads: list[dict[str, Any]] = field(default_factory=list)

    def guard(self, call: str) -> None:
        if self.unreachable:
            raise MaxRetryError(None, "/version", "Connection refused")  # type: ignore[arg-type]
        if call in self.refuse:
            raise ApiException(status=403, reason="Forbidden")


class StandInApi:
    """One of the client's API classes, answering from `cluster`."""

    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster


class VersionApi(StandInApi):
    def get_code(self, **_: Any) -> client.VersionInfo:
        self.c.guard("version")
        major, minor = self.c.version.lstrip("v").split(".")[:2]
        return client.VersionInfo(
            major=major,
            minor=minor,
            git_version=self.c.version,
            git_commit="0" * 40,
            git_tree_state="clean",
            build_date="2025-09-01T00:00:00Z",
            go_version="go1.24.6",
            compiler="gc",
            platform="linux/amd64",
        )


class ApiextensionsV1Api(StandInApi):
    def list_custom_resource_definition(self, **_: Any) -> client.V1CustomResourceDefinitionList:
        self.c.guard("crds")
        return client.V1CustomResourceDefinitionList(items=list(self.c.crds.values()))


class RawResponse:
    """What `_preload_content=False` returns: the undecoded HTTP response."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.status, self.data = 200, json.dumps(body).encode()


class CoreV1Api(StandInApi):
    def read_namespace(self, name: str, **_: Any) -> client.V1Namespace:
        self.c.guard("namespaces")
        if name not in self.c.namespaces:
            raise not_found("namespaces", name)
        return self.c.namespaces[name]

    def read_namespaced_config_map(self, name: str, namespace: str, **_: Any) -> client.V1ConfigMap:
        self.c.guard("configmaps")
        if (namespace, name) not in self.c.config_maps:
            raise not_found("configmaps", name)
        return self.c.config_maps[(namespace, name)]

    def read_namespaced_secret(
        self, name: str, namespace: str, _headers: dict[str, str] | None = None, _preload_content: bool = True, **_: Any
    ) -> Any:
        """Like the API server: the whole Secret, or only its metadata when the Accept header asks for it."""
        self.c.guard("secrets")
        self.c.secret_reads.append({"headers": dict(_headers or {}), "preload": _preload_content})
        if (namespace, name) not in self.c.secrets:
            raise not_found("secrets", name)
        secret = self.c.secrets[(namespace, name)]
        if "as=PartialObjectMetadata" in (_headers or {}).get("Accept", ""):
            meta = client.ApiClient().sanitize_for_serialization(secret.metadata)
            body = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}
        else:
            body = client.ApiClient().sanitize_for_serialization(secret)
        return RawResponse(body) if not _preload_content else secret


class AppsV1Api(StandInApi):
    def list_deployment_for_all_namespaces(self, **_: Any) -> client.V1DeploymentList:
        self.c.guard("deployments")
        return client.V1DeploymentList(items=list(self.c.deployments.values()))


class CustomObjectsApi(StandInApi):
    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, **_: Any
    ) -> dict[str, Any]:
        self.c.guard("eventbus")
        assert (group, version, plural) == ("argoproj.io", "v1alpha1", "eventbus")
        if (namespace, name) not in self.c.event_buses:
            raise not_found(f"eventbus.{group}", name)
        return self.c.event_buses[(namespace, name)]


def api_for(cluster: Cluster) -> preflight.KubernetesApi:
    return preflight.KubernetesApi(
        VersionApi(cluster),
        CoreV1Api(cluster),
        AppsV1Api(cluster),
        ApiextensionsV1Api(cluster),
        CustomObjectsApi(cluster),
        "context stand-in",
    )


def apply_settings(cluster: Cluster, files: dict[str, list[dict[str, Any]]]) -> None:
    """What `kubectl apply --server-side -f argo/controller-settings/` leaves: each ConfigMap key it sends set, every
    other key kept; the Deployment's one env entry set (merged by container and env name)."""
    for doc in (d for docs in files.values() for d in docs):
        meta = doc["metadata"]
        if doc["kind"] == "ConfigMap":
            live = cluster.config_maps.setdefault(
                (meta["namespace"], meta["name"]),
                client.V1ConfigMap(
                    metadata=client.V1ObjectMeta(name=meta["name"], namespace=meta["namespace"]), data={}
                ),
            )
            live.data = {**(live.data or {}), **doc["data"]}
        elif doc["kind"] == "Deployment":
            target = next(
                d for d in cluster.deployments.values()
                if (d.metadata.namespace, d.metadata.name) == (meta["namespace"], meta["name"])
            )  # fmt: skip
            for patch in doc["spec"]["template"]["spec"]["containers"]:
                container = next(c for c in target.spec.template.spec.containers if c.name == patch["name"])
                kept = [e for e in container.env or [] if e.name not in {p["name"] for p in patch["env"]}]
                container.env = kept + [client.V1EnvVar(name=e["name"], value=e["value"]) for e in patch["env"]]


def ready_cluster() -> Cluster:
    cluster = Cluster()
    for name, spec in EXPECTED_CRDS.items():
        cluster.crds[name] = crd(name, *spec)
    for name, level in NAMESPACES.items():
        labels = {f"pod-security.kubernetes.io/{m}": level for m in ("enforce", "warn", "audit")}
        cluster.namespaces[name] = client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels))
    for namespace, name in SECRETS:
        cluster.secrets[(namespace, name)] = client.V1Secret(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            type="Opaque",
            string_data=None,
            data={"value": SECRET_VALUE},
        )
    for component, spec in CONTROLLER_DEPLOYMENTS.items():
        cluster.deployments[component] = deployment(*spec)
    cluster.config_maps[("argo", "workflow-controller-configmap")] = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="workflow-controller-configmap", namespace="argo"),
        data={"executor": EXECUTOR, "metricsConfig": "enabled: true\nsecure: true\n"},
    )
    cluster.config_maps[("argo-events", "argo-events-controller-config")] = controller_config(JETSTREAM_1_9_11)
    apply_settings(cluster, controller_settings.render_files(default_compile_config()))
    cluster.config_maps[("knative-serving", "config-features")] = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="config-features", namespace="knative-serving"),
        data={"kubernetes.podspec-nodeselector": "enabled", "kubernetes.podspec-tolerations": "Enabled"},
    )
    cluster.config_maps[("kueue-system", "kueue-manager-config")] = kueue_manager_config(KUEUE_RELEASE_FRAMEWORKS)
    # What README's `kubectl -n kyverno create configmap paddle-mlops-cosign --from-file=cosign.pub=…` leaves.
    cluster.config_maps[("kyverno", "paddle-mlops-cosign")] = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="paddle-mlops-cosign", namespace="kyverno"),
        data={"cosign.pub": COSIGN_PUB},
    )
    return cluster
