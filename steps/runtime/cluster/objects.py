"""The cluster objects the train step and the exit handler read and write, through the official client's
`CustomObjectsApi` in one namespace — training jobs (TrainJob, PaddleJob), their JobSets, Kueue Workloads and the Argo
Workflow — and the training pods (`CoreV1Api`), which outlive a deleted job by their grace period.

The API server's answers become what the step can act on: 404 on an object is "not there" (None), 409 on a create is
`AlreadyExists`; 401/403 is a `StepError` naming the verb and resource the service account lacks (argo/rbac.yaml grants
them); anything else (5xx, 429, a connection that failed) is a `StepFailed`, which the workflow retries.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from paddle_mlops_core.contracts import resource_plural
from steps.runtime.runner import StepError, StepFailed


@dataclass(frozen=True)
class Kind:
    """A custom resource as CustomObjectsApi addresses it."""

    group: str
    version: str
    plural: str
    kind: str

    @classmethod
    def of(cls, manifest: dict[str, Any]) -> Kind:
        """The kind of `manifest` (a training job)."""
        group, _, version = manifest["apiVersion"].partition("/")
        return cls(group, version, resource_plural(manifest["kind"]), manifest["kind"])

    @property
    def resource(self) -> str:
        return f"{self.plural}.{self.group}"


# kueue v0.19.2 config/components/crd/bases/kueue.x-k8s.io_workloads.yaml: v1beta2 is served and stored (v1beta1 is
# served, deprecated). argo-workflows v4.1.2 pkg/apis/workflow/v1alpha1.
WORKLOAD = Kind("kueue.x-k8s.io", "v1beta2", "workloads", "Workload")
WORKFLOW = Kind("argoproj.io", "v1alpha1", "workflows", "Workflow")
# jobset v0.12.0 api/jobset/v1alpha2: Trainer names a TrainJob's JobSet as the TrainJob (plugins/jobset/jobset.go).
JOBSET = Kind("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
# jobset v0.12.0 api/jobset/v1alpha2/jobset_types.go JobSetNameKey: on every pod of the JobSet.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
# kueue v0.19.2 pkg/controller/constants: every Workload Kueue makes for a job carries its job's UID.
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


class AlreadyExists(Exception):
    """A create found an object of that name (HTTP 409)."""


def _status(exc: Exception) -> int | None:
    return getattr(exc, "status", None)


class Objects:
    """The custom objects and pods of one namespace. `api`: a `kubernetes.client.CustomObjectsApi`, `core`: a
    `CoreV1Api` (or stand-ins)."""

    def __init__(
        self, api: Any, namespace: str, core: Any = None, account: str = "the workflow's service account"
    ) -> None:
        self.api, self.namespace, self.core, self.account = api, namespace, core, account

    def get(self, kind: Kind, name: str) -> dict[str, Any] | None:
        try:
            return dict(self._call("get", kind, self.api.get_namespaced_custom_object, name=name))
        except _NotFound:
            return None

    def create(self, kind: Kind, body: dict[str, Any]) -> dict[str, Any]:
        """The created object; `AlreadyExists` when one of that name is there."""
        try:
            return dict(self._call("create", kind, self.api.create_namespaced_custom_object, body=body))
        except _Conflict:
            raise AlreadyExists(f"{kind.kind} {body['metadata']['name']} already exists") from None

    def delete(self, kind: Kind, name: str) -> bool:
        """Delete `name`, background propagation: the object goes at once, its JobSet, Jobs and pods after it (their
        grace period); False when it was not there. Never foreground: while a TrainJob waits for its dependents to go,
        trainer v2.3.0 pkg/controller/trainjob_controller.go Reconcile (no deletionTimestamp check) would build its
        JobSet again."""
        try:
            self._call("delete", kind, self.api.delete_namespaced_custom_object, name=name,
                       propagation_policy="Background")  # fmt: skip
        except _NotFound:
            return False
        return True

    def patch(self, kind: Kind, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of `name` (lists are replaced whole)."""
        return dict(self._call("patch", kind, self.api.patch_namespaced_custom_object, name=name, body=body))

    def select(self, kind: Kind, selector: str) -> list[dict[str, Any]]:
        try:
            found = self._call("list", kind, self.api.list_namespaced_custom_object, label_selector=selector)
        except _NotFound:
            raise StepError(
                f"the API server has no {kind.resource} ({kind.group}/{kind.version}): is its controller installed? "
                "`paddle-mlops preflight` checks the cluster"
            ) from None
        return [dict(item) for item in found.get("items") or []]

    def running_pods(self, selector: str) -> list[str]:
        """The pods matching `selector` that are not done (phase neither Succeeded nor Failed): running, pending, or
        being deleted within their grace period."""
        try:
            found = self.core.list_namespaced_pod(self.namespace, label_selector=selector)
        except Exception as exc:  # noqa: BLE001 - the client raises ApiException, urllib3 and socket errors alike
            if _status(exc) in (401, 403):
                raise StepError(
                    f"{self.account} may not list pods in namespace {self.namespace} ({exc}); apply argo/rbac.yaml"
                ) from None
            raise StepFailed(f"list pods in {self.namespace} failed: {_short(exc)}") from None
        return sorted(p.metadata.name for p in found.items if (p.status.phase or "") not in ("Succeeded", "Failed"))

    def wait_gone(self, kind: Kind, name: str, timeout: float, poll: float = 2.0, sleep: Callable = time.sleep) -> None:
        """Until `name` no longer exists (a foreground deletion ends once its dependents are gone)."""
        waited = 0.0
        while self.get(kind, name) is not None:
            if waited >= timeout:
                raise StepFailed(f"{kind.kind} {name} is still being deleted after {timeout:.0f} s; retrying")
            sleep(poll)
            waited += poll

    def _call(self, verb: str, kind: Kind, method: Callable[..., Any], **kwargs: Any) -> Any:
        try:
            return method(
                group=kind.group, version=kind.version, namespace=self.namespace, plural=kind.plural, **kwargs
            )
        except Exception as exc:  # noqa: BLE001 - the client raises ApiException, urllib3 and socket errors alike
            status = _status(exc)
            if status == 404:
                raise _NotFound() from None
            if status == 409 and verb == "create":
                raise _Conflict() from None
            if status in (401, 403):
                raise StepError(
                    f"{self.account} may not {verb} {kind.resource} in namespace {self.namespace} ({exc}); "
                    "apply argo/rbac.yaml (its Role lists what the train step calls)"
                ) from None
            raise StepFailed(f"{verb} {kind.resource} in {self.namespace} failed: {_short(exc)}") from None


class _NotFound(Exception):
    pass


class _Conflict(Exception):
    pass


def _short(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)
    status = _status(exc)
    return f"HTTP {status} {reason}" if status else f"{type(exc).__name__}: {exc}"


def name_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def deleting(obj: dict[str, Any]) -> bool:
    """Whether the object is being deleted (a deletionTimestamp: its dependents go first under foreground deletion)."""
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


def in_cluster_api() -> Any:
    """CustomObjectsApi with the pod's service account (a kubeconfig outside a cluster)."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.CustomObjectsApi()


def core_api() -> Any:
    """CoreV1Api on the configuration `in_cluster_api()` loaded."""
    from kubernetes import client

    return client.CoreV1Api()
