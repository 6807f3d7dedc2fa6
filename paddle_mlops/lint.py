"""`paddle-mlops lint`: policy checks on every pod the manifests will create.

Pods are rendered from Argo Workflow/WorkflowTemplate/CronWorkflow templates (container and script
templates with their sidecars and init containers; resource templates' embedded manifests),
Deployments/StatefulSets/DaemonSets/Jobs/CronJobs/Pods, PaddleJobs of both operators,
InferenceServices, and Argo Events EventSource/Sensor pod templates (their image is the
controller's, so only the other rules apply). Argo's own executor containers are modelled as the
controller adds them (argo-workflows v4.1.2 workflow/controller/workflowpod.go): `init` in every
pod, `wait` beside a container/script/containerSet template's main, and a resource template's
`main` running argoexec. Their securityContext and resources come from the controller's `executor`
setting, read from a `workflow-controller-configmap` among the linted documents; without one they
are nil, as upstream's default is (resource pods then get upstream's locked-down default).

Rules: the six Pod Security "restricted" controls, pinned images (a digest when `--env prod`),
requests and limits, secrets only by reference, retry and deadline on every pod-creating Argo
template, and no token-bearing `default` service account. A pod (or Argo template) annotated
`paddle-mlops/pod-security-exempt: <reason>` is exempt from the six restricted rules only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from paddle_mlops.contracts import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, RUN_AS_USER
from pipelines.platform.argo_controller import CONTROLLER_CONFIGMAP

EXEMPT_ANNOTATION = "paddle-mlops/pod-security-exempt"
RESTRICTED_RULES = (
    "run-as-non-root",
    "run-as-user",
    "allow-privilege-escalation",
    "capabilities",
    "seccomp",
    "volume-types",
)
ALLOWED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SECRET_WORDS = {"KEY", "SECRET", "PASSWORD", "PASSWD", "TOKEN", "CREDENTIALS"}
ARGO_WORKFLOW_KINDS = {"Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate"}
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}
POD_TEMPLATE_TYPES = ("container", "script", "resource", "containerSet")
# What argoexec's containers get when a resource template runs without an executor securityContext
# (argo-workflows v4.1.2 workflow/common/security_context.go MinimalCtrSC; readOnlyRootFilesystem
# left out: no rule here reads it).
ARGO_RESOURCE_DEFAULT_SECURITY_CONTEXT: dict[str, Any] = {
    "capabilities": {"drop": ["ALL"]},
    "privileged": False,
    "runAsNonRoot": True,
    "runAsUser": 8737,
    "allowPrivilegeEscalation": False,
    "seccompProfile": {"type": "RuntimeDefault"},
}
# Marks the modelled argoexec containers, whose fix belongs in the controller's config.
EXECUTOR_MARK = "x-paddle-mlops-argo-executor"
EXECUTOR_FIX = f"in the `executor` setting of the Argo {CONTROLLER_CONFIGMAP} (argo/argo-controller.yaml)"


@dataclass(frozen=True)
class Finding:
    file: str
    document: str
    container: str
    rule: str
    message: str
    fix: str


class LintInputError(Exception):
    """A path or file the linter cannot read; the message says which and why."""


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


# --- reading -------------------------------------------------------------------------------------


def _yaml_files(paths: Iterable[str | Path]) -> Iterator[Path]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
        elif path.is_file():
            yield path
        else:
            raise LintInputError(f"{path} does not exist. Pass a manifest file or a directory such as argo/.")


def _load(path: Path) -> list[dict[str, Any]]:
    try:
        docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except yaml.YAMLError as exc:
        raise LintInputError(
            f"{path} is not valid YAML ({exc}). Fix it or regenerate it with `paddle-mlops compile`."
        ) from None
    return [d for d in docs if isinstance(d, dict)]


def _name(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    return f"{doc.get('kind', '?')}/{meta.get('name') or meta.get('generateName') or '?'}"


# --- rendering pods ------------------------------------------------------------------------------


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


def executor_setting(data: dict[str, str]) -> dict[str, Any]:
    """The `executor` setting of a workflow-controller ConfigMap's `data`, read as the controller reads
    it (config/controller.go parseConfigMap): a lone `config` key with the whole YAML, or one key per
    setting. {} when unset; yaml.YAMLError when the YAML is broken."""
    if "config" in data:
        settings = yaml.safe_load(data["config"])
        executor = settings.get("executor") if isinstance(settings, dict) else None
    else:
        executor = yaml.safe_load(data.get("executor") or "null")
    return executor if isinstance(executor, dict) else {}


def controller_executor(docs: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The `executor` setting of a workflow-controller ConfigMap among `docs`, None when none is."""
    for doc in docs:
        if doc.get("kind") != "ConfigMap" or (doc.get("metadata") or {}).get("name") != CONTROLLER_CONFIGMAP:
            continue
        try:
            return executor_setting(doc.get("data") or {})
        except yaml.YAMLError as exc:
            raise LintInputError(f"{_name(doc)}: its executor setting is not valid YAML ({exc}).") from None
    return None


