"""The pods the Argo Workflows controller really creates for our templates, and the controller
settings the install ships (argo/controller-settings/argo-workflows.yaml), as argoproj/argo-workflows behaves.

Upstream behaviour encoded here (argo-workflows v4.1.2; v3.6.0 the same where named):
- workflow/controller/workflowpod.go (podBuilder.build): every pod gets the `init` init container
  (legacy layout, workflowpod_layout.go initContainers → newInitContainers, always, not only for
  input artifacts) before the template's own; a `wait` container precedes main unless the template
  is a resource or data template (needsAuxCtr); sidecars follow main; the pod securityContext is the
  template's, else the workflow's (addSchedulingConstraints). v3.6.0: the same in createWorkflowPod.
- workflowpod.go newExecContainer: init, wait and a resource template's argoexec `main` take
  securityContext and resources from the controller's `executor` setting only; when that
  securityContext is nil a resource template gets common.MinimalCtrSC (workflow/common/
  security_context.go), every other template none at all.
- operator.go executeResource: a resource template's main is that executor container.
- config/controller.go parseConfigMap: a lone `config` key, or one key per Config field, joined and
  strictly unmarshalled (config/config.go Config, MetricsConfig json names).
- workflow/controller/controller.go: metrics TLS defaults to on (`GetSecure(true)`) from v3.6.0,
  off (`GetSecure(false)`) in v3.5.0.
Pod Security "restricted": kubernetes staging/src/k8s.io/pod-security-admission/policy/check_*.go.
Helm: argoproj/argo-helm charts/argo-workflows templates/controller/workflow-controller-config-map.yaml
(chart 1.0.18) renders `executor.{resources,securityContext}` and `controller.metricsConfig.*`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from paddle_mlops import lint
from paddle_mlops_core import versions
from pipelines.platform import argo_controller

ARGO = Path(__file__).resolve().parents[1] / "argo"
POD_TEMPLATE_TYPES = ("container", "script", "containerSet", "resource")
MINIMAL_CTR_SC = {
    "capabilities": {"drop": ["ALL"]},
    "privileged": False,
    "runAsNonRoot": True,
    "runAsUser": 8737,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
}  # fmt: skip
# config/config.go json names at v4.1.2 (the keys this install may set; UnmarshalStrict refuses others).
CONFIG_KEYS = {"executor", "mainContainer", "metricsConfig", "telemetryConfig", "workflowDefaults", "links"}
METRICS_CONFIG_KEYS = {
    "enabled", "disableLegacy", "metricsTTL", "path", "port", "ignoreErrors", "secure", "modifiers", "temporality",
}  # fmt: skip
CONTAINER_KEYS = {"image", "imagePullPolicy", "args", "env", "resources", "securityContext", "volumeMounts"}


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict)]


def install_set(argo: Path = ARGO) -> list[dict[str, Any]]:
    return [doc for path in sorted(argo.rglob("*.yaml")) if path.name != "kustomization.yaml" for doc in _docs(path)]


def _exec_container(name: str, executor: dict[str, Any] | None, resource: bool) -> dict[str, Any]:
    executor = executor or {}
    container: dict[str, Any] = {"name": name, "image": "quay.io/argoproj/argoexec:v4.1.2"}
    security = executor.get("securityContext")
    if security is None and resource:
        security = dict(MINIMAL_CTR_SC)
        if name in ("init", "wait"):
            del security["readOnlyRootFilesystem"]
    if security is not None:
        container["securityContext"] = security
    if executor.get("resources"):
        container["resources"] = executor["resources"]
    return container


def argo_pod(template: dict[str, Any], wf_spec: dict[str, Any], executor: dict[str, Any] | None) -> dict[str, Any]:
    """The pod podBuilder.build makes for one template (the fields Pod Security reads)."""
    resource = "resource" in template
    if resource:
        mains = [_exec_container("main", executor, resource=True)]
    elif "containerSet" in template:
        mains = list(template["containerSet"]["containers"])
    else:
        kind = "container" if "container" in template else "script"
        mains = [dict(template[kind], name="main")]
    aux = [] if resource else [_exec_container("wait", executor, resource=False)]
    return {
        "spec": {
            "securityContext": template.get("securityContext", wf_spec.get("securityContext")),
            "initContainers": [_exec_container("init", executor, resource), *template.get("initContainers", [])],
            "containers": [*aux, *mains, *template.get("sidecars", [])],
            "volumes": [
                {"name": "var-run-argo", "emptyDir": {}},
                *wf_spec.get("volumes", []),
                *template.get("volumes", []),
            ],
        }
    }


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """Pod Security 'restricted' (pod-security-admission policy/check_*.go), each check per container."""
    spec = pod["spec"]
    pod_sc = spec.get("securityContext") or {}
    out = [
        f"volume {v['name']}: {sorted(set(v) - {'name'})}"
        for v in spec.get("volumes", [])
        if not set(v) - {"name"} <= RESTRICTED_VOLUMES
    ]
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append(f"{c['name']}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{c['name']}: allowPrivilegeEscalation != false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{c['name']}: capabilities.drop lacks ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"{c['name']}: capabilities.add {caps['add']}")
        if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
            out.append(f"{c['name']}: runAsNonRoot != true")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            out.append(f"{c['name']}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{c['name']}: seccompProfile {seccomp}")
    return out


def workflow_pods(docs: list[dict[str, Any]], executor: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """`<WorkflowTemplate>/<template>` → its pod, for every pod-creating template in `docs`."""
    pods = {}
    for doc in docs:
        spec = doc.get("spec") or {}
        if doc.get("kind") == "CronWorkflow":
            spec = spec.get("workflowSpec") or {}
        elif doc.get("kind") not in ("WorkflowTemplate", "Workflow", "ClusterWorkflowTemplate"):
            continue
        for template in spec.get("templates", []):
            if any(t in template for t in POD_TEMPLATE_TYPES):
                pods[f"{doc['metadata']['name']}/{template['name']}"] = argo_pod(template, spec, executor)
    return pods


def shipped_executor(docs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The `executor` setting as the controller would parse the install set's ConfigMap."""
    for doc in docs:
        if doc.get("kind") == "ConfigMap" and doc["metadata"]["name"] == argo_controller.CONTROLLER_CONFIGMAP:
            return controller_config(doc).get("executor")
    return None


