"""`paddle-mlops preflight`: is this cluster ready for the install set? One line per check, a fix per finding.

Everything it looks for is derived from what `paddle-mlops compile` renders (plus the objects the
steps create at run time: the train step's PaddleJob, the rollout's InferenceService), so a new
kind, namespace or Secret reference is checked without editing this module. Versions are judged
against `paddle_mlops/versions.py`. Secrets are checked by name only: each is read as
PartialObjectMetadata, so the API server never sends their data. Exit 0 ready, 1 findings,
2 bad usage or an unreachable cluster.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException
from rich.console import Console
from rich.text import Text

from paddle_mlops import lint
from paddle_mlops.cluster_requirements import ENFORCE_LABEL, Requirements, requirements
from paddle_mlops.config import PipelineConfig
from paddle_mlops.contracts import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE
from paddle_mlops.versions import MATRIX, at_least
from pipelines.platform import argo_controller

OK, WARNING, FINDING = "ok", "warning", "finding"
# What the API server answers with metadata only (kubectl uses it for `get -o name`): no `data`.
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
TIMEOUT_S = 15
# Secret keys that hold a file's content (certificates, keys, docker config); others get a literal.
FILE_KEY = re.compile(r"^\.|\.(crt|key|pem|pub|json|dockerconfigjson)$")
INSTALL = {
    "argo-workflows": "kubectl create namespace argo; kubectl apply -n argo --server-side -f "
    "https://github.com/argoproj/argo-workflows/releases/download/v{v}/install.yaml",
    "argo-events": "kubectl create namespace argo-events; kubectl apply -f "
    "https://raw.githubusercontent.com/argoproj/argo-events/v{v}/manifests/install.yaml",
    "kserve": "helm install kserve-crd oci://ghcr.io/kserve/charts/kserve-crd --version v{v} && helm install "
    "kserve-resources oci://ghcr.io/kserve/charts/kserve-resources --version v{v} -n kserve --create-namespace",
    "kyverno": "kubectl create -f https://github.com/kyverno/kyverno/releases/download/v{v}/install.yaml",
    "prometheus-operator": "kubectl create -f "
    "https://github.com/prometheus-operator/prometheus-operator/releases/download/v{v}/bundle.yaml",
    "training-operator": 'kubectl apply --server-side -k "github.com/kubeflow/training-operator.git/'
    'manifests/overlays/standalone?ref=v{v}"',
    "paddle-operator": "kubectl apply -f https://raw.githubusercontent.com/PaddleFlow/paddle-operator/v{v}/deploy/v1/"
    "crd.yaml -f https://raw.githubusercontent.com/PaddleFlow/paddle-operator/v{v}/deploy/v1/operator.yaml",
    "knative-serving": "kubectl apply -f https://github.com/knative/serving/releases/download/knative-v{v}/"
    "serving-crds.yaml -f https://github.com/knative/serving/releases/download/knative-v{v}/serving-core.yaml",
}


class PreflightUsageError(Exception):
    """Bad input before any check can run (kubeconfig, context, unreachable API); exit 2."""


@dataclass(frozen=True)
class Result:
    check: str
    subject: str
    status: str
    message: str
    fix: str = ""


def install_fix(component: str) -> str:
    return INSTALL[component].format(v=MATRIX[component].tested)


# --- controllers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Controller:
    """How a component's controller Deployment is recognised: its image repository (any registry)."""

    component: str
    image: str
    first_arg: str | None = None  # argo-events' image also runs every EventSource and Sensor
    version_label: bool = False  # digest-pinned releases carry the version in this label only


