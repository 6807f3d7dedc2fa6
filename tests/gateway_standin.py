"""A cluster in KServe's Gateway API mode, with live traffic: the KServe stand-in (tests/kserve_standin.py) plus the
HTTPRoutes and a gateway that routes requests by them (no code copied).

- KServe v0.20.0 pkg/controller/v1beta1/inferenceservice/reconcilers/ingress/httproute_reconciler.go
  `createRawTopLevelHTTPRoute`: once the predictor is Ready, the route `<isvc>` for the InferenceService's host, one
  rule with a `RegularExpression` path match on every path, backendRef `<isvc>-predictor` port 80, on the Gateway
  `kserve/kserve-ingress-gateway`; it goes with its InferenceService (controller reference).
- gateway-api v1.5.1 apis/v1/httproute_types.go HTTPRouteRule.Matches: across routes an `Exact` path match wins,
  then the longest `PathPrefix`; RegularExpression's place is implementation-specific (here: last, as `oldest_first`
  False); ties go to the oldest route, then "{namespace}/{name}". apis/v1/shared_types.go HTTPBackendRef.Weight:
  weight/(sum of weights), 0 gets nothing, unset is 1; a backendRef to a missing Service answers 500.
- `oldest_first=True` models a data plane that ignores match precedence and takes the oldest route for the host
  (how Istio merges the VirtualServices of one host on a gateway): the rollout's split is then never matched.

Every API call lets time pass: `requests_per_call` live requests reach the model's host first.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kubernetes.client.exceptions import ApiException

from steps.runtime.release import canary_route
from steps.runtime.release import inference_service as isvc
from tests.kserve_standin import KServeStandIn
from tests.rollout_doubles import metrics_text

GATEWAY = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "kserve",
           "name": "kserve-ingress-gateway"}  # fmt: skip


def host_of(isvc_name: str) -> str:
    return f"{isvc_name}.ns.example.com"  # the KServe stand-in's status.url


class GatewayCluster:
    """CustomObjectsApi (InferenceServices, HTTPRoutes) and AppsV1Api over one KServe stand-in, with live traffic to
    `host` on the v1 predict path; pods running a spec with `bad_model` in it answer every other request 500."""

    def __init__(self, kserve: KServeStandIn, host: str, model_name: str, bad_model: str | None = None,
                 requests_per_call: int = 20, oldest_first: bool = False):  # fmt: skip
        self.kserve, self.host, self.bad_model = kserve, host, bad_model
        self.path = f"/v1/models/{model_name}:predict"
        self.requests_per_call, self.oldest_first = requests_per_call, oldest_first
        self.routes: dict[str, dict[str, Any]] = {}
        self.route_writes: list[tuple[str, str, dict[str, Any]]] = []  # (verb, name, spec) of the rollout's writes
        self.served: dict[str, list[int]] = {}  # backend Service -> [ok, 5xx] since its InferenceService was created
        # (route, backend, the rule's {backend: weight}) of every live request
        self.sent: list[tuple[str, str, dict[str, int]]] = []
        self._credit: dict[tuple[str, str], float] = {}
        self._clock = 0

    # -- CustomObjectsApi
    def get_namespaced_custom_object(self, group: str, version: str, ns: str, plural: str, name: str) -> Any:
        self._pass()
        if group != canary_route.GATEWAY_GROUP:
            return self.kserve.get_namespaced_custom_object(group, version, ns, plural, name)
        if name not in self.routes:
            raise ApiException(status=404, reason="Not Found")
        return json.loads(json.dumps(self.routes[name]))

    def create_namespaced_custom_object(self, group: str, version: str, ns: str, plural: str, body: Any) -> None:
        self._pass()
        if group != canary_route.GATEWAY_GROUP:
            return self.kserve.create_namespaced_custom_object(group, version, ns, plural, body)
        assert body["metadata"]["name"] not in self.routes, "create of an existing HTTPRoute"
        self._store(body, generation=1)
        self.route_writes.append(("create", body["metadata"]["name"], body["spec"]))
        return None

    def replace_namespaced_custom_object(self, group: str, version: str, ns: str, plural: str, name: str,
                                         body: Any) -> None:  # fmt: skip
        self._pass()
        if group != canary_route.GATEWAY_GROUP:
            return self.kserve.replace_namespaced_custom_object(group, version, ns, plural, name, body)
        current = self.routes[name]
        assert body["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"], "stale HTTPRoute update"
        changed = body["spec"] != current["spec"]
        self._store(body, generation=current["metadata"]["generation"] + changed, created=current["metadata"])
        self.route_writes.append(("replace", name, body["spec"]))
        return None

    def delete_namespaced_custom_object(self, group: str, version: str, ns: str, plural: str, name: str) -> None:
        self._pass()
        if group != canary_route.GATEWAY_GROUP:
            self.kserve.delete_namespaced_custom_object(group, version, ns, plural, name)
            self.served.pop(f"{name}-predictor", None)
            return
        self.route_writes.append(("delete", name, {}))
        if self.routes.pop(name, None) is None:
            raise ApiException(status=404, reason="Not Found")

    def read_namespaced_deployment(self, name: str, namespace: str) -> Any:
        self._pass()
        return self.kserve.read_namespaced_deployment(name, namespace)

    # -- what the gateway does
    def _store(self, body: dict[str, Any], generation: int, created: dict[str, Any] | None = None) -> None:
        self._clock += 1
        body = json.loads(json.dumps(body))
        meta = body["metadata"]
        meta["generation"] = generation
        meta["resourceVersion"] = str(self._clock)
        meta["creationTimestamp"] = (created or {}).get("creationTimestamp", self._clock)
        conditions = [
            {"type": t, "status": "True", "reason": t, "observedGeneration": generation}
            for t in ("Accepted", "ResolvedRefs")
        ]
        body["status"] = {
            "parents": [{"parentRef": ref, "conditions": conditions} for ref in body["spec"]["parentRefs"]]
        }
        self.routes[meta["name"]] = body

    def _kserve_routes(self) -> None:
        """createRawTopLevelHTTPRoute for every Ready raw InferenceService; its route goes with it."""
        for name in [n for n in self.routes if n.removesuffix("-canary-split") == n and n not in self.kserve.services]:
            del self.routes[name]
        for name, svc in self.kserve.services.items():
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in svc.status.get("conditions") or [])
            if svc.raw and ready and name not in self.routes:
                rule = {
                    "matches": [{"path": {"type": "RegularExpression", "value": "^/.*$"}}],
                    "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [
                        {"name": "KServe-Isvc-Name", "value": name},
                        {"name": "KServe-Isvc-Namespace", "value": "ns"}]}}],
                    "backendRefs": [{"kind": "Service", "name": f"{name}-predictor", "namespace": "ns", "port": 80}],
                    "timeouts": {"request": "60s"},
                }  # fmt: skip
                body = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                        "metadata": {"name": name, "namespace": "ns"},
                        "spec": {"hostnames": [host_of(name)], "parentRefs": [GATEWAY], "rules": [rule]}}  # fmt: skip
                self._store(body, generation=1)

    def _pass(self) -> None:
        self._kserve_routes()
        for _ in range(self.requests_per_call):
            self._send()

    def _best_rule(self) -> tuple[str, dict[str, Any]] | None:
        found = []
        for name, route in self.routes.items():
            if self.host not in route["spec"]["hostnames"]:
                continue
            for rule in route["spec"]["rules"]:
                for match in rule.get("matches") or [{"path": {"type": "PathPrefix", "value": "/"}}]:
                    kind, value = match["path"]["type"], match["path"]["value"]
                    if kind == "Exact" and value == self.path:
                        rank = 0
                    elif kind == "PathPrefix" and self.path.startswith(value):
                        rank = 1
                    elif kind == "RegularExpression" and re.fullmatch(value, self.path):
                        rank = 2
                    else:
                        continue
                    when = route["metadata"]["creationTimestamp"]
                    found.append(((when,) if self.oldest_first else (rank, when), f"ns/{name}", name, rule))
        if not found:
            return None
        _, _, name, rule = min(found, key=lambda f: (f[0], f[1]))
        return name, rule

    def _send(self) -> None:
        best = self._best_rule()
        if best is None:
            return
        name, rule = best
        refs = [(r["name"], r.get("weight", 1)) for r in rule["backendRefs"] if r.get("weight", 1) > 0]
        total = sum(w for _, w in refs)
        for backend, weight in refs:  # smooth weighted round robin: each request to the backend owed the most
            self._credit[(name, backend)] = self._credit.get((name, backend), 0.0) + weight / total
        backend = max((b for b, _ in refs), key=lambda b: self._credit[(name, b)])
        self._credit[(name, backend)] -= 1.0
        self.sent.append((name, backend, {r["name"]: r.get("weight", 1) for r in rule["backendRefs"]}))
        svc = self.kserve.services.get(backend.removesuffix("-predictor"))
        counts = self.served.setdefault(backend, [0, 0])
        bad = svc is None or (self.bad_model is not None and self.bad_model in json.dumps(svc.body))
        counts[1 if bad and (svc is None or sum(counts) % 2) else 0] += 1


class LiveProbe:
    """The rollout's probe against the cluster above: a smoke request counts as one answered request of the backend
    the URL names; `/metrics` shows what that backend answered."""

    def __init__(self, cluster: GatewayCluster):
        self.cluster = cluster
        self.smoked: list[str] = []

    def _backend(self, url: str) -> str:
        return f"{url.removeprefix('http://').split('.')[0]}-predictor"

    def smoke(self, url: str, model_name: str, texts: Any) -> None:
        self.smoked.append(url)
        self.cluster.served.setdefault(self._backend(url), [0, 0])[0] += 1

    def metrics(self, url: str) -> str:
        self.cluster._pass()
        ok, errors = self.cluster.served.get(self._backend(url), [0, 0])
        return metrics_text(ok, errors)


def split_weights(cluster: GatewayCluster, stable: str) -> list[tuple[str, dict[str, int]]]:
    """(verb, {backend: weight}) of each write of the rollout's split route, in order."""
    out = []
    for verb, name, spec in cluster.route_writes:
        if name == canary_route.split_name(stable):
            refs = spec.get("rules", [{}])[0].get("backendRefs", []) if spec else []
            out.append((verb, {r["name"]: r["weight"] for r in refs}))
    return out


def serving(cluster: GatewayCluster, name: str) -> dict[str, Any]:
    return cluster.kserve.objects[name] if name in cluster.kserve.objects else {}


__all__ = ["GatewayCluster", "LiveProbe", "host_of", "isvc", "serving", "split_weights"]
