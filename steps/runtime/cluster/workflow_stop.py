"""Whether the workflow is being ended by a person or by its own deadline — the only times a train step deletes a
training job that has not failed — told apart from a step pod lost to eviction, a drain or OOM, after which the
training job must go on.

argo-workflows v4.1.2: `argo stop` / `argo terminate` patch `spec.shutdown` (`Stop` / `Terminate`) on the Workflow
before the controller signals any pod (workflow/util/util.go patchShutdownStrategy; the controller then runs
`argoexec kill 15 1` in the pod's containers, workflow/controller/exec_control.go applyExecutionControl and
pod/queue.go terminateContainers). Past `activeDeadlineSeconds` from `status.startedAt` the controller signals the
pods the same way; a workflow submitted from a WorkflowTemplate (the Sensor's, `argo submit --from`) carries that
deadline only in the template, which the controller merges in and stores in `status.storedWorkflowTemplateSpec`
(workflow/controller/operator.go getWorkflowDeadline reads the merged spec). A kubelet eviction, a drain or a node
shutdown sends the same SIGTERM and changes neither. An older CLI terminated by setting `activeDeadlineSeconds: 0`
(workflow/util/util.go createNewRetryWorkflow still clears it on `argo retry`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any


def parse_time(text: str) -> datetime:
    """A Kubernetes timestamp (RFC 3339, `Z`)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def stop_reason(workflow: dict[str, Any] | None, now: datetime | None = None) -> str | None:
    """Why the workflow is ending though its steps did not fail (a person's stop or terminate, its deadline); None
    while it is not, and for a workflow that no longer exists (deleted: its objects go by their ownerReferences)."""
    if workflow is None:
        return None
    spec = workflow.get("spec") or {}
    shutdown = spec.get("shutdown")
    if shutdown:
        return f"the workflow was stopped (spec.shutdown: {shutdown}, `argo {str(shutdown).lower()}`)"
    stored = (workflow.get("status") or {}).get("storedWorkflowTemplateSpec") or {}
    deadline = spec.get("activeDeadlineSeconds", stored.get("activeDeadlineSeconds"))
    if deadline == 0:
        return "the workflow was terminated (activeDeadlineSeconds: 0)"
    started = (workflow.get("status") or {}).get("startedAt")
    if deadline and started:
        now = now or datetime.now(UTC)
        if now >= parse_time(started) + timedelta(seconds=int(deadline)):
            return f"the workflow passed its activeDeadlineSeconds ({deadline} s from {started})"
    return None
