"""Preflight's checks of controller settings the install set depends on: Knative's feature flags for
the predictors' nodeSelector and tolerations, and the Argo Events controller's accepted JetStream
versions (plus the state of the install set's EventBus)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from paddle_mlops.cluster_requirements import Requirements
from paddle_mlops.preflight.cluster import KubernetesApi
from paddle_mlops.preflight.controllers import controller_namespace
from paddle_mlops.preflight.results import FINDING, OK, Result, install_fix
from paddle_mlops.versions import MATRIX


def check_knative_features(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    """Serverless predictors set nodeSelector and tolerations, which Knative lets through only when
    their config-features flags are not `disabled` (knative/serving pkg/apis/serving/fieldmask.go)."""
    from pipelines.platform import knative

    if "knative-serving" not in req.components:
        return
    subject = f"{knative.FEATURES_NAMESPACE}/{knative.FEATURES_CONFIGMAP}"
    data = api.config_map_data(knative.FEATURES_CONFIGMAP, knative.FEATURES_NAMESPACE) or {}
    # features.go: a missing key is the default, `disabled`; Allowed and Enabled both pass the mask.
    off = sorted(flag for flag in knative.feature_flags() if str(data.get(flag, "disabled")).lower() == "disabled")
    if off:
        message = f"{', '.join(off)} disabled: Knative refuses the regional predictors (nodeSelector, tolerations)"
        yield Result("knative-features", subject, FINDING, message, "kubectl apply -f argo/knative.yaml")
    else:
        yield Result("knative-features", subject, OK, "nodeSelector and tolerations are allowed on predictors")


def check_event_bus(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    from pipelines.platform import events

    if req.event_bus_version is None:
        return
    namespace = controller_namespace(api.deployments(), "argo-events") or "argo-events"
    subject = f"{namespace}/{events.CONTROLLER_CONFIGMAP}"
    data = api.config_map_data(events.CONTROLLER_CONFIGMAP, namespace)
    if data is None:
        yield Result("eventbus", subject, FINDING, "controller config not found", install_fix("argo-events"))
        return
    listed = jetstream_versions(data)
    if req.event_bus_version in listed:
        yield Result("eventbus", subject, OK, f"jetstream version {req.event_bus_version} is listed")
    else:
        yield Result(
            "eventbus",
            subject,
            FINDING,
            f"jetstream version {req.event_bus_version} is not listed (it has: {', '.join(listed) or 'none'}); "
            "the controller refuses the EventBus",
            f"upgrade Argo Events to {MATRIX['argo-events'].minimum} or newer: {install_fix('argo-events')}",
        )
    if req.event_bus:
        yield from _event_bus_status(api, *req.event_bus)


def _event_bus_status(api: KubernetesApi, name: str, namespace: str, file: str) -> Iterator[Result]:
    """An applied EventBus whose controller said Deployed=False (argo-events eventbus_types.go MarkDeployFailed)."""
    bus: dict[str, Any] = api.event_bus(name, namespace) or {}
    conditions = (bus.get("status") or {}).get("conditions") or []
    failed = next((c for c in conditions if c.get("type") == "Deployed" and c.get("status") == "False"), None)
    if failed:
        yield Result(
            "eventbus",
            f"{namespace}/{name}",
            FINDING,
            f"not deployed: {failed.get('reason', '')} {failed.get('message', '')}".strip(),
            f"kubectl -n {namespace} describe eventbus {name}; after fixing the cause, kubectl apply -f argo/{file}",
        )


def jetstream_versions(data: dict[str, str]) -> list[str]:
    """`eventBus.jetstream.versions[].version` of the file viper finds as /etc/argo-events/controller-config.*
    (argo-events pkg/reconciler/config.go LoadConfig; install.yaml ships key controller-config.yaml)."""
    keys = ("controller-config.json", "controller-config.yaml", "controller-config.yml", "controller-config")
    key = next((k for k in keys if k in data), None)
    parsed = yaml.safe_load(data[key]) if key else None
    jetstream = ((parsed or {}).get("eventBus") or {}).get("jetstream") or {} if isinstance(parsed, dict) else {}
    return [str(v.get("version")) for v in jetstream.get("versions") or [] if isinstance(v, dict)]
