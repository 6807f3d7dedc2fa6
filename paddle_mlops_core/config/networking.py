"""Knative's networking layers: which ingress class each installs under, and where its gateway pods run.

Requests reach a Serverless predictor from the Knative activator (namespace `knative-serving`) while it buffers, and
straight from the layer's gateway pods once the activator leaves the path; the predictor NetworkPolicy must admit
both (pipelines/platform/network.py). Each layer's namespaces are those its release manifests install the gateway
into:

- Istio (net-istio release-1.15..1.21 config/203-local-gateway.yaml, config/400-config-istio.yaml): the
  `istio-ingressgateway` and `knative-local-gateway` in `istio-system`;
- Kourier (net-kourier release-1.15..1.21 config/300-gateway.yaml): `3scale-kourier-gateway` in `kourier-system`;
- Contour (net-contour release-1.15..1.21 config/contour/external.yaml and internal.yaml): the `envoy` DaemonSets
  in `contour-external` and `contour-internal`.

Knative picks the layer by `config-network`'s ingress class (knative/networking release-1.15..1.21
pkg/config/config.go `NewConfigFromMap`: the legacy key `ingress.class`, then `ingress-class`, which wins; Istio's
class when neither is set); `paddle-mlops preflight` compares it with `serving.networking_layer`.
"""

from __future__ import annotations

from typing import Literal

NetworkingLayer = Literal["istio", "kourier", "contour"]
ACTIVATOR_NAMESPACE = "knative-serving"
GATEWAY_NAMESPACES: dict[str, tuple[str, ...]] = {
    "istio": ("istio-system",),
    "kourier": ("kourier-system",),
    "contour": ("contour-external", "contour-internal"),
}
# The ingress class each layer registers (net-istio/knative networking IstioIngressClassName, net-kourier
# pkg/reconciler/ingress/config/config.go KourierIngressClassName, net-contour pkg/reconciler/contour/contour.go).
INGRESS_CLASSES: dict[str, str] = {layer: f"{layer}.ingress.networking.knative.dev" for layer in GATEWAY_NAMESPACES}
DEFAULT_INGRESS_CLASS = INGRESS_CLASSES["istio"]
CONFIG_NETWORK = "config-network"
INGRESS_CLASS_KEYS = ("ingress-class", "ingress.class")  # the first set one wins


def ingress_class(data: dict[str, str] | None) -> str:
    """The ingress class Knative uses with this `config-network` data."""
    for key in INGRESS_CLASS_KEYS:
        if (data or {}).get(key):
            return str((data or {})[key]).strip()
    return DEFAULT_INGRESS_CLASS


def layer_of(ingress: str) -> str | None:
    """The networking layer of an ingress class; None for one this table does not know."""
    return next((layer for layer, cls in INGRESS_CLASSES.items() if cls == ingress), None)
