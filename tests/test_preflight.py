"""`paddle-mlops preflight` against the stand-in Kubernetes API of `tests/kubernetes_standin.py`: a ready
cluster passes, a cluster missing one item gets one finding with its fix, and secret values are never
requested nor printed. Connecting and bad usage: test_preflight_usage.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from paddle_mlops import cli, cluster_requirements, preflight
from paddle_mlops.compile import default_compile_config
from paddle_mlops_core.contracts import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE
from pipelines.platform import argo_controller
from tests.kubernetes_standin import (
    CONTROLLER_DEPLOYMENTS,
    EXECUTOR,
    EXPECTED_CRDS,
    JETSTREAM_1_9_9,
    NAMESPACES,
    SECRET_VALUE,
    SECRETS,
    Cluster,
    api_for,
    controller_config,
    crd,
    deployment,
    kueue_manager_config,
    ready_cluster,
)


def run(cluster: Cluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str):
    monkeypatch.setattr(
        preflight.KubernetesApi, "connect", classmethod(lambda cls, kubeconfig, context: api_for(cluster))
    )
    code = cli.main(["preflight", *args])
    out, err = capsys.readouterr()
    return code, out, err


def results(cluster: Cluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str):
    code, out, _ = run(cluster, monkeypatch, capsys, "--json", *args)
    return code, json.loads(out)


def findings(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in items if r["status"] == "finding"]


# --- a ready cluster, then one missing each item --------------------------------------------------


def test_ready_cluster_passes_every_check(monkeypatch, capsys) -> None:
    code, out, err = run(ready_cluster(), monkeypatch, capsys)
    assert code == EXIT_OK, out + err
    assert not [line for line in out.splitlines() if line.startswith(("finding", "warning"))]
    assert "0 finding(s): ready." in out
    for line in (
        "kubernetes server",
        "crd eventbus.argoproj.io",
        "namespace ml-build",
        "argo-executor argo/",
        "secret ml-pipelines/minio-credentials",
        "eventbus argo-events/argo-events-controller-config",
        "controller kyverno",
        "controller kserve",
    ):
        assert any(row.startswith("ok") and line in row for row in out.splitlines()), line


def test_ready_cluster_as_json(monkeypatch, capsys) -> None:
    code, items = results(ready_cluster(), monkeypatch, capsys)
    assert code == EXIT_OK
    assert {r["status"] for r in items} == {"ok"}
    # The release digests are checked where images.require_digest is set (prod): test_release_digests_in_prod; the
    # raw-mode ingress where serving.deployment_mode is RawDeployment: test_preflight_raw_ingress.py.
    assert {r["check"] for r in items} == {name for name, _ in preflight.CHECKS} - {"release-digests", "raw-ingress"}


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
        env = cluster.deployments[component].spec.template.spec.containers[0].env  # only the image changes
        cluster.deployments[component] = deployment(namespace, name, image or old_image, args, labels, ready)
        cluster.deployments[component].spec.template.spec.containers[0].env = env

    return change


def _executor(data: dict[str, str]):
    def change(cluster: Cluster) -> None:
        cluster.config_maps[("argo", "workflow-controller-configmap")].data = data

    return change


def _executor_image(image: str):
    def change(cluster: Cluster) -> None:
        data = cluster.config_maps[("argo", "workflow-controller-configmap")].data
        executor = yaml.safe_load(data["executor"])
        data["executor"] = yaml.safe_dump({**executor, "image": image})

    return change


def _events_image(image: str):
    def change(cluster: Cluster) -> None:
        (container,) = cluster.deployments["argo-events"].spec.template.spec.containers
        for env in container.env:
            if env.name == "ARGO_EVENTS_IMAGE":
                env.value = image

    return change


def _jetstream_images(nats: str):
    def change(cluster: Cluster) -> None:
        data = cluster.config_maps[("argo-events", "argo-events-controller-config")].data
        config = yaml.safe_load(data["controller-config.yaml"])
        for version in config["eventBus"]["jetstream"]["versions"]:
            if version["version"].startswith("paddle-mlops-"):
                version["natsImage"] = nats
        data["controller-config.yaml"] = yaml.safe_dump(config)

    return change


def _knative_feature(flag: str, value: str):
    def change(cluster: Cluster) -> None:
        cluster.config_maps[("knative-serving", "config-features")].data[flag] = value

    return change


def _same_finding(check: str, subject: str, fix: str, changes: dict[str, Any]) -> list[Any]:
    """One case per (id, change) of `changes`, each expected to give the same finding with the same fix."""
    return [pytest.param(change, check, subject, fix, id=case) for case, change in changes.items()]


MISSING = [
    pytest.param(_set(version="v1.29.4"), "kubernetes", "server", "Kubernetes 1.30", id="kubernetes-too-old"),
    *(
        pytest.param(_drop("deployments", c), "controller", c, preflight.install_fix(c), id=f"no-controller-{c}")
        for c in CONTROLLER_DEPLOYMENTS
    ),
    pytest.param(_deploy("kyverno", ready=0), "controller", "kyverno", "describe deployment", id="kyverno-not-ready"),
    pytest.param(_deploy("kserve", ready=0), "controller", "kserve", "describe deployment", id="kserve-not-ready"),
    pytest.param(
        _deploy("argo-workflows", "quay.io/argoproj/workflow-controller:v3.5.8"),
        "controller",
        "argo-workflows",
        "argo-workflows/releases/download/v4.1.2/install.yaml",
        id="argo-workflows-too-old",
    ),
    pytest.param(
        _deploy("argo-events", "quay.io/argoproj/argo-events:v1.9.9"),
        "controller",
        "argo-events",
        "argo-events/v1.9.11/manifests/install.yaml",
        id="argo-events-too-old",
    ),
    *(
        pytest.param(
            _drop("crds", name),
            "crd",
            name,
            preflight.install_fix(cluster_requirements.component_of(g, k)),
            id=f"no-crd-{name}",
        )
        for name, (g, k, _) in EXPECTED_CRDS.items()
    ),
    pytest.param(
        lambda c: c.crds.__setitem__(
            "trainjobs.trainer.kubeflow.org",
            crd("trainjobs.trainer.kubeflow.org", "trainer.kubeflow.org", "TrainJob", ["v1alpha0"]),
        ),
        "crd",
        "trainjobs.trainer.kubeflow.org",
        "upgrade: kubectl apply --server-side -k",
        id="crd-version-not-served",
    ),
    *(
        pytest.param(_drop("namespaces", n), "namespace", n, "kubectl apply -f argo/tenancy.yaml", id=f"no-ns-{n}")
        for n in NAMESPACES
    ),
    pytest.param(
        _relabel("ml-pipelines", "baseline"),
        "namespace",
        "ml-pipelines",
        "kubectl label --overwrite namespace ml-pipelines pod-security.kubernetes.io/enforce=restricted",
        id="pipeline-ns-baseline",
    ),
    pytest.param(
        _relabel("ml-build", "restricted"),
        "namespace",
        "ml-build",
        "pod-security.kubernetes.io/enforce=privileged",
        id="build-ns-restricted",
    ),
    *_same_finding(
        "argo-executor",
        "argo/workflow-controller-configmap",
        "for f in argo/controller-settings/*.yaml; do kubectl patch -f",
        {
            "no-controller-config": _drop("config_maps", ("argo", "workflow-controller-configmap")),
            "executor-privilege-escalation": _executor(
                {"executor": EXECUTOR.replace("allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true")}
            ),
        },
    ),
    pytest.param(
        # An Argo upgrade that wrote the executor back without our image: argoexec would run by the controller's tag.
        _executor_image("quay.io/argoproj/argoexec:v4.1.3"),
        "argo-executor",
        "argo/workflow-controller-configmap",
        "kubectl patch -f",
        id="executor-image-replaced",
    ),
    pytest.param(
        # An Argo Events upgrade applied its manifest: ARGO_EVENTS_IMAGE is upstream's tag again.
        _events_image("quay.io/argoproj/argo-events:v1.9.12"),
        "events-image",
        "argo-events/deployment/controller-manager",
        "kubectl patch -f",
        id="events-image-replaced",
    ),
    pytest.param(
        # Our JetStream entry, listed but with other images (a hand edit, an older release's settings).
        _jetstream_images("nats:2.10.30"),
        "eventbus",
        "argo-events/argo-events-controller-config",
        "kubectl patch -f",
        id="jetstream-images-replaced",
    ),
    pytest.param(
        # The upstream default: no executor key at all, so init/wait run without a securityContext.
        _executor({"metricsConfig": "enabled: true\n"}),
        "argo-executor",
        "argo/workflow-controller-configmap",
        "executor.securityContext=",
        id="executor-unset",
    ),
    *_same_finding(
        "knative-features",
        "knative-serving/config-features",
        "for f in argo/controller-settings/*.yaml; do kubectl patch -f",
        {
            "knative-flags-default": _drop("config_maps", ("knative-serving", "config-features")),
            "knative-tolerations-disabled": _knative_feature("kubernetes.podspec-tolerations", "disabled"),
        },
    ),
    *(
        pytest.param(
            _drop("secrets", key),
            "secret",
            f"{key[0]}/{key[1]}",
            f"kubectl create secret generic {key[1]} -n {key[0]}",
            id=f"no-secret-{key[1]}",
        )
        for key in sorted(SECRETS)
    ),
    *_same_finding(
        "kueue-config",
        "kueue-system/kueue-manager-config",
        "- trainer.kubeflow.org/trainjob",
        {
            # No integrations at all: Kueue's Go default enables batch/job alone
            # (kueue v0.19.2 apis/config/v1beta2/defaults.go defaultJobFrameworkName).
            "kueue-default-frameworks": lambda c: c.config_maps.__setitem__(
                ("kueue-system", "kueue-manager-config"), kueue_manager_config(None)
            ),
            "kueue-without-trainjob": lambda c: c.config_maps.__setitem__(
                ("kueue-system", "kueue-manager-config"), kueue_manager_config(["batch/job", "jobset.x-k8s.io/jobset"])
            ),
            "kueue-no-config": _drop("config_maps", ("kueue-system", "kueue-manager-config")),
        },
    ),
    *_same_finding(
        "cosign-key",
        "kyverno/paddle-mlops-cosign",
        "kubectl -n kyverno create configmap paddle-mlops-cosign --from-file=cosign.pub=cosign.pub",
        {
            "no-cosign-key": _drop("config_maps", ("kyverno", "paddle-mlops-cosign")),
            "cosign-key-placeholder": lambda c: c.config_maps[("kyverno", "paddle-mlops-cosign")].data.update(
                {"cosign.pub": "REPLACE-ME"}
            ),
        },
    ),
    pytest.param(
        _drop("config_maps", ("argo-events", "argo-events-controller-config")),
        "eventbus",
        "argo-events/argo-events-controller-config",
        "argo-events/v1.9.11/manifests/install.yaml",
        id="no-events-controller-config",
    ),
    pytest.param(
        lambda c: c.config_maps.__setitem__(
            ("argo-events", "argo-events-controller-config"), controller_config(JETSTREAM_1_9_9)
        ),
        "eventbus",
        "argo-events/argo-events-controller-config",
        "kubectl patch -f",
        id="jetstream-version-not-listed",
    ),
    pytest.param(
        lambda c: c.event_buses.__setitem__(
            ("ml-pipelines", "default"),
            {
                "status": {
                    "conditions": [
                        {"type": "Configured", "status": "True"},
                        {
                            "type": "Deployed",
                            "status": "False",
                            "reason": "JetStreamStatefulSetFailed",
                            "message": 'unsupported version "2.10.29"',
                        },
                    ]
                }
            },
        ),
        "eventbus",
        "ml-pipelines/default",
        "kubectl -n ml-pipelines describe eventbus default",
        id="eventbus-failed",
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
    """parseConfigMap: a lone `config` key holds the whole configuration (what the Helm chart writes from the values
    README gives: our executor and metricsConfig)."""
    cluster = ready_cluster()
    cluster.config_maps[("argo", "workflow-controller-configmap")].data = {
        "config": yaml.safe_dump(argo_controller.controller_settings())
    }
    assert run(cluster, monkeypatch, capsys)[0] == 0
    # The same without the executor's image: workflow pods would run argoexec by the controller's tag.
    settings = argo_controller.controller_settings()
    del settings["executor"]["image"]
    cluster.config_maps[("argo", "workflow-controller-configmap")].data = {"config": yaml.safe_dump(settings)}
    code, items = results(cluster, monkeypatch, capsys)
    assert code == EXIT_FINDINGS
    assert [(r["check"], r["message"].split(" ")[0]) for r in findings(items)] == [("argo-executor", "executor")]


def test_the_configmap_named_by_the_controller_flag_is_checked(monkeypatch, capsys) -> None:
    """A Helm install runs the controller with `--configmap <release>-workflow-controller-configmap`."""
    cluster = ready_cluster()
    cluster.deployments["argo-workflows"] = deployment(
        "ci",
        "wf-argo-workflows-workflow-controller",
        "quay.io/argoproj/workflow-controller:v4.1.2",
        ["--configmap", "wf-argo-workflows-workflow-controller-configmap"],
        {},
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
    """Kueue's and JobSet's kustomize bases tag the image `main` (config/components/manager/kustomization.yaml)."""
    cluster = ready_cluster()
    _deploy("kueue", "us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue:main")(cluster)
    code, items = results(cluster, monkeypatch, capsys)
    assert code == EXIT_OK
    [warning] = [r for r in items if r["status"] == "warning"]
    assert warning["subject"] == "kueue" and "version unknown" in warning["message"]


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


def test_a_multikueue_manager_needs_the_incremental_dispatcher_one_cluster_a_round() -> None:
    """Kueue's default dispatcher copies a run to every worker and the first to admit wins (kueue v0.19.2
    apis/config/v1beta2/defaults.go: AllAtOnce; pkg/controller/admissionchecks/multikueue/workload.go
    nominateAndSynchronizeWorkers); the region order holds only with Incremental, step 1
    (pkg/controller/workloaddispatcher/incrementaldispatcher.go getNextNominatedWorkers)."""
    from paddle_mlops.cluster_requirements import Requirements
    from paddle_mlops.preflight.controller_settings import check_kueue_config

    req = Requirements(kueue_frameworks=("trainer.kubeflow.org/trainjob",), multikueue=True)

    def statuses(multikueue: dict[str, Any] | None) -> list[tuple[str, str]]:
        cluster = ready_cluster()
        cluster.config_maps[("kueue-system", "kueue-manager-config")] = kueue_manager_config(
            ["trainer.kubeflow.org/trainjob"], multikueue
        )
        return [(r.status, r.fix) for r in check_kueue_config(api_for(cluster), req)]

    default = statuses(None)
    assert default[0][0] == "ok" and default[1][0] == "finding"
    assert "dispatcherName: kueue.x-k8s.io/multikueue-dispatcher-incremental" in default[1][1]
    assert "stepSize: 1" in default[1][1] and "rollout restart deployment/kueue-controller-manager" in default[1][1]
    # Incremental with its default step (3 clusters a round) still races the first three regions.
    incremental = {"dispatcherName": "kueue.x-k8s.io/multikueue-dispatcher-incremental"}
    assert statuses(incremental)[1][0] == "finding"
    one = {**incremental, "incrementalDispatcherConfig": {"stepSize": 1}}
    assert [s for s, _ in statuses(one)] == ["ok", "ok"]


def test_release_digests_in_prod(monkeypatch, capsys, tmp_path) -> None:
    """With images.require_digest (prod) the overlay that pins the install set is checked: the checked-in one still
    carries the placeholder digests (a finding naming the release command), a released one passes."""
    import shutil

    from paddle_mlops import pin_images, release_overlay
    from paddle_mlops.preflight import release

    code, items = results(ready_cluster(), monkeypatch, capsys, "--env", "prod")
    (unreleased,) = [r for r in items if r["check"] == "release-digests"]
    assert unreleased["status"] == "finding" and "placeholder digest" in unreleased["message"]
    assert "scripts/sign-images.sh --env prod --overlay overlays/prod" in unreleased["fix"]
    overlay = tmp_path / "overlays" / "prod"
    shutil.copytree(release.PROJECT_ROOT / "overlays" / "prod", overlay)
    names = release_overlay.pins(release_overlay.read(overlay))
    assert pin_images.main(["--overlay", str(overlay), *(f"{n}@sha256:{'ab' * 32}" for n in names)]) == 0
    capsys.readouterr()
    monkeypatch.setattr(release, "PROJECT_ROOT", tmp_path)
    code, items = results(ready_cluster(), monkeypatch, capsys, "--env", "prod")
    (released,) = [r for r in items if r["check"] == "release-digests"]
    assert released["status"] == "ok", released


def _config_network(cluster: Cluster, data: dict[str, str]) -> None:
    from kubernetes import client

    meta = client.V1ObjectMeta(name="config-network", namespace="knative-serving")
    cluster.config_maps[("knative-serving", "config-network")] = client.V1ConfigMap(metadata=meta, data=data)


KOURIER = "kourier.ingress.networking.knative.dev"


@pytest.mark.parametrize(
    ("data", "args", "status"),
    [
        ({}, (), "ok"),  # no key: Istio's class, the default layer
        ({"ingress-class": KOURIER}, (), "finding"),
        ({"ingress.class": KOURIER}, (), "finding"),  # the legacy key is read too
        ({"ingress.class": KOURIER, "ingress-class": "istio.ingress.networking.knative.dev"}, (), "ok"),  # new wins
        ({"ingress-class": KOURIER}, ("--set", "serving.networking_layer=kourier"), "ok"),
        ({"ingress-class": "gateway-api.ingress.networking.knative.dev"}, (), "finding"),
        (
            {"ingress-class": "gateway-api.ingress.networking.knative.dev"},
            ("--set", "serving.gateway_namespaces=[envoy-gateway-system]"),
            "ok",
        ),
    ],
)
def test_the_networking_layer_knative_uses_is_the_one_the_policy_admits(monkeypatch, capsys, data, args, status):
    """knative/networking release-1.15..1.21 pkg/config/config.go NewConfigFromMap: `ingress.class` (legacy), then
    `ingress-class` (wins); neither: Istio. A mismatch means the predictor NetworkPolicy drops the gateway's traffic."""
    cluster = ready_cluster()
    _config_network(cluster, data)
    code, items = results(cluster, monkeypatch, capsys, *args)
    (network,) = [r for r in items if r["check"] == "knative-network"]
    assert network["status"] == status, network
    if status == "finding" and "kourier" in str(data):
        assert "serving.networking_layer: kourier" in network["fix"] and "kourier-system" in network["fix"]
