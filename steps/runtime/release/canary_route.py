"""RawDeployment's live canary: a route of the rollout's own that splits the inference requests of a model's host
between the stable predictor Service and the canary's, by weight (`serving.canary_router`).

Why a route of its own. KServe's raw reconciler owns the routes it creates for `<isvc>` and puts back any edit
(kserve v0.20.0 pkg/controller/v1beta1/inferenceservice/reconcilers/ingress/httproute_reconciler.go: it Updates its
HTTPRoute whenever `semanticHttpRouteEquals` finds a difference), and its own weighted canary (`spec.canary`,
pkg/apis/serving/v1beta1/inference_service_validation.go `validateCanarySpecs`) takes only a predictor with a
storageUri or model, which our custom container is not (inference_service.py says why), and v0.20.0 routes no
traffic by it yet (`applyCanaryWeights` came after). So the rollout adds a route `<isvc>-canary-split` for the same
host and removes it when the canary ends:

- gateway-api: an HTTPRoute on the Gateway and hostnames of KServe's top-level route `<isvc>` (read, not guessed),
  whose one rule matches the inference paths (`/v1/models/<m>:predict`, `/v2/models/<m>/infer`) with `Exact` path
  matches and sends them to `<isvc>-predictor` and `<isvc>-canary-predictor` (KServe's PredictorServiceName) by
  weight. KServe's rule matches every path with a `RegularExpression`; across routes "Exact" path matches take
  precedence over prefixes (gateway-api apis/v1/httproute_types.go, HTTPRouteRule.Matches) and the spec leaves a
  regular expression's rank to the implementation, which ranks Exact first in Envoy Gateway (internal/gatewayapi/
  sort.go) and Istio (pilot/pkg/config/kube/gateway/conversion.go getURIRank), so the split wins whatever the two
  routes' ages; every other path (health, metadata) stays on KServe's route. Weights are
  proportions, 0 sends nothing (apis/v1/shared_types.go HTTPBackendRef.Weight); we write (100 - p, p). The split
  counts as carrying traffic once every parent reports Accepted and ResolvedRefs True for its generation.
- istio: a VirtualService on `serving.canary_gateway` for the host of the InferenceService's URL, the same rule
  with `exact` URI matches and destination weights summing to 100 (istio/api networking/v1alpha3
  virtual_service.proto HTTPRouteDestination.weight; older releases required the sum of 100). Istio merges the
  routes of one host on a gateway port and sorts catch-all routes last (istio pilot/pkg/networking/core/gateway.go
  buildGatewayHTTPRouteConfig, core/route/route.go SortVHostRoutes), so the exact split precedes the `/` prefix of
  the VirtualService Istio makes from KServe's Ingress when `canary_gateway` selects the same ingress pods on the same
  plain-HTTP port; where it does not, the live guard's `canary_min_requests` fails the canary ("the route carried no
  traffic to it") instead of passing it unchecked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlparse

from paddle_mlops_core.config.models import PipelineConfig
from paddle_mlops_core.contracts import PART_OF
from steps.runtime.release.rollout_outcome import RolloutFailed

GATEWAY_GROUP = "gateway.networking.k8s.io"
GATEWAY_VERSION = "v1"
HTTPROUTES = "httproutes"
ISTIO_GROUP = "networking.istio.io"
ISTIO_VERSION = "v1beta1"
VIRTUALSERVICES = "virtualservices"


def split_name(isvc_name: str) -> str:
    return f"{isvc_name}-canary-split"


def predictor_service(isvc_name: str) -> str:
    """The predictor Service of an InferenceService (kserve pkg/constants/constants.go PredictorServiceName)."""
    return f"{isvc_name}-predictor"


def inference_paths(model_name: str) -> tuple[str, str]:
    """The paths live inference requests use (steps/runtime/serving/model_server/guard.py)."""
    return f"/v1/models/{model_name}:predict", f"/v2/models/{model_name}/infer"


def _labels(stable: str) -> dict[str, str]:
    return {**PART_OF, "paddle-mlops/canary-of": stable}


def http_route(kserve_route: dict[str, Any], stable: str, canary: str, percent: int, paths: tuple[str, ...]) -> dict:
    """The split HTTPRoute beside KServe's `kserve_route` (its top-level route of `stable`)."""
    spec = kserve_route.get("spec") or {}
    template = next(
        (
            rule
            for rule in spec.get("rules") or []
            if any(ref.get("name") == predictor_service(stable) for ref in rule.get("backendRefs") or [])
        ),
        None,
    )
    if template is None:
        raise RolloutFailed(
            f"HTTPRoute {kserve_route['metadata']['name']} has no rule to {predictor_service(stable)}: "
            "not KServe's route of this InferenceService"
        )
    ref = template["backendRefs"][0]

    def backend(service: str, weight: int) -> dict[str, Any]:
        kept = {k: ref[k] for k in ("group", "kind", "namespace", "port") if k in ref}
        return {**kept, "name": service, "weight": weight}

    rule: dict[str, Any] = {
        "matches": [{"path": {"type": "Exact", "value": p}} for p in paths],
        "backendRefs": [backend(predictor_service(stable), 100 - percent), backend(predictor_service(canary), percent)],
    }
    rule.update({k: template[k] for k in ("filters", "timeouts") if k in template})
    return {
        "apiVersion": f"{GATEWAY_GROUP}/{GATEWAY_VERSION}",
        "kind": "HTTPRoute",
        "metadata": {
            "name": split_name(stable),
            "namespace": kserve_route["metadata"]["namespace"],
            "labels": _labels(stable),
        },  # fmt: skip
        "spec": {"parentRefs": spec.get("parentRefs") or [], "hostnames": spec.get("hostnames") or [], "rules": [rule]},
    }


