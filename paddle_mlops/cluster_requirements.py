"""What a cluster needs before the install set can run, read off the documents `paddle-mlops compile`
renders and the objects the steps create at run time (the train step's TrainJob or PaddleJob, the rollout's
InferenceService): CRDs, namespaces with their Pod Security level, Secret references, the EventBus
version. `paddle-mlops preflight` checks a live cluster against it; nothing here is a second list.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from paddle_mlops.lint import ARGO_WORKFLOW_KINDS, resource_manifest, workflow_spec
from paddle_mlops.release_overlay import unpinned_repositories
from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import resource_plural
from pipelines.platform.controller_settings import DIRECTORY as SETTINGS_DIR
from pipelines.platform.kyverno import KEY_NAMESPACE as KYVERNO_NAMESPACE

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
# argoproj.io holds both Argo Workflows and Argo Events kinds; these are Argo Events'.
ARGO_EVENTS_KINDS = ("EventBus", "EventSource", "Sensor")
# API groups the rollout Role is granted for one setting only: the cluster needs their CRDs only with that setting
# (Istio's VirtualService for `serving.canary_router: istio`; pipelines/platform/rbac.py rollout_rules).
OPTIONAL_GROUPS = {"networking.istio.io": lambda cfg: cfg.serving.canary_router == "istio"}
GROUP_COMPONENT = {
    "serving.kserve.io": "kserve",
    "kyverno.io": "kyverno",
    "monitoring.coreos.com": "prometheus-operator",
    "trainer.kubeflow.org": "kubeflow-trainer",
    "jobset.x-k8s.io": "jobset",
    "kueue.x-k8s.io": "kueue",
    "kubeflow.org": "training-operator",
    "batch.paddlepaddle.org": "paddle-operator",
}


@dataclass(frozen=True)
class Crd:
    """A CRD by name (`<plural>.<group>`); kind and version when a document (not an RBAC rule) names it."""

    name: str
    group: str
    component: str
    kind: str | None = None
    version: str | None = None


@dataclass
class Requirements:
    """What a ready cluster has, read off the install set for one configuration."""

    crds: dict[str, Crd] = field(default_factory=dict)
    namespaces: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (enforce level, argo file)
    secrets: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (namespace, name) -> keys
    components: list[str] = field(default_factory=list)  # MATRIX keys whose controller must run
    event_bus_version: str | None = None  # the EventBus's jetstream.version
    event_bus: tuple[str, str, str] | None = None  # (name, namespace, argo file) of the install set's EventBus
    workflow_pod_contexts: list[dict[str, Any]] = field(default_factory=list)  # pod securityContext per template
    controller_file: str | None = None  # the argo/ file holding the workflow-controller ConfigMap
    kueue_frameworks: tuple[str, ...] = ()  # Kueue integrations the generated jobs need enabled
    multikueue: bool = False  # this cluster is a MultiKueue manager (cluster.multikueue)
    networking_layer: str = "istio"  # serving.networking_layer: the Knative ingress class the policies expect
    gateway_namespaces: tuple[str, ...] | None = None  # serving.gateway_namespaces when set by hand
    digest_overlay: str | None = None  # images.require_digest: the overlay that pins the install set by digest
    tagged_images: tuple[str, ...] = ()  # the repositories the install set runs by tag (the overlay must pin them)
    # Our keys in the controllers' own objects (pipelines/platform/controller_settings.py), as this environment
    # ships them (the overlay's, images by digest, under images.require_digest), and the directory that holds them.
    settings: list[dict[str, Any]] = field(default_factory=list)
    settings_dir: str = "argo/controller-settings"
    deployment_mode: str = "Serverless"  # serving.deployment_mode


def is_custom_group(group: str) -> bool:
    """Built-in groups have no dot or end in .k8s.io (reserved: CRDs may not use them unapproved)."""
    return "." in group and not group.endswith(".k8s.io")


def component_of(group: str, kind: str) -> str:
    if group == "argoproj.io":
        return "argo-events" if kind in ARGO_EVENTS_KINDS else "argo-workflows"
    return GROUP_COMPONENT.get(group, group)


def runtime_documents(cfg: PipelineConfig) -> list[dict[str, Any]]:
    """Objects the steps create at run time: one InferenceService per serving region."""
    from paddle_mlops_core.config.loader import load_regions
    from steps.runtime.release import inference_service as isvc

    regions = load_regions()
    return [
        isvc.build_inference_service(cfg, regions[name], f"{cfg.storage.uri}/model", cfg.images.serve)
        for name in cfg.serving.regions
        if name in regions
    ]


def _embedded(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The document and the manifests its Argo resource templates create."""
    yield doc
    for template in workflow_spec(doc).get("templates") or []:
        manifest = resource_manifest(template)
        if manifest is not None:
            yield manifest


