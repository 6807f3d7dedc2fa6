"""Preflight's check of the cosign public key Kyverno verifies our images with (`kyverno/paddle-mlops-cosign`,
key `cosign.pub`). The install set does not ship it (a re-applied placeholder would replace the real key); without it,
or with something that is not a PEM public key, the policy's verify-signature rule errors on every image from our
registry and, failing closed, refuses every project pod (kyverno pkg/webhooks/resource/handlers.go Mutate, image
verification; pkg/utils/engine/response.go BlockRequest)."""

from __future__ import annotations

from collections.abc import Iterator

from paddle_mlops.cluster_requirements import Requirements
from paddle_mlops.preflight.cluster import KubernetesApi
from paddle_mlops.preflight.results import FINDING, OK, Result
from pipelines.platform import kyverno

CHECK = "cosign-key"


def check_cosign_key(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    if "kyverno" not in req.components:
        return
    subject = f"{kyverno.KEY_NAMESPACE}/{kyverno.KEY_CONFIGMAP}"
    data = api.config_map_data(kyverno.KEY_CONFIGMAP, kyverno.KEY_NAMESPACE)
    key = (data or {}).get(kyverno.KEY_FIELD, "")
    if data is None:
        problem = "not found"
    elif "-----BEGIN PUBLIC KEY-----" not in key or "-----END PUBLIC KEY-----" not in key:
        problem = f"key {kyverno.KEY_FIELD} holds no PEM public key"
    else:
        yield Result(CHECK, subject, OK, f"{kyverno.KEY_FIELD} holds a public key")
        return
    message = f"{problem}: Kyverno cannot verify any image from the project registry and refuses every project pod"
    yield Result(CHECK, subject, FINDING, message, f"{kyverno.KEY_COMMAND} (the signer's public key)")
