"""Preflight's version checks: the Kubernetes server and every controller the install set needs, each
running, ready and at least the minimum of the supported matrix (`paddle_mlops_core/versions.py`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from paddle_mlops.cluster_requirements import Requirements
from paddle_mlops.preflight.cluster import KubernetesApi
from paddle_mlops.preflight.controllers import CONTROLLERS, Controller, controller_of
from paddle_mlops.preflight.results import FINDING, OK, WARNING, Result, install_fix
from paddle_mlops_core.versions import MATRIX, at_least


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


def check_controllers(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    deployments = api.deployments()
    for component in (c for c in req.components if c in CONTROLLERS):
        yield _controller_result(CONTROLLERS[component], deployments)


def _ready_replicas(deployment: Any) -> int:
    return (deployment.status.ready_replicas or 0) if deployment.status else 0


def _controller_result(controller: Controller, deployments: list[Any]) -> Result:
    """The most ready Deployment that runs `controller`, judged; a finding when none does."""
    found = [(d, hit) for d in deployments if (hit := controller_of(controller, d))]
    if not found:
        spec = MATRIX[controller.component]
        return Result(
            "controller",
            controller.component,
            FINDING,
            f"no Deployment runs {controller.image} ({spec.name})",
            install_fix(controller.component),
        )
    found.sort(key=lambda f: -_ready_replicas(f[0]))
    deployment, (image, version) = found[0]
    return _deployment_result(controller, deployment, image, version)


def _deployment_result(controller: Controller, deployment: Any, image: str, version: str | None) -> Result:
    spec, subject = MATRIX[controller.component], controller.component
    namespace, name = deployment.metadata.namespace, deployment.metadata.name
    where = f"{namespace}/{name}"
    if _ready_replicas(deployment) < 1:
        return Result(
            "controller",
            subject,
            FINDING,
            f"Deployment {where} ({image}) has no ready replica",
            f"kubectl -n {namespace} describe deployment {name}; kubectl -n {namespace} logs deployment/{name}",
        )
    if version is None:
        return Result(
            "controller",
            subject,
            WARNING,
            f"{where} runs {image}: version unknown (the tag is no release number); "
            f"make sure it is {spec.name} {spec.minimum} or newer",
        )
    if not at_least(version, spec.minimum):
        return Result(
            "controller",
            subject,
            FINDING,
            f"{where} runs {version}, older than the supported minimum {spec.minimum} ({spec.why})",
            f"upgrade: {install_fix(controller.component)}",
        )
    return Result("controller", subject, OK, f"{where} runs {version}, ready (minimum {spec.minimum})")
