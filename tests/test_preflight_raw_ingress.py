"""Preflight's raw-mode ingress check (paddle_mlops/preflight/raw_ingress.py) against the stand-in API: in
RawDeployment mode KServe's traffic enters through what `inferenceservice-config`'s `ingress` key names (kserve
v0.20 pkg/apis/serving/v1beta1/configmap.go IngressConfig; reconcilers/ingress/httproute_reconciler.go parentRef
`kserveIngressGateway`, kube_ingress_reconciler.go `ingressClassName`), and the predictor NetworkPolicy must admit
the namespace those requests come from."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from tests.kubernetes_standin import Cluster, deployment, ready_cluster
from tests.test_preflight import findings, results

RAW = ("--set", "serving.deployment_mode=RawDeployment")


def with_ingress(cluster: Cluster, **ingress: Any) -> Cluster:
    # kserve v0.20 config/configmap/inferenceservice.yaml ships the key as JSON.
    base = {
        "ingressGateway": "knative-serving/knative-ingress-gateway",
        "kserveIngressGateway": "kserve/kserve-ingress-gateway",
    }
    cluster.config_maps[("kserve", "inferenceservice-config")] = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="inferenceservice-config", namespace="kserve"),
        data={"ingress": json.dumps({**base, **ingress})},
    )
    return cluster


def raw_ingress(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in items if r["check"] == "raw-ingress"]


def test_istio_ingress_class_is_admitted(monkeypatch, capsys) -> None:
    code, items = results(with_ingress(ready_cluster(), ingressClassName="istio"), monkeypatch, capsys, *RAW)
    assert [r["status"] for r in raw_ingress(items)] == ["ok"], items
    assert not findings(items)


def test_an_ingress_controller_the_policy_does_not_admit_is_a_finding(monkeypatch, capsys) -> None:
    """Fails on a preflight whose gateway check returns early without Knative: every request would be dropped."""
    cluster = with_ingress(ready_cluster(), ingressClassName="nginx")
    code, items = results(cluster, monkeypatch, capsys, *RAW)
    (bad,) = findings(items)
    assert bad["check"] == "raw-ingress" and "ingress-nginx" in bad["message"]
    assert "serving.gateway_namespaces" in bad["fix"] and "ingress-nginx" in bad["fix"]
    code, items = results(cluster, monkeypatch, capsys, *RAW, "--set", "serving.gateway_namespaces=[ingress-nginx]")
    assert not findings(items)


@pytest.mark.parametrize(
    ("namespace", "labels"),
    [
        # Envoy Gateway runs each Gateway's proxies in its own namespace, labelled with the owning Gateway.
        (
            "envoy-gateway-system",
            {
                "gateway.envoyproxy.io/owning-gateway-name": "kserve-ingress-gateway",
                "gateway.envoyproxy.io/owning-gateway-namespace": "kserve",
            },
        ),
        # Istio deploys a Gateway's proxy beside it, with GEP-1762's label.
        ("kserve", {"gateway.networking.k8s.io/gateway-name": "kserve-ingress-gateway"}),
    ],
)
def test_gateway_api_mode_finds_the_gateways_proxies(monkeypatch, capsys, namespace, labels) -> None:
    cluster = with_ingress(ready_cluster(), enableGatewayApi=True)
    cluster.deployments["gateway"] = deployment(namespace, "kserve-ingress-gateway-proxy", "envoy:1", [], labels)
    code, items = results(cluster, monkeypatch, capsys, *RAW)
    (bad,) = findings(items)
    assert (
        bad["check"] == "raw-ingress"
        and namespace in bad["message"]
        and "Gateway kserve/kserve-ingress-gateway" in bad["message"]
    )
    admitted = f"serving.gateway_namespaces=[istio-system,{namespace}]"
    code, items = results(cluster, monkeypatch, capsys, *RAW, "--set", admitted)
    assert not findings(items) and [r["status"] for r in raw_ingress(items)] == ["ok"]


def test_gateway_api_mode_without_a_running_gateway_is_a_finding(monkeypatch, capsys) -> None:
    code, items = results(with_ingress(ready_cluster(), enableGatewayApi=True), monkeypatch, capsys, *RAW)
    (bad,) = findings(items)
    assert bad["check"] == "raw-ingress" and "no proxy Deployment" in bad["message"]


def test_no_ingress_at_all_is_said_and_serverless_is_not_checked_here(monkeypatch, capsys) -> None:
    code, items = results(with_ingress(ready_cluster(), disableIngressCreation=True), monkeypatch, capsys, *RAW)
    assert [r["status"] for r in raw_ingress(items)] == ["ok"] and "in-cluster" in raw_ingress(items)[0]["message"]
    code, items = results(with_ingress(ready_cluster(), ingressClassName="nginx"), monkeypatch, capsys)
    assert raw_ingress(items) == []  # Serverless: the knative-network check reads Knative's ingress class instead
