"""Metadata every install document shares, so `kubectl get -l app.kubernetes.io/part-of=paddle-mlops`
finds the whole install set."""

from __future__ import annotations

from typing import Any

from paddle_mlops_core.contracts import PART_OF  # noqa: F401  (re-exported for the install modules)
from pipelines import k8s


def metadata(
    name: str,
    namespace: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """`metadata` with the project label; cluster-scoped kinds pass no namespace."""
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = {**PART_OF, **(labels or {})}
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def restricted_pod_security_context() -> dict[str, Any]:
    """Pod-level part of the 'restricted' profile, from the same source the workflow pods use."""
    return k8s.as_k8s(k8s.pod_security_context())


def restricted_container_security_context() -> dict[str, Any]:
    return k8s.as_k8s(k8s.container_security_context())