def controller_config(configmap: dict[str, Any]) -> dict[str, Any]:
    """config/controller.go parseConfigMap, including its join of per-key values."""
    data = configmap.get("data") or {}
    if "config" in data:
        assert len(data) == 1, "a `config` key must be the only one (parseConfigMap)"
        raw = data["config"]
    else:
        raw = ""
        for name, value in data.items():
            if "\n" in value:
                raw += name + ":\n  " + "\n  ".join(value.strip("\n").split("\n")) + "\n"
            else:
                raw += f"{name}: {value}\n"
    return yaml.safe_load(raw) or {}


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return install_set()


@pytest.fixture(scope="module")
def cm(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (configmap,) = [
        d
        for d in docs
        if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == argo_controller.CONTROLLER_CONFIGMAP
    ]
    return configmap


def test_every_pod_argo_creates_for_our_templates_is_restricted(docs: list[dict[str, Any]]) -> None:
    """Fails on the install set without controller-settings/argo-workflows.yaml: init/wait would run with no
    securityContext."""
    executor = shipped_executor(docs)
    assert executor is not None, f"no {argo_controller.CONTROLLER_CONFIGMAP} among argo/*.yaml"
    pods = workflow_pods(docs, executor)
    assert {"train-deploy/build-image", "train-deploy/train", "rollout/rollout"} <= set(pods)
    assert {name: restricted_violations(pod) for name, pod in pods.items() if restricted_violations(pod)} == {}
    # And every pod has init (and wait for non-resource templates), as Argo builds them.
    for pod in pods.values():
        assert pod["spec"]["initContainers"][0]["name"] == "init"


def test_without_the_executor_settings_every_container_step_is_refused(docs: list[dict[str, Any]]) -> None:
    pods = workflow_pods(docs, None)
    for name, pod in pods.items():
        violations = restricted_violations(pod)
        if "wait" in {c["name"] for c in pod["spec"]["containers"]}:
            assert "wait: allowPrivilegeEscalation != false" in violations, name
            assert "init: capabilities.drop lacks ALL" in violations, name
        else:  # resource templates: upstream's MinimalCtrSC
            assert violations == [], name


def test_the_lint_models_the_executor_containers_like_the_controller(docs: list[dict[str, Any]]) -> None:
    workflows = [d for d in docs if d.get("kind") in ("WorkflowTemplate", "CronWorkflow")]
    bare = lint.lint_documents(workflows)
    refused = {(f.container, f.rule) for f in bare if f.rule in lint.RESTRICTED_RULES}
    assert ("template build-image/init", "allow-privilege-escalation") in refused
    assert ("template build-image/wait", "capabilities") in refused
    assert ("template train/wait", "capabilities") in refused  # a container template, as build-image
    assert not any(c.startswith("template prepull-image/") for c, _ in refused)  # a resource template: MinimalCtrSC
    assert lint.lint_documents(docs) == []


def test_the_configmap_is_what_the_controller_parses(cm: dict[str, Any]) -> None:
    assert cm["metadata"]["namespace"] == argo_controller.CONTROLLER_NAMESPACE == "argo"
    assert "config" not in cm["data"], "per-key data: a `config` key would have to stand alone"
    config = controller_config(cm)
    assert set(config) <= CONFIG_KEYS
    assert set(config["executor"]) <= CONTAINER_KEYS
    assert set(config["metricsConfig"]) <= METRICS_CONFIG_KEYS
    assert config["executor"]["securityContext"] == argo_controller.executor_security_context()
    resources = config["executor"]["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"]) and {"cpu", "memory"} <= set(resources["limits"])


