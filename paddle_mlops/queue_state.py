"""What Kueue says about the training queues, read over the official client: per ClusterQueue and flavor (region ×
GPU type) the GPUs nominal, borrowed, lent and in use, and the Workloads admitted and pending with their position.

Sources (kubernetes-sigs/kueue v0.19.2):
- ClusterQueue `spec.resourceGroups` (quota) and `status.flavorsReservation` / `status.flavorsUsage`
  (`total`, `borrowed` per flavor and resource: apis/kueue/v1beta2/clusterqueue_types.go). Reservation counts
  every Workload holding quota, Usage only the admitted ones (a reserved Workload may still wait for an
  admission check such as MultiKueue's). Kueue reports what a queue borrows, not what it lends: `lent` is the
  others' borrowing in the flavor, shared among the queues that have unused lendable quota there in proportion
  to it (exact when one queue lends, as with two teams); lendable as pkg/cache/scheduler/resource_node.go
  counts it: `nominal - lendingLimit` stays with the queue, the rest is the cohort's.
- Workload `status.admission.podSetAssignments[].flavors` / `resourceUsage` (the flavor given) and
  `spec.priority` / `spec.priorityClassRef` (apis/kueue/v1beta2/workload_types.go).
- The visibility API (`visibility.kueue.x-k8s.io/v1beta2` ClusterQueue subresource `pendingworkloads`:
  apis/visibility/v1beta2/types.go PendingWorkloadsSummary, `positionInClusterQueue` from 0). Where it is not
  served, positions come from the pending Workloads in Kueue's queue order: higher priority first, then the
  older (pkg/cache/queue/cluster_queue.go baseCompareFunc; eviction timestamps are not modelled).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from decimal import Decimal
from typing import Any

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
GPU = "nvidia.com/gpu"
TIMEOUT_S = 15
TEAM_LABEL = "paddle-mlops/team"
REGION_LABEL, GPU_TYPE_LABEL = "region", "gpu-type"
# A flavor without a region label (a MultiKueue manager's accounting flavor): the worker clusters pick the region.
ANY_REGION = "any"


class KueueApi:
    """The read-only Kueue calls `queue` and `submit` make, over the official client's CustomObjectsApi."""

    def __init__(self, custom: Any) -> None:
        self.custom = custom

    @classmethod
    def connect(cls) -> KueueApi:
        from kubernetes import client, config

        try:
            config.load_kube_config()
        except config.ConfigException:
            config.load_incluster_config()
        return cls(client.CustomObjectsApi())

    def _list(self, plural: str) -> list[dict[str, Any]]:
        listed = self.custom.list_cluster_custom_object(GROUP, VERSION, plural, _request_timeout=TIMEOUT_S)
        return list(listed.get("items") or [])

    def cluster_queues(self) -> list[dict[str, Any]]:
        return self._list("clusterqueues")

    def resource_flavors(self) -> list[dict[str, Any]]:
        return self._list("resourceflavors")

    def workloads(self) -> list[dict[str, Any]]:
        return self._list("workloads")

    def local_queues(self) -> list[dict[str, Any]]:
        return self._list("localqueues")

    def pending_workloads(self, cluster_queue: str) -> list[dict[str, Any]] | None:
        """The visibility API's summary of a ClusterQueue's pending Workloads; None where it is not served
        (no APIService: 404; APIService not available: 503; not allowed: 403)."""
        from kubernetes.client.exceptions import ApiException

        api_client = self.custom.api_client
        # The client has no method for this aggregated API's subresource: build the request as its generated
        # methods do (param_serialize quotes the name into its own path segment), send, deserialize.
        request = api_client.param_serialize(
            method="GET",
            resource_path=f"/apis/{VISIBILITY_GROUP}/{VERSION}/clusterqueues/{{name}}/pendingworkloads",
            path_params={"name": cluster_queue},
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        try:
            response = api_client.call_api(*request, _request_timeout=TIMEOUT_S)
            response.read()
            summary = api_client.response_deserialize(response, {"200": "object"}).data
        except ApiException as exc:
            if exc.status in (403, 404, 503):
                return None
            raise
        return list((summary or {}).get("items") or [])


def gpus(value: Any) -> Decimal:
    from kubernetes.utils import parse_quantity

    return Decimal(parse_quantity(str(value))) if value is not None else Decimal(0)


@dataclass(frozen=True)
class FlavorQuota:
    """One flavor of a ClusterQueue: its GPU quota (spec) and what is reserved, used and borrowed (status)."""

    cluster_queue: str
    flavor: str
    region: str
    gpu_type: str
    nominal: Decimal
    borrowing_limit: Decimal | None
    lending_limit: Decimal | None
    reserved: Decimal = Decimal(0)
    used: Decimal = Decimal(0)
    borrowed: Decimal = Decimal(0)
    lent: Decimal = Decimal(0)

    @property
    def local(self) -> Decimal:
        """resource_node.go localQuota: what is never lent (nothing without a lendingLimit)."""
        return max(Decimal(0), self.nominal - self.lending_limit) if self.lending_limit is not None else Decimal(0)

    @property
    def lendable_unused(self) -> Decimal:
        """What this queue stores in the cohort and does not use itself (what others may borrow)."""
        return max(Decimal(0), (self.nominal - self.local) - max(Decimal(0), self.reserved - self.local))


@dataclass(frozen=True)
class WorkloadRow:
    name: str
    namespace: str
    job: str  # owner kind/name (the TrainJob)
    cluster_queue: str
    local_queue: str
    priority: int
    priority_class: str
    state: str  # admitted, reserved (quota held, admission checks pending), pending, finished
    gpus: Decimal
    flavor: str | None = None
    region: str | None = None
    position: int | None = None  # in the ClusterQueue, from 1
    position_source: str | None = None  # visibility API, or Workload status


@dataclass
class QueueState:
    """Every ClusterQueue's flavors and Workloads, as Kueue reports them."""

    flavors: list[FlavorQuota] = field(default_factory=list)  # the queues asked for
    all_flavors: list[FlavorQuota] = field(default_factory=list)  # every queue's (the cohort's quota)
    workloads: list[WorkloadRow] = field(default_factory=list)
    cohorts: dict[str, str] = field(default_factory=dict)  # ClusterQueue -> cohort
    teams: dict[str, str] = field(default_factory=dict)  # ClusterQueue -> team label
    visibility: dict[str, bool] = field(default_factory=dict)  # ClusterQueue -> positions from the visibility API

    def of(self, cluster_queue: str) -> list[FlavorQuota]:
        return [f for f in self.flavors if f.cluster_queue == cluster_queue]

    def pending(self, cluster_queue: str) -> list[WorkloadRow]:
        rows = [w for w in self.workloads if w.cluster_queue == cluster_queue and w.state == "pending"]
        return sorted(rows, key=lambda w: (w.position is None, w.position or 0))

    def as_json(self) -> dict[str, Any]:
        def plain(value: Any) -> Any:
            return int(value) if isinstance(value, Decimal) and value == value.to_integral() else value

        queues = []
        for name in sorted({f.cluster_queue for f in self.flavors}):
            queues.append(
                {
                    "name": name,
                    "team": self.teams.get(name),
                    "cohort": self.cohorts.get(name),
                    "positions_from": "visibility API" if self.visibility.get(name) else "Workload status",
                    "flavors": [
                        {k: plain(v) for k, v in asdict(f).items() if k != "cluster_queue"} for f in self.of(name)
                    ],
                    "workloads": [
                        {k: plain(v) for k, v in asdict(w).items()} for w in self.workloads if w.cluster_queue == name
                    ],
                }
            )
        return {"clusterQueues": queues}


def _gpu_status(entries: list[dict[str, Any]] | None) -> dict[str, tuple[Decimal, Decimal]]:
    """flavor -> (total, borrowed) GPUs from status.flavorsReservation / flavorsUsage."""
    out = {}
    for entry in entries or []:
        for r in entry.get("resources") or []:
            if r.get("name") == GPU:
                out[entry["name"]] = (gpus(r.get("total", 0)), gpus(r.get("borrowed", 0)))
    return out


def _flavor_quotas(cq: dict[str, Any], labels: dict[str, dict[str, str]]) -> list[FlavorQuota]:
    name = cq["metadata"]["name"]
    status = cq.get("status") or {}
    reserved = _gpu_status(status.get("flavorsReservation"))
    used = _gpu_status(status.get("flavorsUsage"))
    out = []
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            gpu = next((r for r in flavor.get("resources") or [] if r.get("name") == GPU), None)
            if gpu is None:
                continue
            node_labels = labels.get(flavor["name"], {})
            out.append(
                FlavorQuota(
                    cluster_queue=name,
                    flavor=flavor["name"],
                    region=node_labels.get(REGION_LABEL, ANY_REGION),
                    gpu_type=node_labels.get(GPU_TYPE_LABEL, "any"),
                    nominal=gpus(gpu.get("nominalQuota", 0)),
                    borrowing_limit=gpus(gpu["borrowingLimit"]) if "borrowingLimit" in gpu else None,
                    lending_limit=gpus(gpu["lendingLimit"]) if "lendingLimit" in gpu else None,
                    reserved=reserved.get(flavor["name"], (Decimal(0), Decimal(0)))[0],
                    used=used.get(flavor["name"], (Decimal(0), Decimal(0)))[0],
                    borrowed=reserved.get(flavor["name"], (Decimal(0), Decimal(0)))[1],
                )
            )
    return out


def with_lent(flavors: list[FlavorQuota], cohorts: dict[str, str]) -> list[FlavorQuota]:
    """Each queue's share of what the other queues of its cohort borrow in the same flavor."""
    out = []
    for f in flavors:
        peers = [
            p for p in flavors if p.flavor == f.flavor and cohorts.get(p.cluster_queue) == cohorts.get(f.cluster_queue)
        ]
        if not cohorts.get(f.cluster_queue) or f.lendable_unused == 0:
            out.append(f)
            continue
        borrowed = sum((p.borrowed for p in peers if p.cluster_queue != f.cluster_queue), Decimal(0))
        lenders = sum((p.lendable_unused for p in peers if p.borrowed == 0), Decimal(0))
        share = borrowed * f.lendable_unused / lenders if lenders else Decimal(0)
        out.append(replace(f, lent=min(f.lendable_unused, share)))
    return out


def _condition(wl: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in (wl.get("status") or {}).get("conditions") or []
    )


def _workload_gpus(wl: dict[str, Any]) -> Decimal:
    status = wl.get("status") or {}
    assignments = (status.get("admission") or {}).get("podSetAssignments") or []
    if assignments:
        return sum((gpus((a.get("resourceUsage") or {}).get(GPU, 0)) for a in assignments), Decimal(0))
    requests = status.get("resourceRequests") or []
    if requests:
        return sum((gpus((r.get("resources") or {}).get(GPU, 0)) for r in requests), Decimal(0))
    total = Decimal(0)
    for ps in (wl.get("spec") or {}).get("podSets") or []:
        for c in ((ps.get("template") or {}).get("spec") or {}).get("containers") or []:
            total += gpus(((c.get("resources") or {}).get("requests") or {}).get(GPU, 0)) * int(ps.get("count", 1))
    return total


def _row(wl: dict[str, Any], cluster_queue: str, regions: dict[str, str]) -> WorkloadRow:
    meta, spec, status = wl.get("metadata") or {}, wl.get("spec") or {}, wl.get("status") or {}
    owner: dict[str, Any] = next(iter(meta.get("ownerReferences") or []), {})
    assignments = (status.get("admission") or {}).get("podSetAssignments") or []
    flavor = next((a.get("flavors", {}).get(GPU) for a in assignments if a.get("flavors", {}).get(GPU)), None)
    if _condition(wl, "Finished"):
        state = "finished"
    elif _condition(wl, "Admitted"):
        state = "admitted"
    elif _condition(wl, "QuotaReserved"):
        state = "reserved"
    else:
        state = "pending"
    return WorkloadRow(
        name=meta.get("name", ""),
        namespace=meta.get("namespace", ""),
        job=f"{owner.get('kind', '')}/{owner.get('name', '')}" if owner else "",
        cluster_queue=cluster_queue,
        local_queue=spec.get("queueName", ""),
        priority=int(spec.get("priority") or 0),
        priority_class=(spec.get("priorityClassRef") or {}).get("name", ""),
        state=state,
        gpus=_workload_gpus(wl),
        flavor=flavor if state != "pending" else None,
        region=regions.get(flavor) if flavor and state != "pending" else None,
    )


def _with_positions(
    rows: list[WorkloadRow], wls: dict[tuple[str, str], dict[str, Any]], summary: Any
) -> list[WorkloadRow]:
    pending = [r for r in rows if r.state == "pending"]
    if summary is not None:
        where = {
            ((i.get("metadata") or {}).get("namespace"), (i.get("metadata") or {}).get("name")): i for i in summary
        }
        placed = {
            (r.namespace, r.name): replace(
                r,
                position=int(where[(r.namespace, r.name)].get("positionInClusterQueue", 0)) + 1,
                position_source="visibility API",
            )
            for r in pending
            if (r.namespace, r.name) in where
        }
    else:

        def order(r: WorkloadRow) -> tuple[int, str, str]:
            meta = wls[(r.namespace, r.name)].get("metadata") or {}
            return (-r.priority, meta.get("creationTimestamp") or "", meta.get("uid") or "")

        placed = {
            (r.namespace, r.name): replace(r, position=i, position_source="Workload status")
            for i, r in enumerate(sorted(pending, key=order), start=1)
        }
    return [placed.get((r.namespace, r.name), r) for r in rows]


def read_state(api: KueueApi, team: str | None = None) -> QueueState:
    """Kueue's ClusterQueues (only the team's with `team`), their flavors and Workloads."""
    labels = {f["metadata"]["name"]: (f.get("spec") or {}).get("nodeLabels") or {} for f in api.resource_flavors()}
    regions = {name: node.get(REGION_LABEL, ANY_REGION) for name, node in labels.items()}
    queues = api.cluster_queues()
    state = QueueState()
    for cq in queues:
        name = cq["metadata"]["name"]
        state.cohorts[name] = (cq.get("spec") or {}).get("cohortName") or ""
        state.teams[name] = ((cq["metadata"].get("labels") or {}).get(TEAM_LABEL)) or ""
        state.flavors += _flavor_quotas(cq, labels)
    state.flavors = state.all_flavors = with_lent(state.flavors, state.cohorts)
    wanted = {n for n, t in state.teams.items() if team is None or t == team or n == team}
    state.flavors = [f for f in state.flavors if f.cluster_queue in wanted]
    local_to_cq = _local_queue_map(api)
    by_key: dict[tuple[str, str], dict[str, Any]] = {}
    rows: dict[str, list[WorkloadRow]] = {}
    for wl in api.workloads():
        meta = wl.get("metadata") or {}
        namespace, local_queue = meta.get("namespace", ""), (wl.get("spec") or {}).get("queueName", "")
        admitted_to = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue")
        queue_name: str | None = admitted_to or local_to_cq.get((namespace, local_queue))
        if queue_name is None or queue_name not in wanted:
            continue
        by_key[(namespace, meta.get("name", ""))] = wl
        rows.setdefault(queue_name, []).append(_row(wl, queue_name, regions))
    for queue_name in sorted(wanted):
        summary = api.pending_workloads(queue_name)
        state.visibility[queue_name] = summary is not None
        state.workloads += _with_positions(rows.get(queue_name, []), by_key, summary)
    state.workloads = [w for w in state.workloads if w.state != "finished"]
    return state


def _local_queue_map(api: KueueApi) -> dict[tuple[str, str], str]:
    """(namespace, LocalQueue) -> its ClusterQueue, for pending Workloads (which have no admission yet)."""
    out = {}
    for q in api.local_queues():
        meta = q.get("metadata") or {}
        out[(meta.get("namespace", ""), meta.get("name", ""))] = (q.get("spec") or {}).get("clusterQueue", "")
    return out
