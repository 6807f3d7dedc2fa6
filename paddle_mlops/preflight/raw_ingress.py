"""Preflight's check of where a RawDeployment predictor's traffic comes from, against the namespaces the predictor
NetworkPolicy admits (serving.gateway_namespaces, else the networking layer's own; pipelines/platform/network.py).

In RawDeployment mode Knative is not in the path: KServe routes through what its `inferenceservice-config` key
`ingress` says (kserve v0.15..v0.20 pkg/apis/serving/v1beta1/configmap.go IngressConfig):

- `enableGatewayApi: true`: an HTTPRoute per InferenceService whose parentRef is `kserveIngressGateway`
  ("namespace/name", reconcilers/ingress/httproute_reconciler.go). The requests come from that Gateway's proxy pods:
  the Deployment labelled `gateway.networking.k8s.io/gateway-name: <name>` in the Gateway's namespace (Gateway API
  GEP-1762, in-cluster deployments; Istio's gateway controller), or labelled
  `gateway.envoyproxy.io/owning-gateway-name`/`-namespace` in Envoy Gateway's own namespace (envoyproxy/gateway
  internal/infrastructure/kubernetes/proxy: the data plane runs where the controller runs);
- otherwise, unless `disableIngressCreation`, a networking.k8s.io Ingress of class `ingressClassName`
  (reconcilers/ingress/kube_ingress_reconciler.go): the class's controller pods send the requests (`INGRESS_CLASSES`);
- `disableIngressCreation: true`: no ingress at all; only callers inside the cluster reach the predictors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import yaml

from paddle_mlops.cluster_requirements import Requirements
from paddle_mlops.preflight.cluster import KubernetesApi
from paddle_mlops.preflight.controllers import controller_namespace
from paddle_mlops.preflight.results import FINDING, OK, Result
from paddle_mlops_core.config.networking import GATEWAY_NAMESPACES

CHECK = "raw-ingress"
KSERVE_CONFIGMAP = "inferenceservice-config"
INGRESS_KEY = "ingress"
GEP_1762_LABEL = "gateway.networking.k8s.io/gateway-name"
ENVOY_GATEWAY_LABELS = ("gateway.envoyproxy.io/owning-gateway-name", "gateway.envoyproxy.io/owning-gateway-namespace")
# Ingress classes whose controller pods live in a fixed namespace of their release manifests: Istio serves class
# `istio` from its ingress gateway (meshConfig ingressService istio-ingressgateway, istio-system), ingress-nginx from
# its controller in `ingress-nginx` (deploy/static/provider/cloud/deploy.yaml).
INGRESS_CLASSES: dict[str, tuple[str, ...]] = {"istio": ("istio-system",), "nginx": ("ingress-nginx",)}


def ingress_config(data: dict[str, str] | None) -> dict[str, Any]:
    """The parsed `ingress` key (JSON; YAML reads it too), {} when absent or broken."""
    text = (data or {}).get(INGRESS_KEY)
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError:
            return {}
    return parsed if isinstance(parsed, dict) else {}


def gateway_proxy_namespaces(deployments: list[Any], gateway: str) -> list[str]:
    """Where the proxies of Gateway `namespace/name` run, found by the labels their controllers put on them."""
    namespace, _, name = gateway.partition("/")
    found = set()
    for deployment in deployments:
        labels = deployment.metadata.labels or {}
        if labels.get(GEP_1762_LABEL) == name and deployment.metadata.namespace == namespace:
            found.add(deployment.metadata.namespace)
        elif (labels.get(ENVOY_GATEWAY_LABELS[0]), labels.get(ENVOY_GATEWAY_LABELS[1])) == (name, namespace):
            found.add(deployment.metadata.namespace)
    return sorted(found)


def check_raw_ingress(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    if req.deployment_mode != "RawDeployment" or "kserve" not in req.components:
        return
    namespace = controller_namespace(api.deployments(), "kserve") or "kserve"
    subject = f"{namespace}/{KSERVE_CONFIGMAP}"
    config = ingress_config(api.config_map_data(KSERVE_CONFIGMAP, namespace))
    admitted = set(req.gateway_namespaces or GATEWAY_NAMESPACES[req.networking_layer])
    by_hand = (
        "set serving.gateway_namespaces to {}, then paddle-mlops compile and kubectl apply -f "
        "argo/network-policies.yaml"
    )
    if config.get("disableIngressCreation"):
        yield Result(CHECK, subject, OK, "disableIngressCreation: no ingress; only in-cluster callers reach predictors")
        return
    if config.get("enableGatewayApi"):
        gateway = str(config.get("kserveIngressGateway") or "kserve/kserve-ingress-gateway")
        source = f"Gateway {gateway}"
        sending = gateway_proxy_namespaces(api.deployments(), gateway)
        if not sending:
            message = (
                f"enableGatewayApi, but no proxy Deployment of {source} is running (GEP-1762 or Envoy Gateway labels)"
            )
            fix = f"create the Gateway {gateway} for your Gateway API implementation, or " + by_hand.format(
                "the namespace its proxy pods run in"
            )
            yield Result(CHECK, subject, FINDING, message, fix)
            return
    else:
        cls = config.get("ingressClassName")
        source = f"ingress class {cls or '(cluster default)'}"
        known = INGRESS_CLASSES.get(str(cls)) if cls else None
        if known is None:
            if req.gateway_namespaces:
                yield Result(
                    CHECK,
                    subject,
                    OK,
                    f"{source}; its controller's namespaces set by hand: {', '.join(sorted(admitted))}",
                )
            else:
                message = (
                    f"{source}: where its controller pods run is unknown; the predictor NetworkPolicy is unchecked"
                )
                yield Result(
                    CHECK, subject, FINDING, message, by_hand.format("the namespaces of that ingress controller")
                )
            return
        sending = list(known)
    missing = sorted(set(sending) - admitted)
    if missing:
        message = (
            f"predictor traffic enters through {source} from {', '.join(sending)}, but the predictor NetworkPolicy "
            f"admits only {', '.join(sorted(admitted))}: every request is dropped"
        )
        yield Result(
            CHECK, subject, FINDING, message, by_hand.format(f"[{', '.join(sorted(admitted | set(sending)))}]")
        )
    else:
        yield Result(CHECK, subject, OK, f"{source} from {', '.join(sending)}, admitted by the predictor NetworkPolicy")