CONTROLLERS = {
    c.component: c
    for c in (
        # argo-workflows manifests/base/workflow-controller/workflow-controller-deployment.yaml
        Controller("argo-workflows", "argoproj/workflow-controller"),
        # argo-events manifests/install.yaml: Deployment controller-manager, args [controller]
        Controller("argo-events", "argoproj/argo-events", first_arg="controller"),
        # kserve config/manager/manager.yaml, charts/_common/kserve-resources-specific.yaml
        Controller("kserve", "kserve/kserve-controller"),
        # kyverno charts/kyverno/values.yaml admissionController image (its version label is the chart's)
        Controller("kyverno", "kyverno/kyverno"),
        Controller("prometheus-operator", "prometheus-operator/prometheus-operator"),
        # training-operator manifests/overlays/standalone: tag v1-<commit>, not a release number
        Controller("training-operator", "kubeflow/training-operator"),
        Controller("paddle-operator", "paddlecloud/controller"),
        # knative serving config/core/deployments/controller.yaml; releases pin by digest
        Controller("knative-serving", "knative.dev/serving/cmd/controller", version_label=True),
    )
}


# --- the API layer (injectable: tests pass stand-ins of the client's API classes) -----------------


class KubernetesApi:
    """The read-only calls preflight makes, over the official client's API classes."""

    def __init__(self, version: Any, core: Any, apps: Any, extensions: Any, custom: Any, where: str = "") -> None:
        self.version, self.core, self.apps, self.extensions, self.custom = version, core, apps, extensions, custom
        self.where = where
        self._deployments: list[Any] | None = None

    @classmethod
    def connect(cls, kubeconfig: str | None = None, context: str | None = None) -> KubernetesApi:
        """From a kubeconfig (KUBECONFIG / ~/.kube/config by default), else the in-cluster account."""
        from kubernetes import client, config

        if kubeconfig is not None:
            path = Path(kubeconfig)
            if not path.is_file():
                raise PreflightUsageError(f"kubeconfig {path} does not exist or is not a file. Pass --kubeconfig PATH.")
        try:
            api_client = config.new_client_from_config(config_file=kubeconfig, context=context)
        except config.ConfigException as exc:
            if kubeconfig is None and context is None:
                try:
                    config.load_incluster_config()
                    api_client = client.ApiClient()
                except config.ConfigException:
                    raise PreflightUsageError(
                        f"no Kubernetes credentials ({exc}). Set KUBECONFIG, pass --kubeconfig PATH, "
                        "or run inside the cluster."
                    ) from None
            else:
                raise PreflightUsageError(_kubeconfig_problem(kubeconfig, context, exc)) from None
        except (OSError, yaml.YAMLError, ValueError) as exc:
            raise PreflightUsageError(f"cannot read kubeconfig {kubeconfig or '~/.kube/config'}: {exc}") from None
        where = f"context {context or _current_context(kubeconfig)} at {api_client.configuration.host}"
        return cls(
            client.VersionApi(api_client),
            client.CoreV1Api(api_client),
            client.AppsV1Api(api_client),
            client.ApiextensionsV1Api(api_client),
            client.CustomObjectsApi(api_client),
            where,
        )

    def server_version(self) -> str:
        return str(self.version.get_code(_request_timeout=TIMEOUT_S).git_version)

    def custom_resource_definitions(self) -> list[Any]:
        return list(self.extensions.list_custom_resource_definition(_request_timeout=TIMEOUT_S).items)

    def namespace(self, name: str) -> Any:
        return self.core.read_namespace(name, _request_timeout=TIMEOUT_S)

    def config_map(self, name: str, namespace: str) -> Any:
        return self.core.read_namespaced_config_map(name, namespace, _request_timeout=TIMEOUT_S)

    def secret_exists(self, name: str, namespace: str) -> bool:
        """Asks for PartialObjectMetadata, so the response carries no `data`; nothing is decoded but the name."""
        try:
            response = self.core.read_namespaced_secret(
                name, namespace, _headers={"Accept": METADATA_ONLY}, _preload_content=False, _request_timeout=TIMEOUT_S
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return bool(((json.loads(response.data) or {}).get("metadata") or {}).get("name") == name)

    def deployments(self) -> list[Any]:
        """Every Deployment of the cluster, listed once per preflight run (three checks read them)."""
        if self._deployments is None:
            self._deployments = list(self.apps.list_deployment_for_all_namespaces(_request_timeout=TIMEOUT_S).items)
        return self._deployments

    def event_bus(self, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            return dict(
                self.custom.get_namespaced_custom_object(
                    "argoproj.io", "v1alpha1", namespace, "eventbus", name, _request_timeout=TIMEOUT_S
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise


def _current_context(kubeconfig: str | None) -> str:
    from kubernetes import config

    try:
        return str(config.list_kube_config_contexts(config_file=kubeconfig)[1]["name"])
    except Exception:  # noqa: BLE001 - in-cluster credentials have no kubeconfig context
        return "(in-cluster)"


def _kubeconfig_problem(kubeconfig: str | None, context: str | None, exc: Exception) -> str:
    from kubernetes import config

    where = kubeconfig or "the default kubeconfig (KUBECONFIG or ~/.kube/config)"
    try:
        contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
    except Exception:  # noqa: BLE001 - the file itself is unusable; say so below
        contexts = None
    if context and contexts is not None and context not in {c["name"] for c in contexts}:
        names = ", ".join(sorted(c["name"] for c in contexts)) or "none"
        return f"context {context!r} is not in {where} (it has: {names}). Pass --context with one of them."
    return f"cannot use {where}: {exc}. Fix the file or pass --kubeconfig PATH."


# --- checks: each returns Results; an API error other than "not found" becomes a finding -----------


def check_kubernetes(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    minimum = MATRIX["kubernetes"].minimum
    version = api.server_version()
    if at_least(version, minimum):
        yield Result("kubernetes", "server", OK, f"{version} (minimum {minimum})")
    else:
        yield Result(
            "kubernetes",
            "server",
            FINDING,
            f"{version} is older than the supported minimum {minimum} ({MATRIX['kubernetes'].why})",
            f"upgrade the control plane to Kubernetes {minimum} or newer (tested: {MATRIX['kubernetes'].tested})",
        )


def image_version(image: str) -> tuple[str, str | None]:
    """(repository, release version from the tag or None) for `registry/repo:tag@sha256:…`."""
    name = image.split("@", 1)[0]
    repo, tag = name, None
    if ":" in name.rsplit("/", 1)[-1]:
        repo, tag = name.rsplit(":", 1)
    if tag and re.fullmatch(r"v?\d+\.\d+(\.\d+)?([-+][\w.-]*)?", tag):
        return repo, tag
    return repo, None


def runs(controller: Controller, container: Any) -> bool:
    """Is `container` this component's controller (image repository on any registry, first argument)?"""
    repo, _ = image_version(container.image or "")
    if repo != controller.image and not repo.endswith("/" + controller.image):
        return False
    return not controller.first_arg or (container.args or [None])[0] == controller.first_arg


def _controller_of(controller: Controller, deployment: Any) -> tuple[str, str | None] | None:
    """(image, version) when `deployment` runs `controller`, else None."""
    for container in deployment.spec.template.spec.containers or []:
        if not runs(controller, container):
            continue
        _, version = image_version(container.image)
        if version is None and controller.version_label:
            version = (deployment.metadata.labels or {}).get("app.kubernetes.io/version")
            version = version if version and re.match(r"^v?\d+\.\d+", version) else None
        return container.image, version
    return None


def check_controllers(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    deployments = api.deployments()
    for component in (c for c in req.components if c in CONTROLLERS):
        yield _controller_result(CONTROLLERS[component], deployments)


def _controller_result(controller: Controller, deployments: list[Any]) -> Result:
    spec = MATRIX[controller.component]
    found = [(d, hit) for d in deployments if (hit := _controller_of(controller, d))]
    subject = controller.component
    if not found:
        return Result(
            "controller", subject, FINDING, f"no Deployment runs {controller.image} ({spec.name})",
            install_fix(controller.component),
        )
    found.sort(key=lambda f: -((f[0].status.ready_replicas or 0) if f[0].status else 0))
    deployment, (image, version) = found[0]
    where = f"{deployment.metadata.namespace}/{deployment.metadata.name}"
    ready = (deployment.status.ready_replicas or 0) if deployment.status else 0
    if ready < 1:
        return Result(
            "controller", subject, FINDING, f"Deployment {where} ({image}) has no ready replica",
            f"kubectl -n {deployment.metadata.namespace} describe deployment {deployment.metadata.name}; "
            f"kubectl -n {deployment.metadata.namespace} logs deployment/{deployment.metadata.name}",
        )
    if version is None:
        return Result(
            "controller", subject, WARNING,
            f"{where} runs {image}: version unknown (the tag is no release number); "
            f"make sure it is {spec.name} {spec.minimum} or newer",
        )
    if not at_least(version, spec.minimum):
        return Result(
            "controller", subject, FINDING,
            f"{where} runs {version}, older than the supported minimum {spec.minimum} ({spec.why})",
            f"upgrade: {install_fix(controller.component)}",
        )
    return Result("controller", subject, OK, f"{where} runs {version}, ready (minimum {spec.minimum})")


def check_crds(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    live = api.custom_resource_definitions()
    for crd in sorted(req.crds.values(), key=lambda c: c.name):
        match = next((c for c in live if c.metadata.name == crd.name), None) or next(
            (c for c in live if c.spec.group == crd.group and crd.kind and c.spec.names.kind == crd.kind), None
        )
        owner = MATRIX[crd.component].name if crd.component in MATRIX else f"the owner of {crd.group}"
        fix = install_fix(crd.component) if crd.component in INSTALL else f"install {owner}"
        if match is None:
            kind = f"kind {crd.kind}, " if crd.kind else ""
            yield Result("crd", crd.name, FINDING, f"missing ({kind}installed by {owner})", fix)
            continue
        served = [v.name for v in match.spec.versions or [] if v.served]
        if crd.version and crd.version not in served:
            message = f"serves {', '.join(served) or 'no version'}, not {crd.version} (an older {owner}?)"
            yield Result("crd", crd.name, FINDING, message, f"upgrade: {fix}")
        else:
            yield Result("crd", crd.name, OK, f"present ({', '.join(served)})")


def check_namespaces(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    for name, (level, file) in sorted(req.namespaces.items()):
        try:
            namespace = api.namespace(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            yield Result("namespace", name, FINDING, "does not exist", f"kubectl apply -f argo/{file}")
            continue
        have = (namespace.metadata.labels or {}).get(ENFORCE_LABEL)
        if have == level:
            yield Result("namespace", name, OK, f"{ENFORCE_LABEL}={level}")
        else:
            yield Result(
                "namespace", name, FINDING, f"{ENFORCE_LABEL} is {have or 'unset'}, the install set declares {level}",
                f"kubectl label --overwrite namespace {name} {ENFORCE_LABEL}={level} (or kubectl apply -f argo/{file})",
            )


def controller_configmap(deployments: list[Any]) -> tuple[str, str]:
    """(name, namespace) of the ConfigMap the live workflow-controller reads: its `--configmap` flag
    (argo-workflows cmd/workflow-controller/main.go; Helm sets `<release>-workflow-controller-configmap`)
    in its own namespace; the upstream install's names when no controller is found."""
    name, namespace = argo_controller.CONTROLLER_CONFIGMAP, argo_controller.CONTROLLER_NAMESPACE
    for deployment in deployments:
        for container in deployment.spec.template.spec.containers or []:
            if not runs(CONTROLLERS["argo-workflows"], container):
                continue
            words = [*(container.command or []), *(container.args or [])]
            for i, word in enumerate(words):
                if word == "--configmap" and i + 1 < len(words):
                    return words[i + 1], deployment.metadata.namespace
                if word.startswith("--configmap="):
                    return word.split("=", 1)[1], deployment.metadata.namespace
            return name, deployment.metadata.namespace
    return name, namespace


def check_argo_executor(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    name, namespace = controller_configmap(api.deployments())
    subject = f"{namespace}/{name}"
    helm = json.dumps(argo_controller.executor_security_context())
    fix = (f"kubectl apply -f argo/{req.controller_file}" if req.controller_file else f"set key executor of {subject}")
    fix += f" (Helm chart argo/argo-workflows: executor.securityContext={helm})"
    try:
        config_map = api.config_map(name, namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise
        yield Result("argo-executor", subject, FINDING, "ConfigMap not found: the init/wait containers get no securityContext", fix)
        return
    executor = lint.executor_setting(config_map.data or {})
    container = {"name": "wait", "securityContext": executor.get("securityContext") or {}}
    problems = sorted(
        {
            f"{rule}: {message}"
            for pod_context in req.workflow_pod_contexts or [{}]
            for _, rule, message, _ in lint.check_pod(lint.Pod("executor", {"securityContext": pod_context}, {}, [container]))
            if rule in lint.RESTRICTED_RULES
        }
    )
    if problems:
        yield Result("argo-executor", subject, FINDING, "executor securityContext is not restricted: " + "; ".join(problems), fix)
    else:
        yield Result("argo-executor", subject, OK, "executor securityContext meets the restricted profile")


def check_knative_features(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    """Serverless predictors set nodeSelector and tolerations, which Knative lets through only when
    their config-features flags are not `disabled` (knative/serving pkg/apis/serving/fieldmask.go)."""
    from pipelines.platform import knative

    if "knative-serving" not in req.components:
        return
    subject = f"{knative.FEATURES_NAMESPACE}/{knative.FEATURES_CONFIGMAP}"
    fix = "kubectl apply -f argo/knative.yaml"
    try:
        data = api.config_map(knative.FEATURES_CONFIGMAP, knative.FEATURES_NAMESPACE).data or {}
    except ApiException as exc:
        if exc.status != 404:
            raise
        data = {}
    # features.go: a missing key is the default, `disabled`; Allowed and Enabled both pass the mask.
    off = sorted(flag for flag in knative.feature_flags() if str(data.get(flag, "disabled")).lower() == "disabled")
    if off:
        yield Result(
            "knative-features", subject, FINDING,
            f"{', '.join(off)} disabled: Knative refuses the regional predictors (nodeSelector, tolerations)", fix,
        )
    else:
        yield Result("knative-features", subject, OK, "nodeSelector and tolerations are allowed on predictors")


def check_secrets(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    for (namespace, name), keys in sorted(req.secrets.items()):
        if api.secret_exists(name, namespace):
            yield Result("secret", f"{namespace}/{name}", OK, "exists")
            continue
        sources = " ".join(
            f"--from-file={k}=<file>" if FILE_KEY.search(k) else f"--from-literal={k}=<value>" for k in sorted(keys)
        ) or "--from-file=<directory>"
        yield Result(
            "secret", f"{namespace}/{name}", FINDING, "missing",
            f"kubectl create secret generic {name} -n {namespace} {sources}",
        )


def controller_namespace(deployments: list[Any], component: str) -> str | None:
    """Where the component's controller runs (its config lives beside it), if it runs."""
    return next((d.metadata.namespace for d in deployments if _controller_of(CONTROLLERS[component], d)), None)


def check_event_bus(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    from pipelines.platform import events

    if req.event_bus_version is None:
        return
    namespace = controller_namespace(api.deployments(), "argo-events") or "argo-events"
    subject = f"{namespace}/{events.CONTROLLER_CONFIGMAP}"
    try:
        config_map = api.config_map(events.CONTROLLER_CONFIGMAP, namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise
        yield Result("eventbus", subject, FINDING, "controller config not found", install_fix("argo-events"))
        return
    listed = jetstream_versions(config_map.data or {})
    if req.event_bus_version in listed:
        yield Result("eventbus", subject, OK, f"jetstream version {req.event_bus_version} is listed")
    else:
        yield Result(
            "eventbus", subject, FINDING,
            f"jetstream version {req.event_bus_version} is not listed (it has: {', '.join(listed) or 'none'}); "
            "the controller refuses the EventBus",
            f"upgrade Argo Events to {MATRIX['argo-events'].minimum} or newer: {install_fix('argo-events')}",
        )
    if req.event_bus:
        yield from _event_bus_status(api, *req.event_bus)


def _event_bus_status(api: KubernetesApi, name: str, namespace: str, file: str) -> Iterator[Result]:
    """An applied EventBus whose controller said Deployed=False (argo-events eventbus_types.go MarkDeployFailed)."""
    bus = api.event_bus(name, namespace)
    conditions = ((bus or {}).get("status") or {}).get("conditions") or []
    failed = next((c for c in conditions if c.get("type") == "Deployed" and c.get("status") == "False"), None)
    if failed:
        yield Result(
            "eventbus", f"{namespace}/{name}", FINDING,
            f"not deployed: {failed.get('reason', '')} {failed.get('message', '')}".strip(),
            f"kubectl -n {namespace} describe eventbus {name}; after fixing the cause, kubectl apply -f argo/{file}",
        )


def jetstream_versions(data: dict[str, str]) -> list[str]:
    """`eventBus.jetstream.versions[].version` of the file viper finds as /etc/argo-events/controller-config.*
    (argo-events pkg/reconciler/config.go LoadConfig; install.yaml ships key controller-config.yaml)."""
    key = next((k for k in ("controller-config.json", "controller-config.yaml", "controller-config.yml",
                            "controller-config") if k in data), None)
    parsed = yaml.safe_load(data[key]) if key else None
    jetstream = ((parsed or {}).get("eventBus") or {}).get("jetstream") or {} if isinstance(parsed, dict) else {}
    return [str(v.get("version")) for v in jetstream.get("versions") or [] if isinstance(v, dict)]


CHECKS = (
    ("kubernetes", check_kubernetes),
    ("controller", check_controllers),
    ("crd", check_crds),
    ("namespace", check_namespaces),
    ("argo-executor", check_argo_executor),
    ("knative-features", check_knative_features),
    ("secret", check_secrets),
    ("eventbus", check_event_bus),
)


# --- running and reporting --------------------------------------------------------------------------


def run_checks(api: KubernetesApi, req: Requirements) -> list[Result]:
    """Every check's results; a refused read is a finding, an unreachable API server a usage error."""
    from urllib3.exceptions import HTTPError

    results: list[Result] = []
    for name, check in CHECKS:
        try:
            results.extend(check(api, req))
        except ApiException as exc:
            results.append(
                Result(
                    name, "(api)", FINDING, f"the API server refused a read: {exc.status} {exc.reason}",
                    "run preflight with an account that may get/list CRDs, Deployments, Namespaces, ConfigMaps "
                    "and Secret metadata (for example a cluster-admin context)",
                )
            )
        except (HTTPError, OSError) as exc:
            raise PreflightUsageError(
                f"cannot reach the Kubernetes API server ({api.where or 'current context'}): {exc}. "
                "Check the context, the network/VPN and that the cluster is up."
            ) from None
    return results


STYLES = {OK: "green", WARNING: "yellow", FINDING: "bold red"}


def render(results: Sequence[Result], console: Console) -> None:
    width = max((len(f"{r.check} {r.subject}") for r in results), default=0)
    for r in results:
        line = Text(f"{r.status:<8}", style=STYLES[r.status])
        line.append(f" {f'{r.check} {r.subject}':<{width}}  {r.message}")
        console.print(line, highlight=False)
        if r.fix:
            console.print(Text(f"{'':<8}   fix: {r.fix}"), highlight=False)
    counts = {s: sum(r.status == s for r in results) for s in (OK, WARNING, FINDING)}
    verdict = "ready" if not counts[FINDING] else "not ready"
    console.print(
        Text(f"{counts[OK]} ok, {counts[WARNING]} warning(s), {counts[FINDING]} finding(s): {verdict}.",
             style=STYLES[FINDING if counts[FINDING] else OK]),
        highlight=False,
    )


def preflight(
    cfg: PipelineConfig,
    console: Console,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    as_json: bool = False,
    api: KubernetesApi | None = None,
) -> int:
    """Check the cluster of `context` against the install set of `cfg`; the exit code."""
    try:
        api = api or KubernetesApi.connect(kubeconfig, context)
        results = run_checks(api, requirements(cfg))
    except PreflightUsageError as exc:
        console.file.flush()
        import sys

        print(f"preflight: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if as_json:
        console.out(json.dumps([asdict(r) for r in results], indent=2, ensure_ascii=False), highlight=False)
    else:
        render(results, console)
    return EXIT_FINDINGS if any(r.status == FINDING for r in results) else EXIT_OK
