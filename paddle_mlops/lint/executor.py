"""Argo's own executor containers as the workflow controller adds them to every pod (argo-workflows
v4.1.2 workflow/controller/workflowpod.go): their securityContext and resources come from the
controller's `executor` setting, nil when it is unset, as upstream's default is."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from paddle_mlops.lint.documents import LintInputError, document_name
from pipelines.platform.argo_controller import CONTROLLER_CONFIGMAP
from pipelines.platform.upstream_images import ARGOEXEC

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
EXECUTOR_FIX = (
    f"in the `executor` setting of the Argo {CONTROLLER_CONFIGMAP} (argo/controller-settings/argo-workflows.yaml, "
    "by digest in overlays/<env>/controller-settings/)"
)


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
            raise LintInputError(f"{document_name(doc)}: its executor setting is not valid YAML ({exc}).") from None
    return None


def executor_container(name: str, executor: dict[str, Any] | None, resource_template: bool) -> dict[str, Any]:
    """One argoexec container as workflowpod.go newExecContainer builds it: the image is the `executor` setting's,
    else the controller's `--executor-image` default, argoexec by its version tag (workflow/controller/config.go
    executorImage)."""
    executor = executor or {}
    security = executor.get("securityContext")
    if security is None and resource_template:
        security = ARGO_RESOURCE_DEFAULT_SECURITY_CONTEXT
    container: dict[str, Any] = {"name": name, "image": executor.get("image") or ARGOEXEC, EXECUTOR_MARK: True}
    if security is not None:
        container["securityContext"] = security
    if executor.get("resources") is not None:
        container["resources"] = executor["resources"]
    return container
