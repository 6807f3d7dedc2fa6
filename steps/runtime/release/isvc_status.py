"""Reading an InferenceService's status: Ready, the predictor's revisions and traffic, the canary URL,
and what in a spec makes a new revision.
"""

from __future__ import annotations

from typing import Any


def is_ready(obj: dict[str, Any]) -> bool:
    """The aggregated Ready condition (PredictorReady and IngressReady, inference_service_status.go).

    It may describe the spec before the last update: callers pair it with a freshness check
    (`KServeRollout._fresh`), because `status.observedGeneration` is the Knative Service's or the
    Deployment's generation, copied over by KServe, never the InferenceService's own.
    """
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def predictor_status(obj: dict[str, Any] | None) -> dict[str, Any]:
    """`status.components.predictor`: revisions and traffic (Serverless mode only)."""
    return (((obj or {}).get("status") or {}).get("components") or {}).get("predictor") or {}


def traffic_percent(obj: dict[str, Any], revision: str) -> int:
    """The share of live traffic a revision gets, summed over its traffic targets."""
    return sum(
        int(t.get("percent") or 0)
        for t in predictor_status(obj).get("traffic") or []
        if t.get("revisionName") == revision
    )


def canary_url(obj: dict[str, Any]) -> str:
    """The URL of the newest revision: its `latest` tag route (tag routing), else the service URL."""
    status = obj.get("status") or {}
    predictor = predictor_status(obj)
    for target in predictor.get("traffic") or []:
        if target.get("tag") == "latest" and target.get("url"):
            return str(target["url"])
    return str(status.get("url") or predictor.get("url") or "")


def identity(obj: dict[str, Any]) -> tuple[Any, ...]:
    """What makes a new revision (labels, model URI, image, args), compared instead of whole specs:
    KServe's defaulting webhook adds fields, and an unchanged pod template creates no revision."""
    meta = obj.get("metadata") or {}
    container = ((obj.get("spec") or {}).get("predictor") or {}).get("containers", [{}])[0]
    uri = (meta.get("annotations") or {}).get("paddle-mlops/model-uri")
    return meta.get("labels"), uri, container.get("image"), container.get("args")


def canary_percent(spec: dict[str, Any]) -> int:
    return int((spec.get("predictor") or {}).get("canaryTrafficPercent") or 0)
