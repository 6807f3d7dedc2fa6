"""`paddle-mlops preflight` against a stand-in of the Kubernetes API that answers with the official
client's model objects, shaped like what the upstream installs create:

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
  manifests/overlays/standalone/kustomization.yaml (tag v1-5170a36); paddle-operator v0.3.5
  deploy/v1/operator.yaml; knative serving config/core/deployments/controller.yaml (digest image,
  app.kubernetes.io/version label).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError

from paddle_mlops import cli, cluster_requirements, preflight
from paddle_mlops.compile import default_compile_config
from paddle_mlops.contracts import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE

SECRET_VALUE = "s3cr3t-VALUE-never-printed-7f3a"
EXPECTED_CRDS = {
    "clusterpolicies.kyverno.io": ("kyverno.io", "ClusterPolicy", ["v1", "v2beta1"]),
    "cronworkflows.argoproj.io": ("argoproj.io", "CronWorkflow", ["v1alpha1"]),
    "eventbus.argoproj.io": ("argoproj.io", "EventBus", ["v1alpha1"]),
    "eventsources.argoproj.io": ("argoproj.io", "EventSource", ["v1alpha1"]),
    "inferenceservices.serving.kserve.io": ("serving.kserve.io", "InferenceService", ["v1beta1"]),
    "paddlejobs.kubeflow.org": ("kubeflow.org", "PaddleJob", ["v1"]),
    "podmonitors.monitoring.coreos.com": ("monitoring.coreos.com", "PodMonitor", ["v1"]),
    "prometheusrules.monitoring.coreos.com": ("monitoring.coreos.com", "PrometheusRule", ["v1"]),
    "sensors.argoproj.io": ("argoproj.io", "Sensor", ["v1alpha1"]),
    "workflows.argoproj.io": ("argoproj.io", "Workflow", ["v1alpha1"]),
    "workflowtaskresults.argoproj.io": ("argoproj.io", "WorkflowTaskResult", ["v1alpha1"]),
    "workflowtemplates.argoproj.io": ("argoproj.io", "WorkflowTemplate", ["v1alpha1"]),
}
PADDLE_OPERATOR_CRD = {"paddlejobs.batch.paddlepaddle.org": ("batch.paddlepaddle.org", "PaddleJob", ["v1"])}
NAMESPACES = {"ml-pipelines": "restricted", "team-nlp": "restricted", "team-search": "restricted", "ml-build": "privileged"}
SECRETS = {
    ("ml-pipelines", "minio-credentials"),
    ("ml-pipelines", "cosign-signing-key"),
    ("ml-pipelines", "registry-push-credentials"),
    ("ml-pipelines", "buildkit-client-certs"),
    ("ml-pipelines", "github-webhook-secret"),
    ("ml-pipelines", "gitea-webhook-token"),
    ("ml-pipelines", "mlflow-backend"),
    ("ml-build", "buildkitd-server-certs"),
}
# (component, namespace, deployment, image, args, labels)
CONTROLLER_DEPLOYMENTS = {
    "argo-workflows": ("argo", "workflow-controller", "quay.io/argoproj/workflow-controller:v4.1.2", [], {}),
    "argo-events": ("argo-events", "controller-manager", "quay.io/argoproj/argo-events:v1.9.11", ["controller"], {}),
    "kserve": ("kserve", "kserve-controller-manager", "kserve/kserve-controller:v0.20.0", [], {}),
    "kyverno": (
        "kyverno", "kyverno-admission-controller", "ghcr.io/kyverno/kyverno:v1.19.0", [],
        {"app.kubernetes.io/version": "3.9.0"},
    ),
    "prometheus-operator": (
        "monitoring", "prometheus-operator", "quay.io/prometheus-operator/prometheus-operator:v0.93.0", [], {}
    ),
    "training-operator": ("kubeflow", "training-operator", "kubeflow/training-operator:v1.9.0", [], {}),
    "knative-serving": (
        "knative-serving", "controller",
        "gcr.io/knative-releases/knative.dev/serving/cmd/controller@sha256:" + "a" * 64, [],
        {"app.kubernetes.io/version": "1.21.0"},
    ),
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
                client.V1CustomResourceDefinitionVersion(name=v, served=True, storage=i == 0) for i, v in enumerate(versions)
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


class VersionApi:
    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster

    def get_code(self, **_: Any) -> client.VersionInfo:
        self.c.guard("version")
        major, minor = self.c.version.lstrip("v").split(".")[:2]
        return client.VersionInfo(
            major=major, minor=minor, git_version=self.c.version, git_commit="0" * 40, git_tree_state="clean",
            build_date="2025-09-01T00:00:00Z", go_version="go1.24.6", compiler="gc", platform="linux/amd64",
        )


class ApiextensionsV1Api:
    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster

    def list_custom_resource_definition(self, **_: Any) -> client.V1CustomResourceDefinitionList:
        self.c.guard("crds")
        return client.V1CustomResourceDefinitionList(items=list(self.c.crds.values()))


class RawResponse:
    """What `_preload_content=False` returns: the undecoded HTTP response."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.status, self.data = 200, json.dumps(body).encode()


