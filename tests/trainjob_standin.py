"""A stand-in of the API server and of the controllers around a TrainJob, for the train step's tests.

`ApiServer` answers the `CustomObjectsApi` calls the step makes (get, create, patch, delete, list by label selector)
and `CoreV1Api.list_namespaced_pod` the way kube-apiserver does: 404 `ApiException` for a missing object, 409 for a
create of an existing name, a `deletionTimestamp` under foreground deletion until the garbage collector has removed
the dependents (the object is read once so, then gone; `collect` finishes every one at once), background deletion
at once (the pods a test left in `pods` stay until it removes them: their grace period),
a `uid` and `creationTimestamp` on create. Faults are injected per call: an error before the call is applied, or
after it (the answer lost: the create happened, the caller saw a connection reset), or the pod killed there.

The controllers act when a test says so, on what upstream writes:
- Kueue v0.19.2 creates a Workload for every TrainJob (pkg/controller/jobframework/reconciler.go ConstructWorkload:
  ownerReference to the job, label kueue.x-k8s.io/job-uid), unsuspends it on admission (startJob), suspends it again
  on eviction or preemption (stopJob), and deactivates the Workload after `backoffLimitCount` PodsReady timeouts
  (spec.active false, Evicted `DeactivatedDueToRequeuingLimitExceeded`; workload_controller.go, evict.go);
- Trainer v2.3.0 writes `Suspended` (True `Suspended` / False `Resumed`), and copies the JobSet's terminal condition
  as `Complete` or `Failed` (pkg/runtime/framework/plugins/jobset/jobset.go Status()).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from kubernetes.client.exceptions import ApiException

TRAINJOB = ("trainer.kubeflow.org", "trainjobs")
WORKLOAD = ("kueue.x-k8s.io", "workloads")
WORKFLOW = ("argoproj.io", "workflows")


class PodKilled(BaseException):  # noqa: N818 - what happened, not an error the step could catch
    """The step's pod died here (OOM kill, node lost): nothing after this line of the step runs."""


@dataclass
class Fault:
    """At the `nth` call (1-based) of `verb` on `plural`: raise `error` before applying it, or after it (`after`)."""

    verb: str
    plural: str
    error: BaseException
    after: bool = False
    nth: int = 1


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _matches(obj: dict[str, Any], selector: str) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for requirement in filter(None, selector.split(",")):
        key, _, value = requirement.partition("=")
        if labels.get(key) != value:
            return False
    return True