# Kyverno's verifyImages reads imageRegistryCredentials.secrets in its own namespace; registry credentials hold
# their docker config under this key.
DOCKER_CONFIG_KEY = ".dockerconfigjson"
# Argo Events SecretKeySelector fields: webhookSecret, authSecret, apiToken, the minio source's accessKey/secretKey.
_SELECTOR_KEY = re.compile(r"(Secret|Token|^accessKey|^secretKey)$")


def secret_refs(node: Any) -> Iterator[tuple[str, str | None, str | None]]:
    """(name, key, namespace) of every required Secret a document refers to, found by shape."""
    if isinstance(node, list):
        for item in node:
            yield from secret_refs(item)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if not isinstance(value, dict) or value.get("optional") is True:
            yield from secret_refs(value)
            continue
        if key == "secret" and isinstance(value.get("secretName"), str):  # pod volume
            items = value.get("items") or [{}]
            for item in items:
                yield value["secretName"], item.get("key"), None
        elif key in ("secretKeyRef", "secretRef", "secret") and isinstance(value.get("name"), str):
            # env valueFrom / envFrom / projected volume source / Kyverno key reference
            yield value["name"], value.get("key"), value.get("namespace")
        elif _SELECTOR_KEY.search(key) and isinstance(value.get("name"), str) and "key" in value:
            yield value["name"], value["key"], None
        elif key == "imageRegistryCredentials":  # Kyverno verifyImages: Secrets of the Kyverno namespace
            for ref in value.get("secrets") or []:
                namespace, _, name = str(ref).rpartition("/")
                yield name, DOCKER_CONFIG_KEY, namespace or KYVERNO_NAMESPACE
        else:
            yield from secret_refs(value)
    for ref in node.get("imagePullSecrets") or []:
        if isinstance(ref, dict) and ref.get("name"):
            yield ref["name"], None, None


def requirements(cfg: PipelineConfig, files: dict[str, list[dict[str, Any]]] | None = None) -> Requirements:
    """Everything the checks look for, from the rendered install set of `cfg`."""
    if files is None:
        from paddle_mlops.compile import render_all

        files = render_all(cfg)
    from pipelines.platform.multikueue import WORKERS_DIR

    req = Requirements()
    # With cluster.multikueue the cluster checked is the manager; workers/<region>.yaml are other clusters' sets.
    sources = [(name, doc) for name, docs in files.items() if not name.startswith(f"{WORKERS_DIR}/") for doc in docs]
    req.settings = [doc for name, docs in files.items() if name.startswith(f"{SETTINGS_DIR}/") for doc in docs]
    if cfg.images.require_digest:  # the rollout's InferenceServices run the serving image by digest, always
        req.digest_overlay = cfg.images.digest_overlay
        req.tagged_images = tuple(unpinned_repositories(doc for _, doc in sources))
        req.settings, req.settings_dir = _overlay_settings(cfg, req.settings, req.settings_dir)
    sources += [("(created by the rollout step)", doc) for doc in runtime_documents(cfg)]
    for file, outer in sources:
        outer_ns = (outer.get("metadata") or {}).get("namespace") or cfg.cluster.namespace
        for doc in _embedded(outer):
            _collect(req, cfg, file, doc, outer_ns)
    components = ["argo-workflows", *sorted({c.component for c in req.crds.values()} - {"argo-workflows"})]
    if "kubeflow-trainer" in components and "jobset" not in components:
        components.append("jobset")  # Trainer v2 runs every TrainJob as a JobSet
    if cfg.serving.deployment_mode == "Serverless" and "kserve" in components:
        components.append("knative-serving")  # KServe's Serverless mode runs on Knative revisions
    req.components = components
    if "kueue" in components and "kubeflow-trainer" in components:
        from pipelines.platform.kueue_config import TRAINJOB_FRAMEWORK

        req.kueue_frameworks = (TRAINJOB_FRAMEWORK,)
    req.multikueue = cfg.cluster.multikueue
    req.networking_layer, req.gateway_namespaces = cfg.serving.networking_layer, cfg.serving.gateway_namespaces
    req.deployment_mode = cfg.serving.deployment_mode
    return req