def test_metrics_tls_is_said_explicitly(cm: dict[str, Any]) -> None:
    """3.5 served plain HTTP by default, 3.6+ TLS: an unset `secure` means different things."""
    metrics = controller_config(cm)["metricsConfig"]
    assert metrics == {"enabled": True, "path": "/metrics", "port": argo_controller.METRICS_PORT, "secure": True}
    assert argo_controller.METRICS_SECURE is True and argo_controller.METRICS_PORT == 9090


def _chart_config(values: dict[str, Any]) -> dict[str, Any]:
    """What the argo-workflows chart's workflow-controller-config-map.yaml renders from `values`."""
    executor, metrics = values.get("executor", {}), values["controller"]["metricsConfig"]
    config: dict[str, Any] = {}
    if executor.get("resources") or executor.get("securityContext"):
        config["executor"] = {"imagePullPolicy": "Always", **{k: executor[k] for k in ("resources", "securityContext")}}
    if metrics.get("enabled"):
        config["metricsConfig"] = {
            "enabled": metrics["enabled"],
            "path": metrics["path"],
            "port": metrics["port"],
            "ignoreErrors": metrics.get("ignoreErrors", False),
            "secure": metrics.get("secure", False),  # the chart's default is false
        }
    return config


def _chart_executor_image(values: dict[str, Any]) -> str:
    """The controller's --executor-image as argo-helm's workflow-controller-deployment.yaml renders it
    (`argo-workflows.image` registry/repository, then `:` and the tag)."""
    image = values["executor"]["image"]
    return f"{image['registry']}/{image['repository']}:{image['tag']}"


def test_helm_values_render_the_same_controller_settings(cm: dict[str, Any]) -> None:
    want = controller_config(cm)
    got = _chart_config(argo_controller.helm_values())
    assert {k: got["executor"][k] for k in ("resources", "securityContext")} == {
        k: v for k, v in want["executor"].items() if k != "image"
    }
    assert _chart_executor_image(argo_controller.helm_values()) == want["executor"]["image"]
    digest = "sha256:" + "a" * 64
    pinned = _chart_executor_image(argo_controller.helm_values({"quay.io/argoproj/argoexec": digest}))
    assert pinned == f"quay.io/argoproj/argoexec:v4.1.2@{digest}"  # pulled by the digest
    assert {k: got["metricsConfig"][k] for k in want["metricsConfig"]} == want["metricsConfig"]
    assert argo_controller.helm_values()["controller"]["metricsConfig"]["scheme"] == "https"


# --- version-dependent fields --------------------------------------------------------------------


def _argo_features(docs: list[dict[str, Any]]) -> set[str]:
    """The FEATURES entries (by `what`) that the generated Argo documents use."""
    used = set()
    for doc in docs:
        if doc.get("kind") == "CronWorkflow" and "schedules" in (doc.get("spec") or {}):
            used.add("CronWorkflow spec.schedules")
        if "mutexes" in ((doc.get("spec") or {}).get("synchronization") or {}):
            used.add("Workflow spec.synchronization.mutexes")
    return used


def test_every_version_dependent_argo_field_is_in_the_matrix(docs: list[dict[str, Any]]) -> None:
    used = _argo_features(docs)
    assert {"CronWorkflow spec.schedules", "Workflow spec.synchronization.mutexes"} <= used
    known = {f.what for f in versions.FEATURES if f.component == "argo-workflows"}
    assert used <= known
    for what in used:
        assert versions.supports("argo-workflows", what), f"{what} is newer than the matrix minimum"
    # `schedules` exists from 3.6.0: a 3.5 controller ignores it and never runs the CronWorkflow.
    assert not versions.at_least("3.5.9", next(f.since for f in versions.FEATURES if f.what in used))


def test_readme_shows_the_helm_values_the_code_renders() -> None:
    """README's chart values for a Helm-installed controller are the same settings as controller-settings/."""
    import textwrap
    from pathlib import Path

    import yaml

    from pipelines.platform.argo_controller import helm_values

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    after = readme.split("set these chart values instead", 1)[1]
    block = after.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(textwrap.dedent(block)) == helm_values()