class CoreV1Api:
    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster

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

    def read_namespaced_secret(self, name: str, namespace: str, _headers: dict[str, str] | None = None,
                               _preload_content: bool = True, **_: Any) -> Any:
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


class AppsV1Api:
    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster

    def list_deployment_for_all_namespaces(self, **_: Any) -> client.V1DeploymentList:
        self.c.guard("deployments")
        return client.V1DeploymentList(items=list(self.c.deployments.values()))


class CustomObjectsApi:
    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                     **_: Any) -> dict[str, Any]:
        self.c.guard("eventbus")
        assert (group, version, plural) == ("argoproj.io", "v1alpha1", "eventbus")
        if (namespace, name) not in self.c.event_buses:
            raise not_found(f"eventbus.{group}", name)
        return self.c.event_buses[(namespace, name)]


def api_for(cluster: Cluster) -> preflight.KubernetesApi:
    return preflight.KubernetesApi(
        VersionApi(cluster), CoreV1Api(cluster), AppsV1Api(cluster), ApiextensionsV1Api(cluster),
        CustomObjectsApi(cluster), "context stand-in",
    )


def ready_cluster() -> Cluster:
    cluster = Cluster()
    for name, spec in EXPECTED_CRDS.items():
        cluster.crds[name] = crd(name, *spec)
    for name, level in NAMESPACES.items():
        labels = {f"pod-security.kubernetes.io/{m}": level for m in ("enforce", "warn", "audit")}
        cluster.namespaces[name] = client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels))
    for namespace, name in SECRETS:
        cluster.secrets[(namespace, name)] = client.V1Secret(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace), type="Opaque",
            string_data=None, data={"value": SECRET_VALUE},
        )
    for component, spec in CONTROLLER_DEPLOYMENTS.items():
        cluster.deployments[component] = deployment(*spec)
    cluster.config_maps[("argo", "workflow-controller-configmap")] = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="workflow-controller-configmap", namespace="argo"),
        data={"executor": EXECUTOR, "metricsConfig": "enabled: true\nsecure: true\n"},
    )
    cluster.config_maps[("argo-events", "argo-events-controller-config")] = controller_config(JETSTREAM_1_9_11)
    cluster.config_maps[("knative-serving", "config-features")] = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="config-features", namespace="knative-serving"),
        data={"kubernetes.podspec-nodeselector": "enabled", "kubernetes.podspec-tolerations": "Enabled"},
    )
    return cluster


def run(cluster: Cluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str):
    monkeypatch.setattr(preflight.KubernetesApi, "connect", classmethod(lambda cls, kubeconfig, context: api_for(cluster)))
    code = cli.main(["preflight", *args])
    out, err = capsys.readouterr()
    return code, out, err


def results(cluster: Cluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str):
    code, out, _ = run(cluster, monkeypatch, capsys, "--json", *args)
    return code, json.loads(out)


def findings(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in items if r["status"] == "finding"]


# --- what is checked is derived from the install set ------------------------------------------------


def test_required_crds_namespaces_and_secrets_come_from_the_install_set() -> None:
    req = cluster_requirements.requirements(default_compile_config())
    assert set(req.crds) == set(EXPECTED_CRDS)
    assert {n: level for n, (level, _) in req.namespaces.items()} == NAMESPACES
    assert set(req.secrets) == SECRETS
    assert req.secrets[("ml-pipelines", "minio-credentials")] == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert req.event_bus_version == "2.10.29"
    assert req.components == sorted(req.components[:1]) + req.components[1:]  # argo-workflows first
    assert set(req.components) == set(CONTROLLER_DEPLOYMENTS)