def _overlay_settings(
    cfg: PipelineConfig, base: list[dict[str, Any]], base_dir: str
) -> tuple[list[dict[str, Any]], str]:
    """The digest overlay's controller settings (images pinned by its digests); argo/'s when it cannot be read
    (the release-digests check reports why)."""
    from pathlib import Path

    from paddle_mlops.release_overlay import OverlayError, settings_files

    overlay = Path(cfg.images.digest_overlay or "")
    root = Path(__file__).resolve().parents[1]
    try:
        files = settings_files(overlay if overlay.is_absolute() else root / overlay, cfg)
    except OverlayError:
        return base, base_dir
    return [doc for docs in files.values() for doc in docs], f"{cfg.images.digest_overlay}/{SETTINGS_DIR}"


def _collect(req: Requirements, cfg: PipelineConfig, file: str, doc: dict[str, Any], namespace: str) -> None:
    kind, api_version = doc.get("kind", ""), doc.get("apiVersion", "")
    group, _, version = api_version.rpartition("/")
    meta = doc.get("metadata") or {}
    if is_custom_group(group):
        _add_crd(req, Crd(f"{resource_plural(kind)}.{group}", group, component_of(group, kind), kind, version))
    rules = doc.get("rules") or [] if kind in ("Role", "ClusterRole") else []
    for rule in rules:  # what the steps create or read at run time (inferenceservices, workflows, ...)
        for rule_group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                if rule_group in OPTIONAL_GROUPS and not OPTIONAL_GROUPS[rule_group](cfg):
                    continue  # granted for a router this configuration does not use
                if is_custom_group(rule_group) and "/" not in resource:
                    kind_guess = next((k for k in ARGO_EVENTS_KINDS if resource_plural(k) == resource), resource)
                    _add_crd(req, Crd(f"{resource}.{rule_group}", rule_group, component_of(rule_group, kind_guess)))
    if kind == "Namespace":
        labels = meta.get("labels") or {}
        req.namespaces[meta["name"]] = (labels.get(ENFORCE_LABEL, ""), file)
    if kind == "EventBus":
        req.event_bus_version = ((doc.get("spec") or {}).get("jetstream") or {}).get("version")
        req.event_bus = (meta["name"], meta.get("namespace") or namespace, file)
    if kind in ARGO_WORKFLOW_KINDS or kind == "CronWorkflow":
        req.workflow_pod_contexts.append(workflow_spec(doc).get("securityContext") or {})
    if kind == "ConfigMap" and _is_argo_controller_config(meta):
        req.controller_file = file
    for name, key, ref_ns in secret_refs(doc):
        keys = req.secrets.setdefault((ref_ns or namespace, name), set())
        if key:
            keys.add(key)


def _add_crd(req: Requirements, crd: Crd) -> None:
    """Keep one entry per CRD; one that names its kind and version (a document) beats an RBAC rule's."""
    known = req.crds.get(crd.name)
    if known is None or (known.kind is None and crd.kind is not None):
        req.crds[crd.name] = crd


def _is_argo_controller_config(meta: dict[str, Any]) -> bool:
    from pipelines.platform.argo_controller import CONTROLLER_CONFIGMAP, CONTROLLER_NAMESPACE

    return meta.get("name") == CONTROLLER_CONFIGMAP and meta.get("namespace") == CONTROLLER_NAMESPACE
