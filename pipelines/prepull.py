"""Warm the training image on the GPU nodes while prepare-data runs.

Paddle GPU images are 8-10 GB: a training pod landing on a node that has never pulled the new
digest waits minutes before it starts, with its GPUs admitted and idle. So once build-image has
pushed the training image, `prepull-image` creates a DaemonSet on the GPU nodes of every region
the run may be admitted in (the same allowed regions as the TrainJob's node affinity), whose init
container is that image by digest: the kubelet pulls it on each node. The pod then idles in the
same image (already there: no second pull), with bounded, tiny resources and restricted security.
`release-prepull`, in the workflow's exit handler, deletes the DaemonSet by the workflow's label however the run
ended (not in the main DAG after `train`: a task that ran after a failed train would keep `argo retry` from running it
again, pipelines/templates.py exit_handler); the owner reference to the Workflow removes it with the Workflow in
any case. Nothing to do on a laptop: the local
executor skips both (`CLUSTER_ONLY`).
"""

from __future__ import annotations

from typing import Any

from paddle_mlops_core.config import PipelineConfig, RegionConfig
from paddle_mlops_core.contracts import CLUSTER_ONLY_ANNOTATION, PART_OF
from pipelines import k8s
from pipelines.labels import COMPONENT_LABEL, WORKFLOW_LABEL
from pipelines.train_node import train_image

RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}
IDLE = ["python", "-c", "import signal; signal.pause()"]


def daemon_set(
    cfg: PipelineConfig, regions: list[RegionConfig] | None = None, suffix: str = "prepull"
) -> dict[str, Any]:
    """The DaemonSet `<workflow>-<suffix>` on the GPU nodes of `regions` (default: every region the run may use)."""
    allowed = regions if regions is not None else k8s.training_regions(cfg)
    tolerations: list[dict[str, Any]] = []
    for region in allowed:
        for t in k8s.as_k8s(k8s.gpu_tolerations(region)):
            if t not in tolerations:
                tolerations.append(t)
    terms = [
        {
            "matchExpressions": [
                {"key": key, "operator": "In", "values": [value]} for key, value in r.node_selector().items()
            ]
        }
        for r in allowed
    ]
    container = {
        "image": train_image(cfg),
        "imagePullPolicy": "IfNotPresent",
        "resources": RESOURCES,
        "securityContext": k8s.as_k8s(k8s.container_security_context()),
    }
    selector = {WORKFLOW_LABEL: "{{workflow.name}}", COMPONENT_LABEL: suffix}  # its own, per DaemonSet
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": f"{{{{workflow.name}}}}-{suffix}", "labels": {**PART_OF, **selector}},
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": {**PART_OF, **selector}},
                "spec": {
                    "automountServiceAccountToken": False,
                    "securityContext": k8s.as_k8s(k8s.pod_security_context()),
                    "terminationGracePeriodSeconds": 1,
                    "tolerations": tolerations,
                    "affinity": {
                        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
                    },
                    "initContainers": [{"name": "pull", "command": ["python", "-c", "pass"], **container}],
                    "containers": [{"name": "hold", "command": IDLE, **container}],
                },
            },
        },
    }


CLUSTER_ONLY = {CLUSTER_ONLY_ANNOTATION: "pre-pulls the training image on the cluster's GPU nodes"}