def test_paddle_operator_needs_its_crd_and_controller() -> None:
    from paddle_mlops.config import load_config

    cfg = load_config(None, None, ["training.paddlejob.operator=paddle",
                                   "training.paddlejob.paddle_operator_init_container=false"])
    req = cluster_requirements.requirements(cfg)
    assert "paddlejobs.batch.paddlepaddle.org" in req.crds and "paddlejobs.kubeflow.org" not in req.crds
    assert "paddle-operator" in req.components and "training-operator" not in req.components


def test_secret_references_are_found_by_shape() -> None:
    doc = {
        "spec": {
            "imagePullSecrets": [{"name": "pull"}],
            "volumes": [
                {"name": "a", "secret": {"secretName": "vol", "items": [{"key": "tls.crt", "path": "c"}]}},
                {"name": "b", "projected": {"sources": [{"secret": {"name": "proj"}}]}},
                {"name": "c", "secret": {"secretName": "maybe", "optional": True}},
            ],
            "containers": [{"envFrom": [{"secretRef": {"name": "bulk"}}]}],
            "github": {"push": {"apiToken": {"name": "gh-token", "key": "token"}}},
        }
    }
    found = {(name, key) for name, key, _ in cluster_requirements.secret_refs(doc)}
    assert found == {("pull", None), ("vol", "tls.crt"), ("proj", None), ("bulk", None), ("gh-token", "token")}


# --- a ready cluster, then one missing each item --------------------------------------------------


def test_ready_cluster_passes_every_check(monkeypatch, capsys) -> None:
    code, out, err = run(ready_cluster(), monkeypatch, capsys)
    assert code == EXIT_OK, out + err
    assert not [line for line in out.splitlines() if line.startswith(("finding", "warning"))]
    assert "0 finding(s): ready." in out
    for line in ("kubernetes server", "crd eventbus.argoproj.io", "namespace ml-build", "argo-executor argo/",
                 "secret ml-pipelines/minio-credentials", "eventbus argo-events/argo-events-controller-config",
                 "controller kyverno", "controller kserve"):
        assert any(row.startswith("ok") and line in row for row in out.splitlines()), line


def test_ready_cluster_as_json(monkeypatch, capsys) -> None:
    code, items = results(ready_cluster(), monkeypatch, capsys)
    assert code == EXIT_OK
    assert {r["status"] for r in items} == {"ok"}
    assert {r["check"] for r in items} == {name for name, _ in preflight.CHECKS}


def _drop(store: str, key: Any):
    def change(cluster: Cluster) -> None:
        del getattr(cluster, store)[key]

    return change


def _set(**changes: Any):
    def change(cluster: Cluster) -> None:
        for name, value in changes.items():
            setattr(cluster, name, value)

    return change


def _relabel(namespace: str, level: str):
    def change(cluster: Cluster) -> None:
        cluster.namespaces[namespace].metadata.labels["pod-security.kubernetes.io/enforce"] = level

    return change


def _deploy(component: str, image: str | None = None, ready: int = 1):
    def change(cluster: Cluster) -> None:
        namespace, name, old_image, args, labels = CONTROLLER_DEPLOYMENTS[component]
        cluster.deployments[component] = deployment(namespace, name, image or old_image, args, labels, ready)

    return change


def _executor(data: dict[str, str]):
    def change(cluster: Cluster) -> None:
        cluster.config_maps[("argo", "workflow-controller-configmap")].data = data

    return change