def virtual_service(
    host: str, gateway: str, namespace: str, stable: str, canary: str, percent: int, paths: tuple[str, ...]
) -> dict[str, Any]:
    """The split VirtualService for `host` on the Istio `gateway` (namespace/name)."""

    def destination(isvc_name: str, weight: int) -> dict[str, Any]:
        fqdn = f"{predictor_service(isvc_name)}.{namespace}.svc.cluster.local"
        return {"destination": {"host": fqdn, "port": {"number": 80}}, "weight": weight}

    return {
        "apiVersion": f"{ISTIO_GROUP}/{ISTIO_VERSION}",
        "kind": "VirtualService",
        "metadata": {"name": split_name(stable), "namespace": namespace, "labels": _labels(stable)},
        "spec": {
            "hosts": [host],
            "gateways": [gateway],
            "http": [
                {
                    "name": "canary-split",
                    "match": [{"uri": {"exact": p}} for p in paths],
                    "route": [destination(stable, 100 - percent), destination(canary, percent)],
                }
            ],
        },
    }


def _not_found(exc: Exception) -> bool:
    return getattr(exc, "status", None) == 404


def _holds(parent: dict[str, Any], kind: str, generation: Any) -> bool:
    """The parent's condition `kind` is True for the route's current generation."""
    return any(
        c.get("type") == kind and c.get("status") == "True" and c.get("observedGeneration", generation) == generation
        for c in parent.get("conditions") or []
    )


class CanaryRouter(Protocol):
    kind: str

    def split(self, stable: dict[str, Any], canary: str, percent: int) -> None: ...
    def exists(self, stable: str) -> bool: ...
    def remove(self, stable: str) -> None: ...


