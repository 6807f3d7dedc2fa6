"""RawDeployment mode: an InferenceService's Ready says little about a rolling update; its Deployment says all.

KServe copies the predictor Deployment's state into the InferenceService (kserve pkg/apis/serving/v1beta1/
inference_service_status.go `PropagateRawStatus`): v0.15.0 sets PredictorReady from the Deployment's `Available`
condition and `status.observedGeneration` from the Deployment's; v0.20.0 also reads `Progressing`, yet keeps Ready
True while `Available` is (its comment: "the component IS ready and should not be downgraded"). During a rolling
update the old pods keep `Available` True (maxUnavailable 25 % of one replica rounds down to 0) and the Deployment
controller moves `observedGeneration` as soon as it sees the new template, long before a new pod serves. So Ready
with a fresh observedGeneration means "the old model still serves"; the rollout must wait for the Deployment itself:
`observedGeneration == generation` and `updatedReplicas == availableReplicas == replicas` (kubernetes
staging/src/k8s.io/kubectl/pkg/polymorphichelpers/rollout_status.go DeploymentStatusViewer: what `kubectl rollout
status` waits for), with
the pod template carrying the spec just applied, and a `Progressing` condition of reason `ProgressDeadlineExceeded`
ending the wait as a failure.

The Deployment is `<isvc>-predictor` (kserve v0.15.0 and v0.20.0 pkg/constants/constants.go PredictorServiceName;
v0.15.0 keeps an older install's `<isvc>-predictor-default` where that exists: DefaultPredictorServiceName).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from steps.runtime.release.rollout_outcome import RolloutFailed

PREDICTOR_CONTAINER = "kserve-container"


def deployment_names(isvc_name: str) -> tuple[str, str]:
    """The predictor Deployment's name, then the one KServe 0.15 keeps from older installs."""
    return f"{isvc_name}-predictor", f"{isvc_name}-predictor-default"


def read_predictor(apps: Any, namespace: str, isvc_name: str) -> Any | None:
    """The predictor Deployment (AppsV1Api's V1Deployment), None while KServe has not created it."""
    from kubernetes.client.exceptions import ApiException

    for name in deployment_names(isvc_name):
        try:
            return apps.read_namespaced_deployment(name, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
    return None


def _container(deployment: Any) -> Any | None:
    containers = deployment.spec.template.spec.containers or []
    return next((c for c in containers if c.name == PREDICTOR_CONTAINER), None)


def carries(deployment: Any, isvc: dict[str, Any]) -> bool:
    """Whether KServe has written this InferenceService's predictor (image, args) into the Deployment yet."""
    wanted = ((isvc.get("spec") or {}).get("predictor") or {}).get("containers", [{}])[0]
    container = _container(deployment)
    return container is not None and (container.image, container.args) == (wanted.get("image"), wanted.get("args"))


def stalled(deployment: Any) -> str | None:
    """The Deployment controller's verdict that the rollout cannot finish, None while it may."""
    for condition in deployment.status.conditions or []:
        if condition.type == "Progressing" and condition.reason == "ProgressDeadlineExceeded":
            return f"Deployment {deployment.metadata.name}: {condition.message or condition.reason}"
    return None


def rolled_out(deployment: Any) -> bool:
    """rollout_status.go's `successfully rolled out`: the newest template observed, every replica on it, and
    available, with no old replica left."""
    status = deployment.status
    wanted = deployment.spec.replicas if deployment.spec.replicas is not None else 1
    return (
        (status.observed_generation or 0) >= (deployment.metadata.generation or 0)
        and (status.updated_replicas or 0) == wanted
        and (status.replicas or 0) == wanted
        and (status.available_replicas or 0) == wanted
    )


def serves(apps: Any, namespace: str, isvc: dict[str, Any]) -> bool:
    """Whether the InferenceService's spec is rolled out to every replica of its Deployment, now."""
    deployment = read_predictor(apps, namespace, isvc["metadata"]["name"])
    return deployment is not None and carries(deployment, isvc) and rolled_out(deployment)


def wait_rolled_out(
    apps: Any,
    namespace: str,
    isvc: dict[str, Any],
    timeout: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    poll: float,
) -> None:
    """Poll the predictor Deployment until `serves`; RolloutFailed when it stalls or `timeout` passes."""
    name = isvc["metadata"]["name"]
    deadline = clock() + timeout
    while True:
        deployment = read_predictor(apps, namespace, name)
        if deployment is not None and carries(deployment, isvc):
            if rolled_out(deployment):
                return
            reason = stalled(deployment)
            if reason:
                raise RolloutFailed(f"InferenceService {namespace}/{name}: {reason}")
        if clock() >= deadline:
            state = "not created" if deployment is None else _progress(deployment)
            raise RolloutFailed(
                f"InferenceService {namespace}/{name}: its Deployment did not roll the new spec out to every replica "
                f"within {timeout:.0f}s ({state}); the old pods kept serving"
            )
        sleep(poll)


def _progress(deployment: Any) -> str:
    s = deployment.status
    return (
        f"{deployment.metadata.name}: generation {deployment.metadata.generation}, observed {s.observed_generation}, "
        f"replicas {s.replicas}, updated {s.updated_replicas}, available {s.available_replicas}"
    )
