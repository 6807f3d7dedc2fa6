"""A training job as the `train` step sees it, whichever backend builds it (trainjob.py, paddlejob.py): the manifest
with the conditions Argo judges it by, and its identity — a fixed name and the labels its exit hook deletes by."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from paddle_mlops_core.contracts import PART_OF
from pipelines.labels import TASK_LABEL, WORKFLOW_LABEL
from pipelines.run_scope import WORKFLOW, RunScope


@dataclass(frozen=True)
class TrainingJobSpec:
    """The manifest plus the conditions Argo evaluates on it (Kubernetes label-selector syntax over
    gjson paths, so each key must be a valid label key: no array queries)."""

    manifest: dict[str, Any]
    success_condition: str
    failure_condition: str

    @property
    def resource(self) -> str:
        """`<kind>s.<group>` (paddlejobs.kubeflow.org, trainjobs.trainer.kubeflow.org): what kubectl resolves."""
        return f"{self.manifest['kind'].lower()}s." + self.manifest["apiVersion"].split("/", 1)[0]


def job_metadata(scope: RunScope = WORKFLOW) -> dict[str, Any]:
    # One name per workflow and task, never generateName: a retried train step must find the job it created, not
    # start a second one beside it (resource_templates.train). The labels are what the exit hook deletes by.
    return {
        "name": scope.job_name,
        "labels": {**PART_OF, WORKFLOW_LABEL: "{{workflow.name}}", TASK_LABEL: scope.task},
    }