MISSING = [
    pytest.param(_set(version="v1.29.4"), "kubernetes", "server", "Kubernetes 1.30", id="kubernetes-too-old"),
    *(
        pytest.param(_drop("deployments", c), "controller", c, preflight.install_fix(c), id=f"no-controller-{c}")
        for c in CONTROLLER_DEPLOYMENTS
    ),
    pytest.param(_deploy("kyverno", ready=0), "controller", "kyverno", "describe deployment", id="kyverno-not-ready"),
    pytest.param(_deploy("kserve", ready=0), "controller", "kserve", "describe deployment", id="kserve-not-ready"),
    pytest.param(
        _deploy("argo-workflows", "quay.io/argoproj/workflow-controller:v3.5.8"), "controller", "argo-workflows",
        "argo-workflows/releases/download/v4.1.2/install.yaml", id="argo-workflows-too-old",
    ),
    pytest.param(
        _deploy("argo-events", "quay.io/argoproj/argo-events:v1.9.9"), "controller", "argo-events",
        "argo-events/v1.9.11/manifests/install.yaml", id="argo-events-too-old",
    ),
    *(
        pytest.param(_drop("crds", name), "crd", name, preflight.install_fix(cluster_requirements.component_of(g, k)),
                     id=f"no-crd-{name}")
        for name, (g, k, _) in EXPECTED_CRDS.items()
    ),
    pytest.param(
        lambda c: c.crds.__setitem__("paddlejobs.kubeflow.org", crd("paddlejobs.kubeflow.org", "kubeflow.org",
                                                                    "PaddleJob", ["v1beta1"])),
        "crd", "paddlejobs.kubeflow.org", "upgrade: kubectl apply --server-side -k", id="crd-version-not-served",
    ),
    *(
        pytest.param(_drop("namespaces", n), "namespace", n, "kubectl apply -f argo/tenancy.yaml", id=f"no-ns-{n}")
        for n in NAMESPACES
    ),
    pytest.param(
        _relabel("ml-pipelines", "baseline"), "namespace", "ml-pipelines",
        "kubectl label --overwrite namespace ml-pipelines pod-security.kubernetes.io/enforce=restricted",
        id="pipeline-ns-baseline",
    ),
    pytest.param(
        _relabel("ml-build", "restricted"), "namespace", "ml-build",
        "pod-security.kubernetes.io/enforce=privileged", id="build-ns-restricted",
    ),
    pytest.param(
        _drop("config_maps", ("argo", "workflow-controller-configmap")), "argo-executor",
        "argo/workflow-controller-configmap", "kubectl apply -f argo/argo-controller.yaml", id="no-controller-config",
    ),
    pytest.param(
        # The upstream default: no executor key at all, so init/wait run without a securityContext.
        _executor({"metricsConfig": "enabled: true\n"}), "argo-executor", "argo/workflow-controller-configmap",
        "executor.securityContext=", id="executor-unset",
    ),
    pytest.param(
        _executor({"executor": EXECUTOR.replace("allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true")}),
        "argo-executor", "argo/workflow-controller-configmap", "kubectl apply -f argo/argo-controller.yaml",
        id="executor-privilege-escalation",
    ),
    pytest.param(
        _drop("config_maps", ("knative-serving", "config-features")), "knative-features",
        "knative-serving/config-features", "kubectl apply -f argo/knative.yaml", id="knative-flags-default",
    ),
    pytest.param(
        lambda c: c.config_maps[("knative-serving", "config-features")].data.__setitem__(
            "kubernetes.podspec-tolerations", "disabled"
        ),
        "knative-features", "knative-serving/config-features", "kubectl apply -f argo/knative.yaml",
        id="knative-tolerations-disabled",
    ),
    *(
        pytest.param(_drop("secrets", key), "secret", f"{key[0]}/{key[1]}",
                     f"kubectl create secret generic {key[1]} -n {key[0]}", id=f"no-secret-{key[1]}")
        for key in sorted(SECRETS)
    ),
    pytest.param(
        _drop("config_maps", ("argo-events", "argo-events-controller-config")), "eventbus",
        "argo-events/argo-events-controller-config", "argo-events/v1.9.11/manifests/install.yaml",
        id="no-events-controller-config",
    ),
    pytest.param(
        lambda c: c.config_maps.__setitem__(("argo-events", "argo-events-controller-config"),
                                            controller_config(JETSTREAM_1_9_9)),
        "eventbus", "argo-events/argo-events-controller-config", "upgrade Argo Events to 1.9.10",
        id="jetstream-version-not-listed",
    ),
    pytest.param(
        lambda c: c.event_buses.__setitem__(("ml-pipelines", "default"), {"status": {"conditions": [
            {"type": "Configured", "status": "True"},
            {"type": "Deployed", "status": "False", "reason": "JetStreamStatefulSetFailed",
             "message": 'unsupported version "2.10.29"'},
        ]}}),
        "eventbus", "ml-pipelines/default", "kubectl -n ml-pipelines describe eventbus default", id="eventbus-failed",
    ),
]


@pytest.mark.parametrize(("change", "check", "subject", "fix"), MISSING)
def test_a_cluster_missing_one_item_gets_one_finding_with_its_fix(monkeypatch, capsys, change, check, subject, fix):
    cluster = ready_cluster()
    change(cluster)
    code, items = results(cluster, monkeypatch, capsys)
    assert code == EXIT_FINDINGS
    bad = findings(items)
    assert [(r["check"], r["subject"]) for r in bad] == [(check, subject)], bad
    assert fix in bad[0]["fix"]
    code, out, _ = run(cluster, monkeypatch, capsys)
    assert code == EXIT_FINDINGS
    lines = out.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("finding") and f"{check} {subject}" in line)
    assert lines[row + 1].strip().startswith("fix: ") and fix in lines[row + 1]
    assert "not ready." in out


