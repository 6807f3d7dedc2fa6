"""A stand-in of the Kueue API for `paddle-mlops queue` and `submit` tests: the official client's CustomObjectsApi
answering from a `KueueCluster`, with the objects shaped as Kueue writes them (kubernetes-sigs/kueue v0.19.2):

- ClusterQueue status as pkg/cache/scheduler's ClusterQueue status update fills it
  (apis/kueue/v1beta2/clusterqueue_types.go): `flavorsReservation` from every Workload holding quota,
  `flavorsUsage` from the admitted ones, each resource's `total` and `borrowed` (above nominal quota),
  `pendingWorkloads` / `reservingWorkloads` / `admittedWorkloads`, the `Active` condition;
- Workloads as the TrainJob integration creates them (pkg/controller/jobframework: name
  `trainjob-<job>-<hash>`, owner reference to the TrainJob, `kueue.x-k8s.io/job-uid` label, `spec.queueName`,
  `spec.priority` and `priorityClassRef` from the WorkloadPriorityClass) and as the scheduler admits them
  (`status.admission.podSetAssignments[].flavors` / `resourceUsage` / `count`, conditions QuotaReserved and
  Admitted) or leaves them pending (QuotaReserved False, reason Pending, the flavorassigner's message);
- the visibility API's PendingWorkloadsSummary (apis/visibility/v1beta2/types.go): the pending Workloads of a
  ClusterQueue in queue order (priority, then creation: pkg/cache/queue/cluster_queue.go baseCompareFunc) with
  `positionInClusterQueue` / `positionInLocalQueue` from 0; or 404 where its APIService is not installed.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from decimal import Decimal
from types import SimpleNamespace
from typing import Any
from urllib.parse import unquote, urlsplit

from kubernetes.client import ApiClient, Configuration
from kubernetes.client.rest import RESTResponse
from kubernetes.utils import parse_quantity

from paddle_mlops_core.config import PipelineConfig
from pipelines import kueue_names
from pipelines.platform import kueue

GPU = "nvidia.com/gpu"
VISIBILITY_PATH = "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{name}/pendingworkloads"


def _quantity(value: Decimal) -> str:
    return str(int(value)) if value == value.to_integral() else str(value)


def workload(
    job: str,
    *,
    priority_class: str,
    priority: int,
    workers: int = 2,
    gpus: int = 1,
    created: str = "2026-12-03T09:00:00Z",
    namespace: str = "ml-pipelines",
    admitted: tuple[str, str] | None = None,
    reserved_only: bool = False,
) -> dict[str, Any]:
    """A TrainJob's Workload: pending, or admitted in (ClusterQueue, flavor) (`reserved_only`: quota reserved,
    admission checks not yet Ready)."""
    uid = hashlib.sha1(job.encode()).hexdigest()
    per_pod = {"cpu": "8", "memory": "64Gi", GPU: str(gpus)}
    total = {k: _quantity(Decimal(parse_quantity(v)) * workers) for k, v in per_pod.items()}
    total["memory"] = f"{64 * workers}Gi"
    wl: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"trainjob-{job}-{uid[:5]}",
            "namespace": namespace,
            "uid": f"{uid[:8]}-{uid[8:12]}-{uid[12:16]}-{uid[16:20]}-{uid[20:32]}",
            "creationTimestamp": created,
            "labels": {"kueue.x-k8s.io/job-uid": uid[:36]},
            "ownerReferences": [
                {
                    "apiVersion": "trainer.kubeflow.org/v1alpha1",
                    "kind": "TrainJob",
                    "name": job,
                    "uid": uid[:36],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "active": True,
            "queueName": kueue_names.LOCAL_QUEUE,
            "priority": priority,
            "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": priority_class},
            "podSets": [
                {
                    "name": "node",
                    "count": workers,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "node",
                                    "image": "train@sha256:" + "0" * 64,
                                    "resources": {"requests": per_pod, "limits": {GPU: str(gpus)}},
                                }
                            ],
                            "restartPolicy": "Never",
                        }
                    },
                }
            ],
        },
        "status": {"resourceRequests": [{"name": "node", "resources": total}]},
    }
    status = wl["status"]
    if admitted is None:
        status["conditions"] = [
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": "Pending",
                "message": f"couldn't assign flavors to pod set node: insufficient unused quota for {GPU} in "
                f"flavor cn-north-a100, {workers * gpus} more needed",
                "lastTransitionTime": created,
                "observedGeneration": 1,
            }
        ]
        return wl
    cluster_queue, flavor = admitted
    status["admission"] = {
        "clusterQueue": cluster_queue,
        "podSetAssignments": [
            {"name": "node", "flavors": {r: flavor for r in per_pod}, "resourceUsage": total, "count": workers}
        ],
    }
    status["conditions"] = [
        {
            "type": "QuotaReserved",
            "status": "True",
            "reason": "QuotaReserved",
            "message": f"Quota reserved in ClusterQueue {cluster_queue}",
            "lastTransitionTime": created,
            "observedGeneration": 1,
        }
    ]
    if not reserved_only:
        status["conditions"].append(
            {
                "type": "Admitted",
                "status": "True",
                "reason": "Admitted",
                "message": "The workload is admitted",
                "lastTransitionTime": created,
                "observedGeneration": 1,
            }
        )
    return wl


def _is(wl: dict[str, Any], kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in wl["status"].get("conditions", []))


@dataclass
class KueueCluster:
    """What the stand-in serves: our generated Kueue objects, the Workloads, and whether visibility is served."""

    cluster_queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    resource_flavors: dict[str, dict[str, Any]] = field(default_factory=dict)
    local_queues: list[dict[str, Any]] = field(default_factory=list)
    workloads: list[dict[str, Any]] = field(default_factory=list)
    visibility: bool = True
    created: list[dict[str, Any]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    @classmethod
    def from_install(cls, cfg: PipelineConfig) -> KueueCluster:
        """The objects argo/kueue.yaml creates, as the API server returns them."""
        cluster = cls()
        for doc in kueue.render(cfg):
            if doc["kind"] == "ClusterQueue":
                cluster.cluster_queues[doc["metadata"]["name"]] = copy.deepcopy(doc)
            elif doc["kind"] == "ResourceFlavor":
                cluster.resource_flavors[doc["metadata"]["name"]] = copy.deepcopy(doc)
            elif doc["kind"] == "LocalQueue":
                cluster.local_queues.append(copy.deepcopy(doc))
        return cluster

    def status(self, name: str) -> dict[str, Any]:
        """A ClusterQueue's status from the Workloads holding its quota."""
        spec = self.cluster_queues[name]["spec"]
        mine = [w for w in self.workloads if (w["status"].get("admission") or {}).get("clusterQueue") == name]

        def flavors(holding: list[dict[str, Any]]) -> list[dict[str, Any]]:
            out = []
            for group in spec["resourceGroups"]:
                for f in group["flavors"]:
                    resources = []
                    for r in f["resources"]:
                        total = sum(
                            (
                                Decimal(parse_quantity(a["resourceUsage"].get(r["name"], "0")))
                                for w in holding
                                for a in w["status"]["admission"]["podSetAssignments"]
                                if a["flavors"].get(r["name"]) == f["name"]
                            ),
                            Decimal(0),
                        )
                        nominal = Decimal(parse_quantity(str(r["nominalQuota"])))
                        resources.append(
                            {
                                "name": r["name"],
                                "total": _quantity(total),
                                "borrowed": _quantity(max(Decimal(0), total - nominal)),
                            }
                        )
                    out.append({"name": f["name"], "resources": resources})
            return out

        pending = self._pending(name)
        return {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Ready",
                    "message": "Can admit new workloads",
                    "lastTransitionTime": "2026-12-01T00:00:00Z",
                    "observedGeneration": 1,
                }
            ],
            "flavorsReservation": flavors([w for w in mine if _is(w, "QuotaReserved")]),
            "flavorsUsage": flavors([w for w in mine if _is(w, "Admitted")]),
            "pendingWorkloads": len(pending),
            "reservingWorkloads": len([w for w in mine if _is(w, "QuotaReserved")]),
            "admittedWorkloads": len([w for w in mine if _is(w, "Admitted")]),
        }

    def _pending(self, name: str) -> list[dict[str, Any]]:
        """The Workloads not admitted yet in the LocalQueues that feed ClusterQueue `name`."""
        local = {
            (q["metadata"]["namespace"], q["metadata"]["name"])
            for q in self.local_queues
            if q["spec"]["clusterQueue"] == name
        }
        return [
            w
            for w in self.workloads
            if not w["status"].get("admission") and (w["metadata"]["namespace"], w["spec"]["queueName"]) in local
        ]

    def pending_summary(self, name: str) -> dict[str, Any]:
        pending = self._pending(name)
        pending.sort(key=lambda w: (-w["spec"]["priority"], w["metadata"]["creationTimestamp"], w["metadata"]["uid"]))
        items, per_local = [], {}
        for i, w in enumerate(pending):
            key = (w["metadata"]["namespace"], w["spec"]["queueName"])
            per_local[key] = per_local.get(key, -1) + 1
            meta = {k: w["metadata"][k] for k in ("name", "namespace", "uid", "creationTimestamp", "ownerReferences")}
            items.append(
                {
                    "metadata": meta,
                    "priority": w["spec"]["priority"],
                    "localQueueName": w["spec"]["queueName"],
                    "positionInClusterQueue": i,
                    "positionInLocalQueue": per_local[key],
                }
            )
        return {
            "kind": "PendingWorkloadsSummary",
            "apiVersion": "visibility.kueue.x-k8s.io/v1beta2",
            "metadata": {"creationTimestamp": None},
            "items": items,
        }