class GatewayApiRouter:
    """The split as an HTTPRoute beside KServe's (KServe's Gateway API mode)."""

    kind = "gateway-api"

    def __init__(self, cfg: PipelineConfig, api: Any, clock: Callable[[], float], sleep: Callable[[float], None],
                 poll: float):  # fmt: skip
        self.cfg, self.api, self.clock, self.sleep, self.poll = cfg, api, clock, sleep, poll
        self.ns = cfg.cluster.namespace

    def _read(self, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.api.get_namespaced_custom_object(GATEWAY_GROUP, GATEWAY_VERSION, self.ns, HTTPROUTES, name)
        except ApiException as exc:
            if _not_found(exc):
                return None
            raise

    def split(self, stable: dict[str, Any], canary: str, percent: int) -> None:
        """Send `percent` of the host's inference requests to `canary`; return once the gateway took the route."""
        name = stable["metadata"]["name"]
        kserve_route = self._read(name)
        if kserve_route is None:
            raise RolloutFailed(
                f"KServe's HTTPRoute {self.ns}/{name} not found: serving.canary_router gateway-api needs KServe's "
                "Gateway API mode (inferenceservice-config ingress enableGatewayApi: true); set canary_router to "
                "the router the cluster has (istio, none)"
            )
        body = http_route(kserve_route, name, canary, percent, inference_paths(str(self.cfg.serving.model_name)))
        current = self._read(body["metadata"]["name"])
        if current is None:
            self.api.create_namespaced_custom_object(GATEWAY_GROUP, GATEWAY_VERSION, self.ns, HTTPROUTES, body)
        else:
            body["metadata"]["resourceVersion"] = current["metadata"].get("resourceVersion")
            self.api.replace_namespaced_custom_object(
                GATEWAY_GROUP, GATEWAY_VERSION, self.ns, HTTPROUTES, body["metadata"]["name"], body
            )
        self._wait_accepted(body)

    def _wait_accepted(self, body: dict[str, Any]) -> None:
        """Every parent reports Accepted and ResolvedRefs True for the generation just written (KServe's own
        readiness test of its routes, httproute_reconciler.go isHTTPRouteReady, plus the generation)."""
        name = body["metadata"]["name"]
        deadline = self.clock() + self.cfg.serving.ready_timeout_seconds
        while True:
            route = self._read(name) or {}
            generation = (route.get("metadata") or {}).get("generation")
            parents = (route.get("status") or {}).get("parents") or []
            taken = [p for p in parents if all(_holds(p, t, generation) for t in ("Accepted", "ResolvedRefs"))]
            if parents and len(taken) == len(parents) >= len(body["spec"]["parentRefs"]):
                return
            if self.clock() >= deadline:
                problems = [
                    f"{c.get('type')} {c.get('status')}: {c.get('reason')} {c.get('message') or ''}".strip()
                    for p in parents
                    for c in p.get("conditions") or []
                    if c.get("type") in ("Accepted", "ResolvedRefs") and c.get("status") != "True"
                ]
                raise RolloutFailed(
                    f"HTTPRoute {self.ns}/{name} not accepted by its gateway within "
                    f"{self.cfg.serving.ready_timeout_seconds}s: {'; '.join(problems) or 'no parent status yet'}"
                )
            self.sleep(self.poll)

    def exists(self, stable: str) -> bool:
        return self._read(split_name(stable)) is not None

    def remove(self, stable: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.delete_namespaced_custom_object(GATEWAY_GROUP, GATEWAY_VERSION, self.ns, HTTPROUTES,
                                                     split_name(stable))  # fmt: skip
        except ApiException as exc:
            if not _not_found(exc):
                raise


class IstioRouter:
    """The split as a VirtualService on the Istio gateway that serves the InferenceService's host."""

    kind = "istio"

    def __init__(self, cfg: PipelineConfig, api: Any):
        self.cfg, self.api = cfg, api
        self.ns = cfg.cluster.namespace

    def _read(self, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.api.get_namespaced_custom_object(ISTIO_GROUP, ISTIO_VERSION, self.ns, VIRTUALSERVICES, name)
        except ApiException as exc:
            if _not_found(exc):
                return None
            raise

    def exists(self, stable: str) -> bool:
        return self._read(split_name(stable)) is not None

    def split(self, stable: dict[str, Any], canary: str, percent: int) -> None:
        name = stable["metadata"]["name"]
        host = urlparse(str((stable.get("status") or {}).get("url") or "")).hostname
        if not host:
            raise RolloutFailed(f"InferenceService {self.ns}/{name} reports no URL: no host to split traffic on")
        paths = inference_paths(str(self.cfg.serving.model_name))
        body = virtual_service(host, str(self.cfg.serving.canary_gateway), self.ns, name, canary, percent, paths)
        current = self._read(split_name(name))
        if current is None:
            self.api.create_namespaced_custom_object(ISTIO_GROUP, ISTIO_VERSION, self.ns, VIRTUALSERVICES, body)
            return
        body["metadata"]["resourceVersion"] = current["metadata"].get("resourceVersion")
        self.api.replace_namespaced_custom_object(ISTIO_GROUP, ISTIO_VERSION, self.ns, VIRTUALSERVICES,
                                                  split_name(name), body)  # fmt: skip

    def remove(self, stable: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.delete_namespaced_custom_object(ISTIO_GROUP, ISTIO_VERSION, self.ns, VIRTUALSERVICES,
                                                     split_name(stable))  # fmt: skip
        except ApiException as exc:
            if not _not_found(exc):
                raise


def router_for(
    cfg: PipelineConfig, api: Any, clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep, poll: float = 5.0,
) -> CanaryRouter | None:  # fmt: skip
    """The configured router, None for `canary_router: none` (the canary is smoke-checked only)."""
    if cfg.serving.canary_router == "gateway-api":
        return GatewayApiRouter(cfg, api, clock, sleep, poll)
    if cfg.serving.canary_router == "istio":
        return IstioRouter(cfg, api)
    return None
