"""Every pod a manifest will create, with the context the lint rules need.

Pods are rendered from Argo Workflow/WorkflowTemplate/CronWorkflow templates (container and script
templates with their sidecars and init containers; resource templates' embedded manifests),
Deployments/StatefulSets/DaemonSets/Jobs/CronJobs/Pods, PaddleJobs of both operators, Trainer v2
ClusterTrainingRuntimes and TrainJobs (on their runtime, see lint/trainjob.py),
InferenceServices, Argo Events EventSource/Sensor pod templates and JetStream EventBus pods (with
the images the Argo Events controller gives them, see `events_images`). Argo's executor containers
are added as the controller adds them: `init` in every pod, `wait` beside a container/script/containerSet
template's main, and a resource template's `main` running argoexec (see `executor`), with the image
the controller gives them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from paddle_mlops.lint.documents import document_name, resource_manifest, workflow_spec
from paddle_mlops.lint.events_images import EventsImages
from paddle_mlops.lint.executor import executor_container
from paddle_mlops.lint.trainjob import pod_template, replicated_jobs, trainjob_pod_templates
from pipelines.platform.events_controller import PARTIAL

EXEMPT_ANNOTATION = "paddle-mlops/pod-security-exempt"
ARGO_WORKFLOW_KINDS = {"Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate"}
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}
POD_TEMPLATE_TYPES = ("container", "script", "resource", "containerSet")


@dataclass
class Pod:
    """One pod the manifests will create, with the context the rules need."""

    label: str
    spec: dict[str, Any]
    annotations: dict[str, Any]
    containers: list[dict[str, Any]]
    argo_template: dict[str, Any] | None = None
    argo_defaults: dict[str, Any] | None = None
    service_account: str | None = None
    automount: bool | None = None

    @property
    def exempt(self) -> bool:
        return EXEMPT_ANNOTATION in (self.annotations or {})


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec.get("containers", []), *spec.get("ephemeralContainers", [])]


def _pod(label: str, spec: dict[str, Any], annotations: dict[str, Any] | None = None) -> Pod:
    return Pod(
        label,
        spec,
        annotations or {},
        _containers(spec),
        service_account=spec.get("serviceAccountName") or spec.get("serviceAccount"),
        automount=spec.get("automountServiceAccountToken"),
    )


def _from_pod_template(label: str, template: dict[str, Any]) -> Pod:
    return _pod(label, template.get("spec") or {}, (template.get("metadata") or {}).get("annotations"))


def _argo_pods(
    spec: dict[str, Any], executor: dict[str, Any] | None = None, runtimes: dict[str, Any] | None = None
) -> Iterator[Pod]:
    for template in spec.get("templates", []):
        kind = next((t for t in POD_TEMPLATE_TYPES if t in template), None)
        if kind == "resource":
            yield from _resource_template_pods(template, spec, executor, runtimes)
        elif kind is not None:
            yield from _embedded_pods(template, runtimes)  # a train step's training job
            yield _container_template_pod(template, kind, spec, executor)


def _resource_template_pods(
    template: dict[str, Any],
    spec: dict[str, Any],
    executor: dict[str, Any] | None,
    runtimes: dict[str, Any] | None,
) -> Iterator[Pod]:
    label = f"template {template.get('name', '?')}"
    yield from _embedded_pods(template, runtimes)
    # The resource template itself runs argoexec as `main` beside `init`, and `wait` only when it saves its logs
    # (workflowpod.go: needsAuxCtr is false for resource templates unless tmpl.SaveLogsAsArtifact(), which
    # IsArchiveLogs sets from the workflow's archiveLogs or the template's archiveLocation.archiveLogs).
    archives = bool((template.get("archiveLocation") or {}).get("archiveLogs", spec.get("archiveLogs")))
    names = ("init", "wait", "main") if archives else ("init", "main")
    yield Pod(
        label,
        # The pod securityContext applies to every pod the template makes (addSchedulingConstraints).
        {"securityContext": template.get("securityContext", spec.get("securityContext", {}))},
        (template.get("metadata") or {}).get("annotations") or {},
        [executor_container(n, executor, resource_template=True) for n in names],
        argo_template=template,
        argo_defaults=spec.get("templateDefaults") or {},
        service_account="(executor)",
    )


def _embedded_pods(template: dict[str, Any], runtimes: dict[str, Any] | None) -> Iterator[Pod]:
    """The pods of the object the template creates (a resource template's manifest, a train step's job)."""
    embedded = resource_manifest(template)
    if embedded is not None:
        for pod in pods_of(embedded, runtimes=runtimes):
            pod.label = f"template {template.get('name', '?')} > {document_name(embedded)} {pod.label}"
            yield pod


def _container_template_pod(
    template: dict[str, Any], kind: str, spec: dict[str, Any], executor: dict[str, Any] | None
) -> Pod:
    if kind == "containerSet":
        main = list(template["containerSet"].get("containers", []))
    else:
        main = [dict(template[kind], name=template[kind].get("name") or "main")]
    pod_spec = {
        "securityContext": template.get("securityContext", spec.get("securityContext", {})),
        "volumes": [*spec.get("volumes", []), *template.get("volumes", [])],
    }
    # `init` comes first among the init containers, then the template's; `wait` is the first
    # container (build: newInitContainers, then auxContainer before the main containers).
    return Pod(
        f"template {template.get('name', '?')}",
        pod_spec,
        (template.get("metadata") or {}).get("annotations") or {},
        [
            executor_container("init", executor, resource_template=False),
            *template.get("initContainers", []),
            executor_container("wait", executor, resource_template=False),
            *main,
            *template.get("sidecars", []),
        ],
        argo_template=template,
        argo_defaults=spec.get("templateDefaults") or {},
        service_account=template.get("serviceAccountName") or spec.get("serviceAccountName"),
        automount=template.get("automountServiceAccountToken", spec.get("automountServiceAccountToken")),
    )


def _inference_service_pods(spec: dict[str, Any]) -> Iterator[Pod]:
    for component in ("predictor", "transformer", "explainer"):
        part = spec.get(component)
        if not isinstance(part, dict):
            continue
        pod_spec = dict(part)
        containers = list(part.get("containers", []))
        model = part.get("model")
        if isinstance(model, dict) and model.get("image"):
            containers.append(dict(model, name=model.get("name") or "kserve-container"))
        pod_spec["containers"] = containers
        yield _pod(component, pod_spec)


def _paddle_job_pods(spec: dict[str, Any]) -> Iterator[Pod]:
    # kubeflow.org/v1: paddleReplicaSpecs.<Type>.template; batch.paddlepaddle.org/v1: worker/ps/heter.
    replicas = spec.get("paddleReplicaSpecs") or {
        k: spec[k] for k in ("ps", "worker", "heter") if isinstance(spec.get(k), dict)
    }
    for replica, rspec in replicas.items():
        yield _from_pod_template(f"replica {replica}", rspec.get("template") or {})


def _trainjob_pods(doc: dict[str, Any], runtimes: dict[str, Any] | None) -> Iterator[Pod]:
    name = ((doc.get("spec") or {}).get("runtimeRef") or {}).get("name", "?")
    runtime = (runtimes or {}).get(name)
    if runtime is None:
        # Without its runtime only the trainer block is known: a pod with just that container.
        trainer = (doc.get("spec") or {}).get("trainer") or {}
        container = {"name": "node", **{k: trainer[k] for k in ("image", "command", "env") if k in trainer}}
        if "resourcesPerNode" in trainer:
            container["resources"] = trainer["resourcesPerNode"]
        yield _pod(f"node (runtime {name} is not among the linted files)", {"containers": [container]})
        return
    for job, template in trainjob_pod_templates(doc, runtime):
        yield _from_pod_template(f"replicated job {job} (runtime {name})", template)


def _event_bus_pods(spec: dict[str, Any], events: EventsImages) -> Iterator[Pod]:
    """A JetStream bus's StatefulSet pod (argo-events installer/jetstream.go): main, reloader and metrics, each with
    its container template's securityContext and resources, the pod with `jetstream.securityContext`."""
    jetstream = spec.get("jetstream")
    if not isinstance(jetstream, dict):
        return
    templates = {
        "main": "containerTemplate",
        "reloader": "reloaderContainerTemplate",
        "metrics": "metricsContainerTemplate",
    }
    containers = []
    for name, image in events.bus_images(str(jetstream.get("version", ""))):
        template = jetstream.get(templates[name]) or {}
        extra = {k: template[k] for k in ("securityContext", "resources") if k in template}
        containers.append({"name": name, "image": image, **extra})
    pod_spec = {
        "securityContext": jetstream.get("securityContext") or {},
        "containers": containers,
        **({"serviceAccountName": jetstream["serviceAccountName"]} if jetstream.get("serviceAccountName") else {}),
    }
    yield _pod(f"jetstream {jetstream.get('version', '?')}", pod_spec)


