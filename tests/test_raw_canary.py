"""RawDeployment's canary on live traffic (#60 item 2): the rollout's own weighted route splits the model host's
inference requests between `<isvc>-predictor` and `<isvc>-canary-predictor` for the window, the error-rate/p99
guard reads the canary's answers to those requests, and the split ends at (100, 0) and goes, promoted or rolled back.

The cluster is tests/gateway_standin.py (KServe v0.20.0 httproute_reconciler.go's own route beside ours; gateway-api
v1.5.1 apis/v1/httproute_types.go match precedence and apis/v1/shared_types.go weights); the routes are validated
against the vendored upstream CRD schemas (tests/schemas/httproute-…, virtualservice-…).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from paddle_mlops_core.config.loader import load_config, load_regions
from steps import rollout
from steps.runtime.release import canary_route
from steps.runtime.release import inference_service as isvc
from steps.runtime.release.rollout_outcome import CANARY_PASSED, PROMOTED, ROLLED_BACK, SMOKE_CHECKED
from tests.gateway_standin import GATEWAY, GatewayCluster, LiveProbe, host_of, split_weights
from tests.kserve_standin import KServeStandIn
from tests.rollout_doubles import IMAGE, MODEL_URI, FakeClock
from tests.validate_manifests import validate_vendored

OLD_URI = "s3://paddle-mlops/models/ernie-sentiment/7"


def raw_cfg(router: str = "gateway-api", *extra: str) -> Any:
    overrides = ["serving.deployment_mode=RawDeployment", f"serving.canary_router={router}"]
    if router == "gateway-api":  # Envoy Gateway's proxies, admitted by the predictor NetworkPolicy
        overrides.append("serving.gateway_namespaces=[envoy-gateway-system]")
    overrides += ["serving.ready_timeout_seconds=60", "serving.canary_window_seconds=60", *extra]
    return load_config(env="prod", overrides=overrides)


def cluster_serving_v7(cfg: Any, **kw: Any) -> tuple[GatewayCluster, Any, str]:
    region = load_regions()[cfg.serving.regions[0]]
    name = isvc.service_name(cfg, region)
    settled = {k: kw.pop(k) for k in ("lag", "ready_after") if k in kw}
    existing = {name: isvc.build_inference_service(cfg, region, OLD_URI, IMAGE, "7")}
    kserve = KServeStandIn(existing=existing, **settled)
    return GatewayCluster(kserve, host_of(name), cfg.serving.model_name, **kw), region, name


def roll_out(cfg: Any, cluster: GatewayCluster, region: Any) -> Any:
    from steps.runtime.release.kserve_rollout import KServeRollout

    clock = FakeClock()
    machine = KServeRollout(cfg, cluster, LiveProbe(cluster), clock=clock, sleep=clock.sleep, poll_seconds=5)
    return machine.run([region], MODEL_URI, "8", IMAGE)


def share_while_split(cluster: GatewayCluster, name: str, percent: int) -> tuple[int, int]:
    """(requests the split route carried at (100 - percent, percent), of which the canary answered)."""
    weights = {f"{name}-predictor": 100 - percent, f"{name}-canary-predictor": percent}
    carried = [b for route, b, w in cluster.sent if route == canary_route.split_name(name) and w == weights]
    return len(carried), carried.count(f"{name}-canary-predictor")


def test_raw_rollout_shifts_canary_percent_of_live_traffic_through_the_httproute() -> None:
    cfg = raw_cfg()
    cluster, region, name = cluster_serving_v7(cfg)
    outcome = roll_out(cfg, cluster, region)
    assert outcome.outcome == PROMOTED and outcome.canary == CANARY_PASSED, outcome.reason
    carried, to_canary = share_while_split(cluster, name, cfg.serving.canary_percent)
    assert carried >= 100 and to_canary == pytest.approx(carried * cfg.serving.canary_percent / 100, abs=1)
    stable, canary = f"{name}-predictor", f"{name}-canary-predictor"
    # Split at (90, 10) for the window, back to (100, 0) once the main service runs the new model, then gone.
    assert split_weights(cluster, name) == [
        ("create", {stable: 90, canary: 10}),
        ("replace", {stable: 100, canary: 0}),
        ("delete", {}),
    ]
    assert canary_route.split_name(name) not in cluster.routes
    assert isvc.canary_name(cfg, region) not in cluster.kserve.objects
    assert cluster.kserve.model_uri(name) == MODEL_URI
    tail = cluster.sent[-cluster.requests_per_call :]
    assert {(route, backend) for route, backend, _ in tail} == {(name, stable)}, "after it all goes by KServe's route"


def test_injected_errors_in_live_traffic_roll_back_to_zero_percent() -> None:
    """The smoke request passes; half the live requests the canary answers are 500s: rolled back, weights (100, 0)
    before the split goes, the canary deleted, the main service never touched."""
    cfg = raw_cfg()
    cluster, region, name = cluster_serving_v7(cfg, bad_model=MODEL_URI)
    outcome = roll_out(cfg, cluster, region)
    assert outcome.outcome == ROLLED_BACK and not outcome.canary
    assert "canary unhealthy: error rate" in outcome.reason and "live requests" in outcome.reason, outcome.reason
    stable, canary = f"{name}-predictor", f"{name}-canary-predictor"
    assert split_weights(cluster, name) == [
        ("create", {stable: 90, canary: 10}),
        ("replace", {stable: 100, canary: 0}),
        ("delete", {}),
    ]
    assert cluster.served[stable][1] == 0, "the stable predictor answered an error"
    assert cluster.kserve.model_uri(name) == OLD_URI and isvc.canary_name(cfg, region) not in cluster.kserve.objects


def test_a_split_the_gateway_never_matches_fails_the_canary() -> None:
    """A data plane that takes the oldest route for the host (Istio's merge of one host's VirtualServices on a gateway)
    never sends the canary a request: no live request, no 'canary passed'."""
    cfg = raw_cfg("gateway-api", "serving.canary_min_requests=5")
    cluster, region, name = cluster_serving_v7(cfg, oldest_first=True)
    outcome = roll_out(cfg, cluster, region)
    assert outcome.outcome == ROLLED_BACK and "got 0 live requests" in outcome.reason, outcome.reason
    assert cluster.kserve.model_uri(name) == OLD_URI and canary_route.split_name(name) not in cluster.routes


def test_without_a_router_the_registry_says_smoke_checked_no_canary(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.test_rollout import FakeRegistry

    cfg = raw_cfg("none")
    cluster, region, name = cluster_serving_v7(cfg, lag=False, ready_after=0)
    registry = FakeRegistry(champion="7")
    # No regional MinIO here: the rollout reads the model where it was published (tests/test_model_replication.py
    # covers the regions' own stores).
    overrides = json.dumps(
        [
            "serving.deployment_mode=RawDeployment",
            "serving.ready_timeout_seconds=60",
            "serving.canary_window_seconds=0",
            "storage.region_stores=false",
        ]
    )
    args = ["--env", "prod", "--overrides", overrides, "--model-uri", MODEL_URI, "--model-version", "8"]
    args += ["--regions", region.name, "--image-digest", IMAGE.partition("@")[2], "--outputs-dir", str(tmp_path)]
    with caplog.at_level(logging.WARNING):
        assert rollout.main(args, registry=registry, api=cluster, probe=LiveProbe(cluster)) == 0
    assert registry.tags["8"]["rollout.canary"] == SMOKE_CHECKED == "smoke-checked, no canary"
    assert "smoke-checked, no canary: serving.canary_router is none" in caplog.text
    assert not any(route == canary_route.split_name(name) for route, _, _ in cluster.sent)


def test_a_retried_step_reapplies_the_same_route() -> None:
    """Create-or-replace: a second split with the same weights changes nothing and leaves one route."""
    cfg = raw_cfg()
    cluster, region, name = cluster_serving_v7(cfg)
    stable = cluster.get_namespaced_custom_object(isvc.GROUP, isvc.VERSION, "ns", isvc.PLURAL, name)
    router = canary_route.router_for(cfg, cluster, FakeClock(), lambda s: None, 0)
    assert router is not None
    router.split(stable, f"{name}-canary", 10)
    first = cluster.routes[canary_route.split_name(name)]
    router.split(stable, f"{name}-canary", 10)
    again = cluster.routes[canary_route.split_name(name)]
    assert [v for v, *_ in cluster.route_writes] == ["create", "replace"]
    assert again["spec"] == first["spec"] and again["metadata"]["generation"] == first["metadata"]["generation"] == 1


def test_the_split_httproute_beside_kserves() -> None:
    """Same Gateway and hostnames as KServe's route, Exact matches on the inference paths (they outrank its
    RegularExpression match whatever the routes' ages), proportional weights, valid against the upstream CRD."""
    cfg = raw_cfg()
    cluster, _, name = cluster_serving_v7(cfg)
    cluster.get_namespaced_custom_object(isvc.GROUP, isvc.VERSION, "ns", isvc.PLURAL, name)
    kserve_route = cluster.routes[name]
    paths = canary_route.inference_paths("ernie-sentiment")
    body = canary_route.http_route(kserve_route, name, f"{name}-canary", 10, paths)
    assert validate_vendored(body, "split HTTPRoute") == []
    assert body["spec"]["parentRefs"] == [GATEWAY] and body["spec"]["hostnames"] == [host_of(name)]
    (rule,) = body["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "Exact", "value": p}} for p in paths]
    assert rule["filters"] == kserve_route["spec"]["rules"][0]["filters"]
    assert [(r["name"], r["weight"], r["port"]) for r in rule["backendRefs"]] == [
        (f"{name}-predictor", 90, 80),
        (f"{name}-canary-predictor", 10, 80),
    ]


def test_the_split_virtualservice() -> None:
    """istio/api networking/v1alpha3 virtual_service.proto: weights relative, here summing to 100 (older releases
    required it); exact URI matches; bound to the configured gateway; valid against the upstream CRD."""
    body = canary_route.virtual_service("m-cn-north.ns.example.com", "istio-system/ingress", "ns", "m-cn-north",
                                        "m-cn-north-canary", 10, canary_route.inference_paths("m"))  # fmt: skip
    assert validate_vendored(body, "split VirtualService") == []
    (http,) = body["spec"]["http"]
    assert body["spec"]["gateways"] == ["istio-system/ingress"]
    assert [m["uri"] for m in http["match"]] == [{"exact": "/v1/models/m:predict"}, {"exact": "/v2/models/m/infer"}]
    assert [(d["destination"]["host"], d["weight"]) for d in http["route"]] == [
        ("m-cn-north-predictor.ns.svc.cluster.local", 90),
        ("m-cn-north-canary-predictor.ns.svc.cluster.local", 10),
    ]
    assert sum(d["weight"] for d in http["route"]) == 100


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["serving.canary_router=gateway-api"], "splits traffic in RawDeployment mode only"),
        (["serving.deployment_mode=RawDeployment", "serving.canary_router=istio"], "needs serving.canary_gateway"),
    ],
)
def test_a_router_that_cannot_split_is_a_config_error(overrides: list[str], message: str) -> None:
    with pytest.raises((ValidationError, Exception), match=message):
        load_config(env="prod", overrides=overrides)


def test_gateway_api_without_the_proxies_namespace_is_refused() -> None:
    """The Gateway's proxies send the live requests (kserve httproute_reconciler.go parentRefs kserveIngressGateway);
    a predictor NetworkPolicy that does not admit their namespace would drop them all."""
    from paddle_mlops_core.config.loader import ConfigError

    with pytest.raises(ConfigError, match="needs serving.gateway_namespaces"):
        load_config(
            env="prod", overrides=["serving.deployment_mode=RawDeployment", "serving.canary_router=gateway-api"]
        )
