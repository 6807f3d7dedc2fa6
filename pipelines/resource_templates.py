"""The workflows' resource templates: Argo creates and deletes cluster objects with kubectl, no step container.

`prepull-image` creates the pre-pull DaemonSet (prepull.py) and `release-prepull` deletes it, by the workflow label
every object these templates create carries. (The training job is placed and watched by a step of its own,
pipelines/train_step.py.)
"""

from __future__ import annotations

from typing import Any

import yaml
from hera.workflows import Parameter, Resource
from hera.workflows import models as m

from paddle_mlops_core.config import PipelineConfig
from pipelines import k8s, prepull
from pipelines.labels import WORKFLOW_LABEL
from pipelines.observability import argo_template_metrics


def delete_workflow_objects(cfg: PipelineConfig, name: str, resource: str, **extra: Any) -> Resource:
    """Template `name`: `kubectl delete --ignore-not-found <resource> --selector paddle-mlops/workflow=<workflow>
    --wait=false`, the objects this workflow's resource templates created. No manifest: Argo then runs kubectl with
    the flags alone (argo-workflows v4.1.2 workflow/executor/resource.go getKubectlArguments)."""
    return Resource(
        name=name,
        action="delete",
        flags=[resource, "--selector", f"{WORKFLOW_LABEL}={{{{workflow.name}}}}", "--wait=false"],
        timeout="300s",
        active_deadline_seconds=300,
        retry_strategy=k8s.resource_retry_strategy(cfg),
        metrics=m.Metrics.model_validate(argo_template_metrics(name)),
        **extra,
    )


RELEASE_PREPULL = "release-prepull"


def prepull_image(cfg: PipelineConfig) -> Resource:
    """Create the pre-pull DaemonSet (pipelines/prepull.py) and return at once: the pulls go on while
    prepare-data runs; nothing waits for them."""
    return Resource(
        name="prepull-image",
        action="create",
        set_owner_reference=True,
        manifest=yaml.safe_dump(prepull.daemon_set(cfg), sort_keys=False, allow_unicode=True),
        inputs=[Parameter(name="image-digest")],
        annotations=dict(prepull.CLUSTER_ONLY),
        timeout="300s",
        active_deadline_seconds=300,
        retry_strategy=k8s.resource_retry_strategy(cfg),
        metrics=m.Metrics.model_validate(argo_template_metrics("prepull-image")),
    )


def release_prepull(cfg: PipelineConfig) -> Resource:
    """Delete the run's pre-pull DaemonSet by the workflow label."""
    return delete_workflow_objects(cfg, RELEASE_PREPULL, "daemonsets.apps", annotations=dict(prepull.CLUSTER_ONLY))