def test_executor_in_a_single_config_key_is_read_too(monkeypatch, capsys) -> None:
    """parseConfigMap: a lone `config` key holds the whole configuration (what the Helm chart writes)."""
    cluster = ready_cluster()
    executor = yaml.safe_load(EXECUTOR)
    cluster.config_maps[("argo", "workflow-controller-configmap")].data = {"config": yaml.safe_dump({"executor": executor})}
    assert run(cluster, monkeypatch, capsys)[0] == 0


def test_the_configmap_named_by_the_controller_flag_is_checked(monkeypatch, capsys) -> None:
    """A Helm install runs the controller with `--configmap <release>-workflow-controller-configmap`."""
    cluster = ready_cluster()
    cluster.deployments["argo-workflows"] = deployment(
        "ci", "wf-argo-workflows-workflow-controller", "quay.io/argoproj/workflow-controller:v4.1.2",
        ["--configmap", "wf-argo-workflows-workflow-controller-configmap"], {},
    )
    code, items = results(cluster, monkeypatch, capsys)
    assert code == EXIT_FINDINGS
    assert [r["subject"] for r in findings(items)] == ["ci/wf-argo-workflows-workflow-controller-configmap"]


def test_an_event_bus_version_the_controller_does_not_list_is_a_finding() -> None:
    """The EventBus of the install set as it stood before issue #15 (jetstream 2.10.10) against an
    argo-events v1.9.11 controller, which lists 2.10.29 instead (pkg/reconciler/config.go exact match)."""
    from paddle_mlops.compile import render_all

    cfg = default_compile_config()
    files = render_all(cfg)
    for doc in files["events.yaml"]:
        if doc["kind"] == "EventBus":
            doc["spec"]["jetstream"]["version"] = "2.10.10"
    checked = preflight.run_checks(api_for(ready_cluster()), cluster_requirements.requirements(cfg, files))
    assert [(r.check, r.status) for r in checked if r.status != "ok"] == [("eventbus", "finding")]


def test_a_tag_that_is_no_release_number_warns(monkeypatch, capsys) -> None:
    """training-operator v1.9.0's standalone overlay tags the image v1-5170a36."""
    cluster = ready_cluster()
    _deploy("training-operator", "kubeflow/training-operator:v1-5170a36")(cluster)
    code, items = results(cluster, monkeypatch, capsys)
    assert code == EXIT_OK
    [warning] = [r for r in items if r["status"] == "warning"]
    assert warning["subject"] == "training-operator" and "version unknown" in warning["message"]


def test_kyverno_chart_label_is_not_taken_for_its_version(monkeypatch, capsys) -> None:
    cluster = ready_cluster()
    _deploy("kyverno", "ghcr.io/kyverno/kyverno@sha256:" + "b" * 64)(cluster)
    code, items = results(cluster, monkeypatch, capsys)
    assert code == EXIT_OK
    assert [r["subject"] for r in items if r["status"] == "warning"] == ["kyverno"]


def test_event_source_deployments_are_not_the_events_controller(monkeypatch, capsys) -> None:
    cluster = ready_cluster()
    del cluster.deployments["argo-events"]
    cluster.deployments["es"] = deployment(
        "ml-pipelines", "github-eventsource-abcde", "quay.io/argoproj/argo-events:v1.9.11", ["eventsource-service"], {}
    )
    code, items = results(cluster, monkeypatch, capsys)
    assert [(r["check"], r["subject"]) for r in findings(items)] == [("controller", "argo-events")]


def test_a_refused_read_is_a_finding(monkeypatch, capsys) -> None:
    cluster = ready_cluster()
    cluster.refuse = {"crds"}
    code, items = results(cluster, monkeypatch, capsys)
    assert code == EXIT_FINDINGS
    [bad] = findings(items)
    assert bad["check"] == "crd" and "403 Forbidden" in bad["message"] and "list CRDs" in bad["fix"]


