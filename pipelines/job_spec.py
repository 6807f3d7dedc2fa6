"""A training job as the `train` step sees it, whichever backend builds it (trainjob.py, paddlejob.py): the manifest,
and its identity — a fixed name, the labels it is found by, and its owner, the Workflow."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from paddle_mlops_core.contracts import PART_OF, resource_plural
from pipelines.labels import TASK_LABEL, TRAIN_RUN_LABEL, WORKFLOW_LABEL
from pipelines.run_scope import WORKFLOW, RunScope


@dataclass(frozen=True)
class TrainingJobSpec:
    """The manifest of a training job. The train step judges it by what its operator reports as final
    (steps/runtime/cluster/job_state.py)."""

    manifest: dict[str, Any]

    @property
    def resource(self) -> str:
        """`<kind>s.<group>` (paddlejobs.kubeflow.org, trainjobs.trainer.kubeflow.org): what kubectl resolves."""
        return f"{resource_plural(self.manifest['kind'])}." + self.manifest["apiVersion"].split("/", 1)[0]


# The Workflow owns every training job it creates: deleting the workflow (by hand, or its ttlStrategy) deletes the
# job, whatever happened to its steps (Kubernetes garbage collection; a resource template's setOwnerReference wrote
# the same reference, argo-workflows v4.1.2 workflow/controller/operator.go executeResource). blockOwnerDeletion
# needs `update` on workflows/finalizers where the OwnerReferencesPermissionEnforcement admission plugin runs
# (argo/rbac.yaml).
WORKFLOW_OWNER = {
    "apiVersion": "argoproj.io/v1alpha1",
    "kind": "Workflow",
    "name": "{{workflow.name}}",
    "uid": "{{workflow.uid}}",
    "controller": True,
    "blockOwnerDeletion": True,
}
# The train step's input naming the training run (pipelines/train_step.py), which the job carries as a label.
TRAIN_RUN = "{{inputs.parameters.train-run}}"


def job_metadata(scope: RunScope = WORKFLOW) -> dict[str, Any]:
    # One name per workflow and task, never generateName: every attempt of the train step must find the job an
    # earlier one created, not start a second one beside it (steps/runtime/cluster/train_job.py). The labels are what
    # the exit handler releases by (workflow, task) and what a train step finds another trainer of its run by.
    return {
        "name": scope.job_name,
        "labels": {**PART_OF, WORKFLOW_LABEL: "{{workflow.name}}", TASK_LABEL: scope.task, TRAIN_RUN_LABEL: TRAIN_RUN},
        "ownerReferences": [dict(WORKFLOW_OWNER)],
    }
