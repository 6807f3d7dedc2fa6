"""Preflight's reading of our keys in the controllers' own objects, against what this environment ships.

They are applied server-side (pipelines/platform/controller_settings.py), but an upstream install or upgrade that
applies its own manifest rewrites whatever its manifest names: Argo Events' whole `controller-config.yaml` key and its
`ARGO_EVENTS_IMAGE` (upstream's tag), and for Argo Workflows any key its chart or manifest sets. Each key is compared
with what `req.settings_dir` holds, parsed: the workflow controller's keys by the argo-executor check
(security.py), the JetStream entry by the eventbus check (controller_settings.py), the controller image here; a
difference names the command that restores it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from paddle_mlops.cluster_requirements import Requirements
from paddle_mlops.lint.executor import executor_setting
from paddle_mlops.preflight.cluster import KubernetesApi
from paddle_mlops.preflight.controllers import controller_namespace
from paddle_mlops.preflight.results import FINDING, OK, Result
from pipelines.platform import argo_controller
from pipelines.platform import events_controller as ec
from pipelines.platform.controller_settings import apply_command

CHECK = "events-image"


def settings_document(req: Requirements, kind: str, name: str) -> dict[str, Any] | None:
    return next(
        (d for d in req.settings if d.get("kind") == kind and (d.get("metadata") or {}).get("name") == name), None
    )


def _setting(data: dict[str, str], key: str) -> Any:
    """A workflow-controller setting as the controller reads it: the lone `config` key, or one key per setting."""
    if key == "executor":
        return executor_setting(data)
    if "config" in data:
        parsed = yaml.safe_load(data["config"]) or {}
        return parsed.get(key) if isinstance(parsed, dict) else None
    return yaml.safe_load(data.get(key) or "null")


def differing_keys(req: Requirements, live: dict[str, str]) -> list[str]:
    """Our workflow-controller keys whose live value (as the controller reads it) is not the one we ship."""
    ours = settings_document(req, "ConfigMap", argo_controller.CONTROLLER_CONFIGMAP)
    return [
        key for key, text in ((ours or {}).get("data") or {}).items() if _setting(live, key) != yaml.safe_load(text)
    ]


def check_events_image(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    """The Argo Events controller's ARGO_EVENTS_IMAGE, the image of every EventSource and Sensor pod."""
    patch = settings_document(req, "Deployment", ec.DEPLOYMENT)
    if patch is None or "argo-events" not in req.components:
        return
    namespace = controller_namespace(api.deployments(), "argo-events")
    deployment = next(
        (d for d in api.deployments() if d.metadata.name == ec.DEPLOYMENT and d.metadata.namespace == namespace),
        None,
    )
    if deployment is None:
        return  # no controller: the controller check reports it
    subject = f"{namespace}/deployment/{ec.DEPLOYMENT}"
    image = _env(patch["spec"]["template"]["spec"]["containers"])
    running = _env(api_containers(deployment))
    if running == image:
        yield Result(CHECK, subject, OK, f"{ec.IMAGE_ENV}={image}")
    else:
        message = f"{ec.IMAGE_ENV} is {running or 'unset'}, not {image}: EventSource and Sensor pods run another image"
        fix = f"{apply_command(req.settings_dir)} (restores our keys, leaves every other key alone)"
        yield Result(CHECK, subject, FINDING, message, fix)


def api_containers(deployment: Any) -> list[dict[str, Any]]:
    """The containers of a kubernetes-client V1Deployment as plain dicts (name, env)."""
    return [
        {"name": c.name, "env": [{"name": e.name, "value": e.value} for e in c.env or []]}
        for c in deployment.spec.template.spec.containers or []
    ]


def _env(containers: list[dict[str, Any]]) -> str | None:
    for container in containers:
        if container.get("name") == ec.CONTAINER:
            for env in container.get("env") or []:
                if env.get("name") == ec.IMAGE_ENV:
                    return str(env.get("value") or "") or None
    return None