def _executor_container(name: str, executor: dict[str, Any] | None, resource_template: bool) -> dict[str, Any]:
    """One argoexec container as workflowpod.go newExecContainer builds it (its image is the controller's)."""
    executor = executor or {}
    security = executor.get("securityContext")
    if security is None and resource_template:
        security = ARGO_RESOURCE_DEFAULT_SECURITY_CONTEXT
    container: dict[str, Any] = {"name": name, EXECUTOR_MARK: True}
    if security is not None:
        container["securityContext"] = security
    if executor.get("resources") is not None:
        container["resources"] = executor["resources"]
    return container


def _argo_pods(doc: dict[str, Any], spec: dict[str, Any], executor: dict[str, Any] | None = None) -> Iterator[Pod]:
    defaults = spec.get("templateDefaults") or {}
    for template in spec.get("templates", []):
        kind = next((t for t in POD_TEMPLATE_TYPES if t in template), None)
        if kind is None:
            continue
        label = f"template {template.get('name', '?')}"
        # The pod securityContext applies to every pod the template makes (addSchedulingConstraints).
        pod_security = template.get("securityContext", spec.get("securityContext", {}))
        exempt = (template.get("metadata") or {}).get("annotations") or {}
        if kind == "resource":
            manifest = template["resource"].get("manifest")
            if manifest:
                try:
                    embedded = yaml.safe_load(manifest)
                except yaml.YAMLError:
                    embedded = None
                if isinstance(embedded, dict):
                    for pod in pods_of(embedded):
                        pod.label = f"{label} > {_name(embedded)} {pod.label}"
                        yield pod
            # The resource template itself runs argoexec as `main` beside `init`; no `wait` (build:
            # needsAuxCtr is false for resource templates unless they save logs as an artifact).
            yield Pod(
                label,
                {"securityContext": pod_security},
                exempt,
                [_executor_container(n, executor, resource_template=True) for n in ("init", "main")],
                argo_template=template,
                argo_defaults=defaults,
                service_account="(executor)",
            )
            continue
        if kind == "containerSet":
            main = list(template["containerSet"].get("containers", []))
        else:
            main = [dict(template[kind], name=template[kind].get("name") or "main")]
        pod_spec = {
            "securityContext": pod_security,
            "volumes": [*spec.get("volumes", []), *template.get("volumes", [])],
        }
        # `init` comes first among the init containers, then the template's; `wait` is the first
        # container (build: newInitContainers, then auxContainer before the main containers).
        yield Pod(
            label,
            pod_spec,
            exempt,
            [
                _executor_container("init", executor, resource_template=False),
                *template.get("initContainers", []),
                _executor_container("wait", executor, resource_template=False),
                *main,
                *template.get("sidecars", []),
            ],
            argo_template=template,
            argo_defaults=defaults,
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


def pods_of(doc: dict[str, Any], executor: dict[str, Any] | None = None) -> Iterator[Pod]:
    """Every pod one manifest will create (nested manifests of resource templates included);
    `executor` is the workflow controller's executor setting (see `controller_executor`)."""
    kind, spec = doc.get("kind"), doc.get("spec") or {}
    if kind in ARGO_WORKFLOW_KINDS:
        yield from _argo_pods(doc, spec, executor)
    elif kind == "CronWorkflow":
        yield from _argo_pods(doc, spec.get("workflowSpec") or {}, executor)
    elif kind in WORKLOAD_KINDS:
        yield _from_pod_template("pod", spec.get("template") or {})
    elif kind == "CronJob":
        yield _from_pod_template("pod", ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {})
    elif kind == "Pod":
        yield _pod("pod", spec, (doc.get("metadata") or {}).get("annotations"))
    elif kind == "PaddleJob":
        # kubeflow.org/v1: paddleReplicaSpecs.<Type>.template; batch.paddlepaddle.org/v1: worker/ps/heter.
        replicas = spec.get("paddleReplicaSpecs") or {
            k: spec[k] for k in ("ps", "worker", "heter") if isinstance(spec.get(k), dict)
        }
        for replica, rspec in replicas.items():
            yield _from_pod_template(f"replica {replica}", rspec.get("template") or {})
    elif kind == "InferenceService":
        yield from _inference_service_pods(spec)
    elif kind in ("EventSource", "Sensor") and isinstance(spec.get("template"), dict):
        template = spec["template"]
        container = dict(template.get("container") or {}, name="main")
        pod_spec = {k: v for k, v in template.items() if k != "container"}
        pod = _pod("pod", dict(pod_spec, containers=[container]))
        yield pod


# --- rules ---------------------------------------------------------------------------------------


def _effective(container: dict[str, Any], pod: Pod, key: str) -> Any:
    value = (container.get("securityContext") or {}).get(key)
    return value if value is not None else (pod.spec.get("securityContext") or {}).get(key)


def _restricted(pod: Pod, container: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    ctx = container.get("securityContext") or {}
    if _effective(container, pod, "runAsNonRoot") is not True:
        yield "run-as-non-root", "runAsNonRoot is not true", "set securityContext.runAsNonRoot: true (pod or container)"
    if _effective(container, pod, "runAsUser") == 0:
        yield "run-as-user", "runs as uid 0", f"set securityContext.runAsUser to a non-zero uid (the images use {RUN_AS_USER})"
    if ctx.get("allowPrivilegeEscalation") is not False:
        yield (
            "allow-privilege-escalation",
            "allowPrivilegeEscalation is not false",
            "set securityContext.allowPrivilegeEscalation: false",
        )
    caps = ctx.get("capabilities") or {}
    if "ALL" not in (caps.get("drop") or []):
        yield "capabilities", "capabilities are not dropped", "set securityContext.capabilities.drop: [ALL]"
    added = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
    if added:
        yield "capabilities", f"adds capabilities {sorted(added)}", "add none (only NET_BIND_SERVICE is allowed)"
    seccomp = _effective(container, pod, "seccompProfile") or {}
    if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
        yield (
            "seccomp",
            f"seccompProfile is {seccomp.get('type') or 'unset'}",
            "set securityContext.seccompProfile.type: RuntimeDefault (pod or container)",
        )


def _image(container: dict[str, Any], prod: bool) -> Iterator[tuple[str, str, str]]:
    image = container.get("image")
    if not image:
        return
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else None
    if tag == "latest":
        yield "image-pinned", f"image {image} uses ':latest'", "pin a version tag or an @sha256 digest"
    elif tag is None and not digest:
        yield "image-pinned", f"image {image} has no tag or digest", "pin a version tag or an @sha256 digest"
    elif prod and not digest:
        yield (
            "image-digest",
            f"image {image} is not pinned by digest (--env prod)",
            "reference the image as repo@sha256:<digest>",
        )


def _resources(container: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    res = container.get("resources") or {}
    for part in ("requests", "limits"):
        missing = [r for r in ("cpu", "memory") if r not in (res.get(part) or {})]
        if missing:
            yield (
                "resources",
                f"no {part} for {', '.join(missing)}",
                f"set resources.{part}.cpu and resources.{part}.memory",
            )


def _secret_literals(container: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    for env in container.get("env") or []:
        words = set(re.split(r"[_.\-]", str(env.get("name", "")).upper()))
        if words & SECRET_WORDS and env.get("value") not in (None, ""):
            yield (
                "secret-literal",
                f"env {env['name']} holds a literal value",
                "use valueFrom.secretKeyRef (the value belongs in a Secret)",
            )


def _volumes(pod: Pod) -> Iterator[tuple[str, str, str]]:
    for volume in pod.spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        bad = kinds - ALLOWED_VOLUME_TYPES
        if bad:
            yield (
                "volume-types",
                f"volume {volume.get('name')} is of type {', '.join(sorted(bad))}",
                (
                    "use only configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected or secret"
                ),
            )


def _service_account(pod: Pod) -> Iterator[tuple[str, str, str]]:
    # A pod that mounts no token has no API identity, so the default account grants it nothing.
    if pod.service_account in (None, "", "default") and pod.automount is not False:
        yield (
            "service-account",
            "uses the namespace's default service account with a token mounted",
            ("set serviceAccountName to a dedicated account, or automountServiceAccountToken: false"),
        )


def _argo(pod: Pod) -> Iterator[tuple[str, str, str]]:
    template, defaults = pod.argo_template or {}, pod.argo_defaults or {}
    if not (template.get("retryStrategy") or defaults.get("retryStrategy")):
        yield "retry", "Argo template has no retryStrategy", "add retryStrategy (limit, retryPolicy, backoff)"
    if not (template.get("activeDeadlineSeconds") or defaults.get("activeDeadlineSeconds")):
        yield "deadline", "Argo template has no activeDeadlineSeconds", "add activeDeadlineSeconds to the template"


def check_pod(pod: Pod, prod: bool = False) -> Iterator[tuple[str, str, str, str]]:
    """(container, rule, message, fix) for one pod."""
    if pod.argo_template is not None:
        for finding in _argo(pod):
            yield (pod.label, *finding)
    for finding in _service_account(pod):
        yield (pod.label, *finding)
    if not pod.exempt:
        for finding in _volumes(pod):
            yield (pod.label, *finding)
    for container in pod.containers:
        where = f"{pod.label}/{container.get('name', '?')}"
        checks = [_image(container, prod), _resources(container), _secret_literals(container)]
        if not pod.exempt:
            checks.insert(0, _restricted(pod, container))
        for check in checks:
            for rule, message, fix in check:
                yield (where, rule, message, f"{fix} {EXECUTOR_FIX}" if container.get(EXECUTOR_MARK) else fix)


def lint_documents(
    docs: Iterable[dict[str, Any]],
    file: str = "-",
    env: str | None = None,
    executor: dict[str, Any] | None = None,
) -> list[Finding]:
    """Findings for `docs`; Argo's executor containers get `executor`, or the controller ConfigMap's
    setting when one is among `docs`, or none (upstream's default)."""
    docs = list(docs)
    if executor is None:
        executor = controller_executor(docs)
    findings = []
    for doc in docs:
        for pod in pods_of(doc, executor):
            for container, rule, message, fix in check_pod(pod, prod=env == "prod"):
                findings.append(Finding(file, _name(doc), container, rule, message, fix))
    return findings


def lint_paths(paths: Sequence[str | Path], env: str | None = None) -> list[Finding]:
    """Every finding in the YAML files under `paths`; `env='prod'` also requires image digests."""
    loaded = [(path, _load(path)) for path in _yaml_files(paths)]
    # The controller's executor setting applies to the workflows of every file linted with it.
    executor = controller_executor(doc for _, docs in loaded for doc in docs)
    findings = []
    for path, docs in loaded:
        findings += lint_documents(docs, str(path), env, executor)
    return findings


# --- CLI -----------------------------------------------------------------------------------------


def format_text(findings: Sequence[Finding]) -> str:
    if not findings:
        return "No findings."
    lines = [f"{f.file}: {f.document}: {f.container}: [{f.rule}] {f.message}\n    fix: {f.fix}" for f in findings]
    return "\n".join(lines) + f"\n{len(findings)} finding(s)."


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="paddle-mlops lint",
        description="Check every pod the manifests will create against the project's security and reliability rules.",
    )
    p.add_argument("paths", nargs="*", default=["argo/"], help="manifest files or directories (default argo/)")
    p.add_argument("--format", choices=["text", "json"], default="text", help="report format (default text)")
    p.add_argument("--env", default=None, help="'prod' also requires every image to be pinned by digest")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        findings = lint_paths(args.paths, args.env)
    except LintInputError as exc:
        print(f"lint: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.format == "json":
        print(json.dumps([asdict(f) for f in findings], indent=2, ensure_ascii=False))
    else:
        print(format_text(findings))
    return EXIT_FINDINGS if findings else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