def test_an_unreachable_cluster_exits_2_without_traceback(monkeypatch, capsys) -> None:
    cluster = ready_cluster()
    cluster.unreachable = True
    code, out, err = run(cluster, monkeypatch, capsys)
    assert code == EXIT_USAGE
    assert "cannot reach the Kubernetes API server" in err and "Traceback" not in out + err


# --- secret values never leave the API server ----------------------------------------------------------


def test_secret_values_are_never_requested_nor_printed(monkeypatch, capsys) -> None:
    cluster = ready_cluster()
    for as_json in ((), ("--json",)):
        code, out, err = run(cluster, monkeypatch, capsys, *as_json)
        assert code == EXIT_OK
        assert SECRET_VALUE not in out + err
    assert cluster.secret_reads
    assert all(r["headers"] == {"Accept": preflight.METADATA_ONLY} and not r["preload"] for r in cluster.secret_reads)


def test_the_real_client_asks_for_metadata_only(tmp_path) -> None:
    """Through the official client and a kubeconfig, against a local HTTP stand-in of the API server
    that, like kube-apiserver, answers `as=PartialObjectMetadata` without `data`."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[tuple[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server hook name
            seen.append((self.path, self.headers.get("Accept", "")))
            if self.path.startswith("/version"):
                body: dict[str, Any] = {
                    "major": "1", "minor": "34", "gitVersion": "v1.34.1", "gitCommit": "0" * 40,
                    "gitTreeState": "clean", "buildDate": "2025-09-09T00:00:00Z", "goVersion": "go1.24.6",
                    "compiler": "gc", "platform": "linux/amd64",
                }
            elif self.path == "/api/v1/namespaces/ml-pipelines/secrets/minio-credentials":
                meta = {"name": "minio-credentials", "namespace": "ml-pipelines"}
                partial = "as=PartialObjectMetadata" in self.headers.get("Accept", "")
                body = {"kind": "PartialObjectMetadata", "metadata": meta} if partial else {
                    "kind": "Secret", "metadata": meta, "data": {"v": SECRET_VALUE}}
            else:
                self.send_response(404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"kind":"Status","code":404,"reason":"NotFound"}')
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps(body).encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        path = _kubeconfig(tmp_path, f"http://127.0.0.1:{server.server_address[1]}")
        api = preflight.KubernetesApi.connect(str(path), "lab")
        assert api.server_version() == "v1.34.1"
        assert api.secret_exists("minio-credentials", "ml-pipelines") is True
        assert api.secret_exists("absent", "ml-pipelines") is False
    finally:
        server.shutdown()
    secret_reads = [accept for path, accept in seen if "/secrets/" in path]
    assert secret_reads == [preflight.METADATA_ONLY] * 2


# --- bad usage ----------------------------------------------------------------------------------------


def _kubeconfig(tmp_path: Path, server: str = "https://127.0.0.1:1") -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "lab", "cluster": {"server": server}}],
                "users": [{"name": "me", "user": {"token": "not-a-real-token"}}],
                "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "me"}}],
                "current-context": "lab",
            }
        )
    )
    return path


def test_unknown_context_exits_2_and_lists_the_known_ones(tmp_path, capsys) -> None:
    code = cli.main(["preflight", "--kubeconfig", str(_kubeconfig(tmp_path)), "--context", "prod"])
    out, err = capsys.readouterr()
    assert code == EXIT_USAGE
    assert "context 'prod' is not in" in err and "(it has: lab)" in err
    assert "Traceback" not in out + err


@pytest.mark.parametrize("kind", ["missing", "directory", "not-yaml", "not-a-kubeconfig"])
def test_unreadable_kubeconfig_exits_2(tmp_path, capsys, kind) -> None:
    path = tmp_path / "kubeconfig"
    if kind == "directory":
        path.mkdir()
    elif kind == "not-yaml":
        path.write_text("clusters: [\n")
    elif kind == "not-a-kubeconfig":
        path.write_text("just: a mapping\n")
    code = cli.main(["preflight", "--kubeconfig", str(path)])
    out, err = capsys.readouterr()
    assert code == EXIT_USAGE
    assert err.startswith("preflight: ") and str(path) in err
    assert "Traceback" not in out + err


def test_bad_configuration_exits_2(capsys) -> None:
    assert cli.main(["preflight", "--set", "cluster.namespacez=x"]) == EXIT_USAGE
    assert "configuration error" in capsys.readouterr().err


def test_help(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["preflight", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--context", "--kubeconfig", "--json", "--config", "--env", "--set"):
        assert flag in out
