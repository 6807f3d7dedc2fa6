"""The predictor Deployment of a RawDeployment InferenceService, as Kubernetes and KServe run it (no code copied).

- KServe's raw reconciler (kserve v0.15.0 / v0.20.0 pkg/controller/v1beta1/inferenceservice/reconcilers/deployment/
  deployment_reconciler.go) writes the predictor's pod spec into the Deployment `<isvc>-predictor`
  (pkg/constants/constants.go PredictorServiceName), one replica (minReplicas 1), the default RollingUpdate
  strategy: 25 % surge rounds up to one new pod, 25 % unavailable rounds down to none, so the old pod serves until
  the new one is available.
- The Deployment controller (kubernetes pkg/controller/deployment) moves status.observedGeneration to the new
  generation on its first pass over it, creates the new ReplicaSet's pod (updatedReplicas 1, replicas 2), keeps
  `Available` True while the old pod is available, reports `Progressing` True/ReplicaSetUpdated while rolling,
  True/NewReplicaSetAvailable once done, False/ProgressDeadlineExceeded past the progress deadline.
- `propagate_raw_status` is kserve pkg/apis/serving/v1beta1/inference_service_status.go `PropagateRawStatus`:
  v0.15.0 takes PredictorReady from `Available` alone; v0.20.0 also reads `Progressing` but keeps Ready True while
  `Available` is; both copy the Deployment's status.observedGeneration into the InferenceService's.

Each controller pass is one tick; every read of the API lets the controllers run one pass (the caller waits).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

KSERVE_VERSIONS = ("0.15", "0.20")


@dataclass
class Deployment:
    """`template` is the InferenceService revision (tests/kserve_standin.py Revision: `.name`, `.ready`) whose
    predictor spec `body` holds."""

    name: str
    template: Any
    body: dict[str, Any]
    generation: int = 1
    observed: int = 0
    observed_at: int = 0
    serving: Any = None  # the revision whose pod is available
    conditions: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # type -> (status, reason, message)
    counts: tuple[int, int, int] = (0, 0, 0)  # status (replicas, updatedReplicas, availableReplicas)

    def control(self, tick: int, progress_deadline: int) -> None:
        """One Deployment controller pass over the spec as it stands."""
        if self.observed < self.generation:
            self.observed, self.observed_at = self.generation, tick
        new = self.template
        if new.ready:
            self.serving = new  # the new pod is available: the old ReplicaSet scales down
        rolling = self.serving is not new
        surge = 1 if rolling and self.serving is not None else 0
        self.counts = (1 + surge, 1, 1 if self.serving is not None else 0)
        available = self.serving is not None
        self.conditions["Available"] = (
            ("True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
            if available
            else ("False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability.")
        )
        if not rolling:
            self.conditions["Progressing"] = (
                "True",
                "NewReplicaSetAvailable",
                f"{self.name} has successfully progressed.",
            )
        elif tick - self.observed_at > progress_deadline:
            self.conditions["Progressing"] = (
                "False",
                "ProgressDeadlineExceeded",
                f"{self.name} has timed out progressing.",
            )
        else:
            self.conditions["Progressing"] = ("True", "ReplicaSetUpdated", f"{self.name} is progressing.")

    def model(self) -> client.V1Deployment:
        """What AppsV1Api.read_namespaced_deployment returns."""
        predictor = self.body["spec"]["predictor"]["containers"][0]
        container = client.V1Container(name=predictor["name"], image=predictor["image"], args=predictor["args"])
        replicas, updated, available = self.counts
        return client.V1Deployment(
            metadata=client.V1ObjectMeta(name=self.name, generation=self.generation),
            spec=client.V1DeploymentSpec(
                replicas=1,
                selector=client.V1LabelSelector(match_labels={"app": f"isvc.{self.name}"}),
                template=client.V1PodTemplateSpec(spec=client.V1PodSpec(containers=[container])),
            ),
            status=client.V1DeploymentStatus(
                observed_generation=self.observed or None,
                replicas=replicas,
                updated_replicas=updated,
                available_replicas=available,
                conditions=[
                    client.V1DeploymentCondition(type=t, status=s, reason=r, message=m)
                    for t, (s, r, m) in self.conditions.items()
                ],
            ),
        )


def propagate_raw_status(deployment: Deployment, version: str) -> str:
    """PredictorReady's status as PropagateRawStatus derives it from the Deployment's conditions."""
    available = deployment.conditions.get("Available", ("", "", ""))
    progressing = deployment.conditions.get("Progressing")
    if version == "0.15":
        return available[0] or "Unknown"
    ready = "True" if available[0] == "True" else "False"
    if progressing is not None:
        if progressing[0] == "False" and progressing[2]:
            ready = "False"
        elif progressing[0] == "True" and progressing[1] == "NewReplicaSetAvailable":
            ready = "True"
        elif progressing[0] == "True" and available[0] != "True":
            ready = "Unknown"
    if available[0] == "False":
        ready = "False"
    return ready