def pods_of(
    doc: dict[str, Any],
    executor: dict[str, Any] | None = None,
    runtimes: dict[str, Any] | None = None,
    events: EventsImages | None = None,
) -> Iterator[Pod]:
    """Every pod one manifest will create (nested manifests of resource templates included);
    `executor` is the workflow controller's executor setting (see `controller_executor`), `runtimes`
    the ClusterTrainingRuntimes a TrainJob may name (see lint/trainjob.py), `events` the images the Argo
    Events controller gives its pods (upstream's defaults when None)."""
    events = events or EventsImages()
    if PARTIAL in ((doc.get("metadata") or {}).get("annotations") or {}):
        return  # a few fields of an upstream object (events_controller.py), not a pod template of ours
    kind, spec = doc.get("kind"), doc.get("spec") or {}
    if kind in ARGO_WORKFLOW_KINDS or kind == "CronWorkflow":
        yield from _argo_pods(workflow_spec(doc), executor, runtimes)
    elif kind in WORKLOAD_KINDS:
        yield _from_pod_template("pod", spec.get("template") or {})
    elif kind == "CronJob":
        yield _from_pod_template("pod", ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {})
    elif kind == "Pod":
        yield _pod("pod", spec, (doc.get("metadata") or {}).get("annotations"))
    elif kind == "PaddleJob":
        yield from _paddle_job_pods(spec)
    elif kind == "ClusterTrainingRuntime":
        for job in replicated_jobs(doc):
            yield _from_pod_template(f"replicated job {job.get('name', '?')}", pod_template(job))
    elif kind == "TrainJob":
        yield from _trainjob_pods(doc, runtimes)
    elif kind == "InferenceService":
        yield from _inference_service_pods(spec)
    elif kind in ("EventSource", "Sensor"):
        template: dict[str, Any] = spec["template"] if isinstance(spec.get("template"), dict) else {}
        container = dict(template.get("container") or {}, name="main", image=events.image)
        pod_spec = {k: v for k, v in template.items() if k != "container"}
        yield _pod("pod", dict(pod_spec, containers=[container]))
    elif kind == "EventBus":
        yield from _event_bus_pods(spec, events)
