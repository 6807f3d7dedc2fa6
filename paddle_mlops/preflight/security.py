"""Preflight's Pod Security checks: each namespace of the install set enforces the level it declares,
and the live workflow controller gives Argo's executor containers a securityContext that meets the
restricted profile (judged by the same rules as `paddle-mlops lint`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from kubernetes.client.exceptions import ApiException

from paddle_mlops.cluster_requirements import ENFORCE_LABEL, Requirements
from paddle_mlops.lint import RESTRICTED_RULES, Pod, check_pod, executor_setting
from paddle_mlops.preflight.cluster import KubernetesApi
from paddle_mlops.preflight.controllers import controller_configmap
from paddle_mlops.preflight.results import FINDING, OK, Result
from paddle_mlops.preflight.settings_applied import differing_keys
from pipelines.platform import argo_controller
from pipelines.platform.controller_settings import apply_command


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
                "namespace",
                name,
                FINDING,
                f"{ENFORCE_LABEL} is {have or 'unset'}, the install set declares {level}",
                f"kubectl label --overwrite namespace {name} {ENFORCE_LABEL}={level} (or kubectl apply -f argo/{file})",
            )


def check_argo_executor(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    name, namespace = controller_configmap(api.deployments())
    subject = f"{namespace}/{name}"
    helm = json.dumps(argo_controller.executor_security_context())
    fix = apply_command(req.settings_dir) if req.controller_file else f"set key executor of {subject}"
    fix += f" (Helm chart argo/argo-workflows: executor.securityContext={helm})"
    data = api.config_map_data(name, namespace)
    if data is None:
        message = "ConfigMap not found: the init/wait containers get no securityContext"
        yield Result("argo-executor", subject, FINDING, message, fix)
        return
    problems = _executor_problems(executor_setting(data), req)
    differ = differing_keys(req, data)
    if problems:
        message = "executor securityContext is not restricted: " + "; ".join(problems)
        yield Result("argo-executor", subject, FINDING, message, fix)
    elif differ:
        message = (
            f"{', '.join(differ)} not as {req.settings_dir} sets them (an upgrade or another apply replaced them; "
            "the executor names argoexec's image)"
        )
        yield Result("argo-executor", subject, FINDING, message, fix)
    else:
        yield Result(
            "argo-executor", subject, OK, f"executor (restricted, image pinned) and metricsConfig as {req.settings_dir}"
        )


def _executor_problems(executor: dict[str, Any], req: Requirements) -> list[str]:
    """The restricted rules a `wait` container with the executor's securityContext breaks, under the pod
    securityContext of every workflow of the install set."""
    container = {"name": "wait", "securityContext": executor.get("securityContext") or {}}
    return sorted(
        {
            f"{rule}: {message}"
            for pod_context in req.workflow_pod_contexts or [{}]
            for _, rule, message, _ in check_pod(Pod("executor", {"securityContext": pod_context}, {}, [container]))
            if rule in RESTRICTED_RULES
        }
    )