class StandInApiClient(ApiClient):
    """The official ApiClient (it builds the request and deserializes the answer) with the HTTP call answered
    from `cluster`: the visibility subresource, which the client has no method for."""

    def __init__(self, cluster: KueueCluster) -> None:
        super().__init__(Configuration(host="https://kueue.stand-in"))
        self.c = cluster

    def call_api(self, method: str, url: str, header_params: Any = None, body: Any = None, post_params: Any = None,
                 _request_timeout: Any = None) -> RESTResponse:  # fmt: skip
        path = urlsplit(url).path
        self.c.calls.append(f"{method} {path}")
        prefix, suffix = "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/", "/pendingworkloads"
        name = unquote(path[len(prefix) : -len(suffix)]) if path.startswith(prefix) and path.endswith(suffix) else None
        if method != "GET" or name is None or "/" in path[len(prefix) : -len(suffix)] or not self.c.visibility:
            return _response(404, {"kind": "Status", "message": "the server could not find the requested resource"})
        if name not in self.c.cluster_queues:
            return _response(404, {"kind": "Status", "message": f'clusterqueues "{name}" not found'})
        return _response(200, self.c.pending_summary(name))


def _response(status: int, body: dict[str, Any]) -> RESTResponse:
    raw = SimpleNamespace(
        status=status,
        reason="OK" if status == 200 else "Not Found",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    return RESTResponse(raw)


class KueueCustomObjectsApi:
    """CustomObjectsApi answering Kueue lists from `cluster`; Workflows it is asked to create are recorded."""

    def __init__(self, cluster: KueueCluster) -> None:
        self.c = cluster
        self.api_client = StandInApiClient(cluster)

    def list_cluster_custom_object(self, group: str, version: str, plural: str, **_: Any) -> dict[str, Any]:
        assert (group, version) == ("kueue.x-k8s.io", "v1beta2"), (group, version)
        self.c.calls.append(f"list {plural}")
        if plural == "clusterqueues":
            items = [{**copy.deepcopy(cq), "status": self.c.status(n)} for n, cq in self.c.cluster_queues.items()]
        elif plural == "resourceflavors":
            items = copy.deepcopy(list(self.c.resource_flavors.values()))
        elif plural == "localqueues":
            items = copy.deepcopy(self.c.local_queues)
        elif plural == "workloads":
            items = copy.deepcopy(self.c.workloads)
        else:
            raise AssertionError(plural)
        kind = {"clusterqueues": "ClusterQueue", "resourceflavors": "ResourceFlavor", "localqueues": "LocalQueue"}
        return {"apiVersion": f"{group}/{version}", "kind": kind.get(plural, "Workload") + "List", "items": items}

    def create_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, body: dict[str, Any], **_: Any
    ) -> dict[str, Any]:
        assert (group, version, plural) == ("argoproj.io", "v1alpha1", "workflows")
        created = copy.deepcopy(body)
        created["metadata"]["name"] = body["metadata"]["generateName"] + "q4x8z"
        self.c.created.append(created)
        return created


class SubmitApi:
    """What `paddle_mlops.submit` uses: Workflow creation and the Kueue reads, both over the stand-in."""

    def __init__(self, cluster: KueueCluster) -> None:
        from paddle_mlops.queue_state import KueueApi

        self.custom = KueueCustomObjectsApi(cluster)
        self.kueue = KueueApi(self.custom)

    def create_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.custom.create_namespaced_custom_object(*args, **kwargs)

    def read_namespaced_resource_quota(self, name: str, namespace: str) -> Any:
        raise AssertionError("a TrainJob run is checked against Kueue, not the namespace ResourceQuota")
