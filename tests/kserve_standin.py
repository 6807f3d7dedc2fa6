"""A stand-in for the InferenceService API that does what KServe v0.20.0 on Knative does with it.

Encoded from kserve v0.20.0 (no code copied):
- pkg/controller/v1beta1/inferenceservice/reconcilers/knative/ksvc_reconciler.go `createKnativeService`:
  with `canaryTrafficPercent` set *and* a `latestRolledoutRevision`, the latest ready revision
  (`latestRevision: true`, tag `latest`) gets that percent and the last rolled-out revision
  (tag `prev`) the rest; otherwise the latest ready revision gets 100%.
- pkg/apis/serving/v1beta1/inference_service_status.go `PropagateStatus`: `latestRolledoutRevision`
  moves to the latest ready revision once it has 100% (the old one becomes
  `previousRolledoutRevision`), and moves back to the previous one when a rolled-out revision is
  pinned to less than 100% with all its traffic split onto itself; `status.observedGeneration` is the
  Knative Service's, not the InferenceService's.
- Knative Serving: a change of the revision template creates a new revision; `latestRevision: true`
  routes to the latest *ready* revision; Ready needs the latest created revision to be ready.

Status lags one controller pass behind each write: a read right after an update sees the old status.
`RawDeployment` objects have no Knative revisions: their predictor Deployment (tests/raw_deployment_standin.py,
readable through `read_namespaced_deployment` as AppsV1Api reads it) rolls each new spec out, and PropagateRawStatus
of `kserve_version` derives Ready and status.observedGeneration from it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from steps.runtime.release import inference_service as isvc
from tests.raw_deployment_standin import Deployment, propagate_raw_status


@dataclass
class Revision:
    name: str
    template: str
    ok: bool
    created: int
    ready: bool = False


@dataclass
class Service:
    body: dict[str, Any]
    revisions: list[Revision] = field(default_factory=list)
    latest_rolled_out: str = ""
    previous_rolled_out: str = ""
    ksvc_generation: int = 0
    ksvc_traffic: list[dict[str, Any]] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)
    deployment: Deployment | None = None  # RawDeployment only

    @property
    def raw(self) -> bool:
        return self.body["metadata"].get("annotations", {}).get("serving.kserve.io/deploymentMode") == "RawDeployment"


def revision_template(body: dict[str, Any]) -> str:
    """What Knative compares: the pod spec, labels and annotations, not canaryTrafficPercent."""
    predictor = dict(body["spec"]["predictor"])
    predictor.pop("canaryTrafficPercent", None)
    meta = body["metadata"]
    return json.dumps([predictor, meta.get("labels"), meta.get("annotations")], sort_keys=True)


class KServeStandIn:
    """`CustomObjectsApi`-shaped; `ready(name, body)` says whether a revision of that spec ever gets Ready."""

    def __init__(
        self,
        ready: Callable[[str, dict[str, Any]], bool] = lambda name, body: True,
        existing: dict[str, dict[str, Any]] | None = None,
        ready_after: int = 2,
        lag: bool = True,
        kserve_version: str = "0.20",
        progress_deadline: int = 1000,
    ):
        self.services: dict[str, Service] = {}
        self.calls: list[tuple[str, str]] = []
        self.tick = 0
        # (tick, name, {revision: percent}) after every controller pass: the live traffic.
        self.history: list[tuple[int, str, dict[str, int]]] = []
        self.writes: list[tuple[int, str, dict[str, Any]]] = []
        self._ready = ready
        self._ready_after = ready_after
        self._lag = lag
        self._kserve = kserve_version
        self._progress_deadline = progress_deadline
        self.deleted_at: dict[str, int] = {}
        for name, body in (existing or {}).items():
            self._write(name, json.loads(json.dumps(body)))
            for _ in range(ready_after + 4):
                self._reconcile(self.services[name])

    # -- the API
    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> dict[str, Any]:
        assert (group, version, plural) == (isvc.GROUP, isvc.VERSION, isvc.PLURAL)
        if name not in self.services:
            raise ApiException(status=404, reason="Not Found")
        svc = self.services[name]
        if not self._lag:  # a settled controller: status already reflects the last write
            for _ in range(3):
                self._reconcile(svc)
        seen = json.loads(json.dumps({**svc.body, "status": svc.status}))
        self._reconcile(svc)  # the controller works while the caller waits
        return seen

    def create_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, body: dict[str, Any]
    ) -> None:
        name = body["metadata"]["name"]
        assert name not in self.services, "create of an existing object"
        self.calls.append(("create", name))
        self._write(name, json.loads(json.dumps(body)))

    def replace_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: dict[str, Any]
    ) -> None:
        assert body["metadata"]["resourceVersion"] == self.services[name].body["metadata"]["resourceVersion"]
        self.calls.append(("replace", name))
        self._write(name, json.loads(json.dumps(body)))

    def delete_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str) -> None:
        self.calls.append(("delete", name))
        if name not in self.services:
            raise ApiException(status=404, reason="Not Found")
        del self.services[name]  # its Deployment goes with it (owner reference)
        self.deleted_at[name] = self.tick

    def read_namespaced_deployment(self, name: str, namespace: str) -> Any:
        """AppsV1Api: the predictor Deployment of a RawDeployment InferenceService."""
        svc = next((s for s in self.services.values() if s.deployment and s.deployment.name == name), None)
        if svc is None or svc.deployment is None:
            raise ApiException(status=404, reason="Not Found")
        if not self._lag:
            for _ in range(3):
                self._reconcile(svc)
        seen = svc.deployment.model()
        self._reconcile(svc)
        return seen

    # -- helpers for tests
    def settle(self, passes: int = 6) -> None:
        """Let the controllers run on after the caller stopped watching (traffic goes on flowing)."""
        for _ in range(passes):
            for svc in self.services.values():
                self._reconcile(svc)

    @property
    def objects(self) -> dict[str, dict[str, Any]]:
        return {name: svc.body for name, svc in self.services.items()}

    def model_uri(self, name: str) -> str:
        args = self.services[name].body["spec"]["predictor"]["containers"][0]["args"]
        return args[args.index("--model-uri") + 1]

    def revision_of(self, name: str, model_uri: str) -> list[str]:
        return [r.name for r in self.services[name].revisions if model_uri in r.template]

    # -- the controllers
    def _write(self, name: str, body: dict[str, Any]) -> None:
        self.tick += 1
        self.writes.append((self.tick, name, body))
        svc = self.services.get(name)
        meta = body["metadata"]
        if svc is None:
            svc = self.services[name] = Service(body)
            meta["generation"] = 1
        else:
            changed = svc.body["spec"] != body["spec"]
            meta["generation"] = svc.body["metadata"]["generation"] + (1 if changed else 0)
            svc.body = body
        meta["resourceVersion"] = str(self.tick)
        template = revision_template(body)
        if not svc.revisions or svc.revisions[-1].template != template:
            n = len(svc.revisions) + 1
            rev_name = f"{name}-predictor-{n:05d}" if not svc.raw else f"{name}-predictor-rs{n}"
            svc.revisions.append(Revision(rev_name, template, self._ready(name, body), self.tick))
            svc.ksvc_generation += 1

    def _reconcile(self, svc: Service) -> None:
        self.tick += 1
        for rev in svc.revisions:
            rev.ready = rev.ready or (rev.ok and self.tick - rev.created >= self._ready_after)
        if svc.raw:
            self._reconcile_raw(svc)
            return
        name = svc.body["metadata"]["name"]
        ready_revs = [r for r in svc.revisions if r.ready]
        latest_ready = ready_revs[-1].name if ready_revs else ""
        latest_created = svc.revisions[-1].name
        targets = _ksvc_targets(svc)
        if targets != svc.ksvc_traffic:
            svc.ksvc_traffic = targets
            svc.ksvc_generation += 1
        traffic = _route_traffic(targets, latest_ready, name)
        self._propagate(svc, traffic, latest_ready, latest_created)
        ready = bool(latest_ready) and latest_ready == latest_created and bool(traffic)
        cond = "True" if ready else ("Unknown" if svc.revisions[-1].ok else "False")
        svc.status = {
            "observedGeneration": svc.ksvc_generation,
            "url": f"http://{name}.ns.example.com",
            "conditions": [{"type": t, "status": cond} for t in ("IngressReady", "PredictorReady", "Ready")],
            "components": {
                "predictor": {
                    "latestCreatedRevision": latest_created,
                    "latestReadyRevision": latest_ready,
                    "latestRolledoutRevision": svc.latest_rolled_out,
                    "previousRolledoutRevision": svc.previous_rolled_out,
                    "traffic": traffic,
                    "url": f"http://{name}-predictor.ns.example.com",
                }
            },
        }
        self.history.append((self.tick, name, _split(traffic)))

    def _propagate(self, svc: Service, traffic: list[dict[str, Any]], latest_ready: str, latest_created: str) -> None:
        """inference_service_status.go PropagateStatus: the rolled-out revision bookkeeping."""
        split = _split(traffic)
        for t in traffic:
            if t["revisionName"] != latest_ready or not t.get("latestRevision"):
                continue
            if svc.latest_rolled_out != latest_ready:
                if t["percent"] == 100:
                    svc.previous_rolled_out, svc.latest_rolled_out = svc.latest_rolled_out, latest_ready
            elif latest_ready == latest_created and t["percent"] < 100:
                if split.get(t["revisionName"]) == 100 and svc.previous_rolled_out:
                    svc.latest_rolled_out = svc.previous_rolled_out

    def _reconcile_raw(self, svc: Service) -> None:
        """Standard (raw) mode: the Deployment controller's pass, then KServe's (spec into the Deployment,
        PropagateRawStatus back). The live traffic is the revision whose pod is available."""
        name = svc.body["metadata"]["name"]
        dep = svc.deployment
        if dep is not None:
            dep.control(self.tick, self._progress_deadline)
        latest = svc.revisions[-1]
        if dep is None:
            dep = svc.deployment = Deployment(f"{name}-predictor", latest, svc.body)
        elif dep.template is not latest:
            dep.template, dep.body, dep.generation = latest, svc.body, dep.generation + 1
        ready = propagate_raw_status(dep, self._kserve) if dep.observed else "Unknown"
        url = f"http://{name}.ns.example.com"
        svc.status = {
            "observedGeneration": dep.observed,
            **({"url": url} if ready == "True" else {}),
            "conditions": [
                {"type": "IngressReady", "status": "True"},
                {"type": "PredictorReady", "status": ready},
                {"type": "Ready", "status": ready},
            ],
            "components": {"predictor": {"url": url} if ready == "True" else {}},
        }
        self.history.append((self.tick, name, {dep.serving.name: 100} if dep.serving else {}))


def _ksvc_targets(svc: Service) -> list[dict[str, Any]]:
    """ksvc_reconciler.go createKnativeService: the traffic targets of the Knative Service."""
    canary = svc.body["spec"]["predictor"].get("canaryTrafficPercent")
    tagged = svc.body["metadata"].get("annotations", {}).get("serving.kserve.io/enable-tag-routing") == "true"
    latest_tag = {"tag": "latest"} if tagged else {}
    if canary is None or not svc.latest_rolled_out:
        return [{"latestRevision": True, "percent": 100, **latest_tag}]
    targets = [{"latestRevision": True, "percent": canary, **latest_tag}]
    if canary < 100:
        prev = {"revisionName": svc.latest_rolled_out, "latestRevision": False, "percent": 100 - canary, "tag": "prev"}
        targets.append(prev)
    return targets


def _route_traffic(targets: list[dict[str, Any]], latest_ready: str, name: str) -> list[dict[str, Any]]:
    """Knative's route status: latestRevision resolves to the latest ready revision (none: no route)."""
    traffic = []
    for t in targets:
        rev = t.get("revisionName") or latest_ready
        if not rev:
            continue
        entry = {**t, "revisionName": rev}
        if "tag" in entry:
            entry["url"] = f"http://{entry['tag']}-{name}-predictor.ns.example.com"
        traffic.append(entry)
    return traffic


def _split(traffic: list[dict[str, Any]]) -> dict[str, int]:
    """{revision: percent} summed over the traffic entries (a revision may stand in more than one)."""
    split: dict[str, int] = {}
    for t in traffic:
        split[t["revisionName"]] = split.get(t["revisionName"], 0) + t["percent"]
    return split