@dataclass
class ApiServer:
    """Custom objects of every namespace, by (group, plural, namespace, name)."""

    now: datetime = field(default_factory=lambda: datetime(2026, 12, 7, 9, 0, tzinfo=UTC))
    objects: dict[tuple[str, str, str, str], dict[str, Any]] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (verb, plural, name or selector)
    grants_used: set[tuple[str, str, str]] = field(default_factory=set)  # (group, plural, RBAC verb)
    on_get: Callable[[ApiServer, str], None] | None = None  # a controller acting between two polls
    deleting: set[tuple[str, str, str, str]] = field(default_factory=set)  # seen with a deletionTimestamp once
    pods: dict[str, tuple[dict[str, str], str]] = field(default_factory=dict)  # name -> (labels, phase)
    _uids: Any = field(default_factory=lambda: itertools.count(1))

    # -- CustomObjectsApi ---------------------------------------------------------------------------

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str) -> Any:
        self.grants_used.add((group, plural, "get"))
        self._fault("get", plural, before=True)
        if self.on_get is not None and plural == TRAINJOB[1]:
            self.on_get(self, name)
        key = (group, plural, namespace, name)
        if key in self.deleting:  # the garbage collector removes the dependents, then the object: one read later
            self.deleting.discard(key)
            if key in self.objects:
                self._remove(key)
        found = self.objects.get(key)
        if found is None:
            raise ApiException(status=404, reason="Not Found")
        if found["metadata"].get("deletionTimestamp"):
            self.deleting.add(key)
        return copy.deepcopy(found)

    def create_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, body: dict[str, Any]
    ) -> Any:
        self.grants_used.add((group, plural, "create"))
        self._fault("create", plural, before=True)
        name = body["metadata"]["name"]
        key = (group, plural, namespace, name)
        if key in self.objects:
            raise ApiException(status=409, reason="AlreadyExists")
        obj = copy.deepcopy(body)
        obj["metadata"].update(namespace=namespace, uid=f"uid-{next(self._uids)}", creationTimestamp=_stamp(self.now))
        self.objects[key] = obj
        if plural == TRAINJOB[1]:
            self._workload_for(obj)
        self._fault("create", plural, before=False)
        return copy.deepcopy(obj)

    def delete_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, propagation_policy: str = "Background"
    ) -> Any:
        self.grants_used.add((group, plural, "delete"))
        self._fault("delete", plural, before=True)
        key = (group, plural, namespace, name)
        if key not in self.objects:
            raise ApiException(status=404, reason="Not Found")
        if propagation_policy == "Foreground":
            self.objects[key]["metadata"]["deletionTimestamp"] = _stamp(self.now)
        else:
            self._remove(key)
        self._fault("delete", plural, before=False)
        return {"status": "Success"}

    def patch_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: dict[str, Any]
    ) -> Any:
        """A JSON merge patch (RFC 7386: maps merged, lists replaced whole) of metadata."""
        self.grants_used.add((group, plural, "patch"))
        self._fault("patch", plural, before=True)
        key = (group, plural, namespace, name)
        if key not in self.objects:
            raise ApiException(status=404, reason="Not Found")
        for field_name, value in (body.get("metadata") or {}).items():
            self.objects[key]["metadata"][field_name] = copy.deepcopy(value)
        return copy.deepcopy(self.objects[key])

    def list_namespaced_pod(self, namespace: str, label_selector: str = "") -> Any:
        self.grants_used.add(("", "pods", "list"))
        self.calls.append(("list", "pods", label_selector))
        items = [
            SimpleNamespace(metadata=SimpleNamespace(name=name, labels=labels), status=SimpleNamespace(phase=phase))
            for name, (labels, phase) in self.pods.items()
            if _matches({"metadata": {"labels": labels}}, label_selector)
        ]
        return SimpleNamespace(items=items)

    def list_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, label_selector: str = ""
    ) -> Any:
        self.grants_used.add((group, plural, "list"))
        self._fault("list", plural, before=True)
        self.calls.append(("list", plural, label_selector))
        items = [copy.deepcopy(o) for (g, p, ns, _), o in self.objects.items()
                 if (g, p, ns) == (group, plural, namespace) and _matches(o, label_selector)]  # fmt: skip
        return {"items": items}

    # -- the garbage collector and the controllers ------------------------------------------------------

    def collect(self) -> None:
        """The garbage collector finishes every foreground deletion (the JobSet, its Jobs and pods are gone)."""
        for key in [k for k, o in self.objects.items() if o["metadata"].get("deletionTimestamp")]:
            self._remove(key)

    def trainjob(self, name: str, namespace: str = "ml") -> dict[str, Any] | None:
        return self.objects.get((*TRAINJOB, namespace, name))

    def trainjobs(self) -> list[str]:
        return sorted(name for (_, plural, _, name) in self.objects if plural == TRAINJOB[1])

    def admit(self, name: str, namespace: str = "ml") -> None:
        """Kueue admits the TrainJob (startJob: unsuspended); Trainer records Suspended=False Resumed."""
        job = self._job(name, namespace)
        job["spec"]["suspend"] = False
        self._condition(job, "Suspended", "False", "Resumed", "TrainJob is resumed")

    def evict(self, name: str, namespace: str = "ml") -> None:
        """Kueue preempts or evicts it (stopJob suspends it again, same name)."""
        job = self._job(name, namespace)
        job["spec"]["suspend"] = True
        self._condition(job, "Suspended", "True", "Suspended", "TrainJob is suspended")

    def complete(self, name: str, namespace: str = "ml") -> None:
        self._condition(
            self._job(name, namespace), "Complete", "True", "AllJobsCompleted", "jobset completed successfully"
        )

    def fail(self, name: str, reason: str = "ReachedMaxRestarts", namespace: str = "ml") -> None:
        message = "jobset failed due to reaching max number of restarts (first failed job: node-0)"
        self._condition(self._job(name, namespace), "Failed", "True", reason, message)

    def deactivate(self, name: str, namespace: str = "ml") -> None:
        """Kueue deactivates the Workload after its requeuing limit: the TrainJob stays suspended, no condition."""
        job = self._job(name, namespace)
        job["spec"]["suspend"] = True
        workload = self._workload_of(job)
        workload["spec"]["active"] = False
        message = "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
        self._condition(workload, "Evicted", "True", "DeactivatedDueToRequeuingLimitExceeded", message)

    def workflow(self, name: str, namespace: str = "ml", **spec: Any) -> dict[str, Any]:
        """The Argo Workflow object the step reads on SIGTERM (spec.shutdown, activeDeadlineSeconds)."""
        wf = {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": name, "namespace": namespace},
            "spec": dict(spec),
            "status": {"startedAt": _stamp(self.now), "phase": "Running"},
        }
        self.objects[(*WORKFLOW, namespace, name)] = wf
        return wf

    # -- internals ---------------------------------------------------------------------------------

    def _fault(self, verb: str, plural: str, before: bool) -> None:
        if before:
            self.calls.append((verb, plural, ""))
        count = sum(1 for v, p, _ in self.calls if (v, p) == (verb, plural))
        for fault in list(self.faults):
            if (fault.verb, fault.plural, fault.nth, fault.after) == (verb, plural, count, not before):
                self.faults.remove(fault)
                raise fault.error

    def _job(self, name: str, namespace: str) -> dict[str, Any]:
        job = self.trainjob(name, namespace)
        assert job is not None, f"no TrainJob {name}"
        return job

    def _workload_for(self, job: dict[str, Any]) -> None:
        meta = job["metadata"]
        name = f"trainjob-{meta['name']}-{meta['uid'][-5:]}"
        self.objects[(*WORKLOAD, meta["namespace"], name)] = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
            },  # fmt: skip
            "spec": {"active": True},
            "status": {"conditions": []},
        }
        self._condition(job, "Suspended", "True", "Suspended", "TrainJob is suspended")

    def _workload_of(self, job: dict[str, Any]) -> dict[str, Any]:
        uid = job["metadata"]["uid"]
        return next(o for (_, p, _, _), o in self.objects.items()
                    if p == WORKLOAD[1] and o["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == uid)  # fmt: skip

    def _remove(self, key: tuple[str, str, str, str]) -> None:
        obj = self.objects.pop(key)
        if key[1] == TRAINJOB[1]:  # its Workload goes with it (ownerReference)
            uid = obj["metadata"]["uid"]
            for k in [k for k, o in self.objects.items()
                      if k[1] == WORKLOAD[1] and o["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == uid]:  # fmt: skip
                self.objects.pop(k)

    def _condition(self, obj: dict[str, Any], kind: str, status: str, reason: str, message: str) -> None:
        conditions = obj.setdefault("status", {}).setdefault("conditions", [])
        conditions[:] = [c for c in conditions if c["type"] != kind]
        conditions.append({"type": kind, "status": status, "reason": reason, "message": message,
                           "lastTransitionTime": _stamp(self.now)})  # fmt: skip

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
