"""Preflight's checks of controller settings the install set depends on: Knative's feature flags for
the predictors' nodeSelector and tolerations, its networking layer (config-network's ingress class), Kueue's
enabled integrations (and MultiKueue dispatcher), and the Argo Events controller's accepted JetStream versions
(plus the state of the install set's EventBus)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from paddle_mlops.cluster_requirements import Requirements
from paddle_mlops.preflight.cluster import KubernetesApi
from paddle_mlops.preflight.controllers import controller_namespace
from paddle_mlops.preflight.results import FINDING, OK, Result, install_fix
from paddle_mlops.preflight.settings_applied import settings_document
from paddle_mlops_core.config import networking
from paddle_mlops_core.versions import MATRIX
from pipelines.platform.controller_settings import apply_command


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
        yield Result("knative-features", subject, FINDING, message, apply_command(req.settings_dir))
    else:
        yield Result("knative-features", subject, OK, "nodeSelector and tolerations are allowed on predictors")


def check_knative_network(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    """The networking layer Knative routes through (config-network's ingress class) must be the one the predictor
    NetworkPolicy admits the gateway pods of (serving.networking_layer, or serving.gateway_namespaces)."""
    from pipelines.platform import knative

    if "knative-serving" not in req.components:
        return
    subject = f"{knative.FEATURES_NAMESPACE}/{networking.CONFIG_NETWORK}"
    ingress = networking.ingress_class(api.config_map_data(networking.CONFIG_NETWORK, knative.FEATURES_NAMESPACE))
    layer = networking.layer_of(ingress)
    admitted = req.gateway_namespaces or networking.GATEWAY_NAMESPACES[req.networking_layer]
    if layer == req.networking_layer or (layer is None and req.gateway_namespaces):
        yield Result("knative-network", subject, OK, f"ingress class {ingress}; gateways from {', '.join(admitted)}")
        return
    if layer is None:
        fix = "set serving.gateway_namespaces to the namespaces its gateway pods run in, then paddle-mlops compile"
    else:
        fix = f"set serving.networking_layer: {layer} (gateways in {', '.join(networking.GATEWAY_NAMESPACES[layer])})"
        fix += ", then paddle-mlops compile and kubectl apply -f argo/network-policies.yaml"
    message = (
        f"Knative routes through ingress class {ingress}, but the predictor NetworkPolicy admits gateway traffic from "
        f"{', '.join(admitted)} ({req.networking_layer}): requests are dropped once the activator leaves the path"
    )
    yield Result("knative-network", subject, FINDING, message, fix)


def check_kueue_config(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    """Kueue admits only the kinds its `integrations.frameworks` enable (Go default: batch/job alone), and a
    MultiKueue manager places runs in region order only with the Incremental dispatcher, one cluster a round."""
    from pipelines.platform import kueue_config as kc

    if not req.kueue_frameworks:
        return
    namespace = controller_namespace(api.deployments(), "kueue") or kc.NAMESPACE
    subject = f"{namespace}/{kc.CONFIGMAP}"
    restart = f"kubectl -n {namespace} rollout restart deployment/{kc.DEPLOYMENT}"
    data = api.config_map_data(kc.CONFIGMAP, namespace)
    config = kc.parse(data)
    enabled = kc.frameworks(config)
    missing = [f for f in req.kueue_frameworks if f not in enabled]
    if missing:
        where = "no such ConfigMap" if data is None else f"integrations.frameworks is [{', '.join(enabled)}]"
        yield Result(
            "kueue-config",
            subject,
            FINDING,
            f"{where}: Kueue does not manage {', '.join(missing)}, so TrainJobs would never be admitted",
            f"add `- {missing[0]}` under integrations.frameworks in key {kc.CONFIGMAP_KEY} "
            f"(kubectl -n {namespace} edit configmap {kc.CONFIGMAP}), then {restart}",
        )
    else:
        yield Result("kueue-config", subject, OK, f"integrations.frameworks enables {', '.join(req.kueue_frameworks)}")
    if req.multikueue:
        name, step = kc.dispatcher(config)
        if name != kc.DISPATCHER_INCREMENTAL or step != 1:
            yield Result(
                "kueue-config",
                subject,
                FINDING,
                f"multiKueue dispatcher {name} (step {step}) sends each run to several worker clusters at once, so "
                "the first to admit wins instead of the team's region order",
                f"set multiKueue.dispatcherName: {kc.DISPATCHER_INCREMENTAL} and "
                f"multiKueue.incrementalDispatcherConfig.stepSize: 1 in key {kc.CONFIGMAP_KEY}, then {restart}",
            )
        else:
            yield Result("kueue-config", subject, OK, "MultiKueue dispatches to one worker cluster at a time")


def check_event_bus(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    from pipelines.platform import events_controller

    if req.event_bus_version is None:
        return
    namespace = controller_namespace(api.deployments(), "argo-events") or "argo-events"
    subject = f"{namespace}/{events_controller.CONTROLLER_CONFIGMAP}"
    data = api.config_map_data(events_controller.CONTROLLER_CONFIGMAP, namespace)
    if data is None:
        yield Result("eventbus", subject, FINDING, "controller config not found", install_fix("argo-events"))
        return
    listed = jetstream_versions(data)
    ours = settings_document(req, "ConfigMap", events_controller.CONTROLLER_CONFIGMAP)
    want = _entry(ours or {}, req.event_bus_version)
    if req.event_bus_version in listed and want is not None and _entry({"data": data}, req.event_bus_version) != want:
        yield Result(
            "eventbus",
            subject,
            FINDING,
            f"jetstream version {req.event_bus_version} names other images than {req.settings_dir} (by digest in a "
            "release): the EventBus pods would run them",
            apply_command(req.settings_dir),
        )
    elif req.event_bus_version in listed:
        yield Result("eventbus", subject, OK, f"jetstream version {req.event_bus_version} is listed")
    else:
        yield Result(
            "eventbus",
            subject,
            FINDING,
            f"jetstream version {req.event_bus_version} is not listed (it has: {', '.join(listed) or 'none'}); "
            "the controller refuses the EventBus",
            f"{apply_command(req.settings_dir)} (the install's controller settings list it; Argo Events "
            f"{MATRIX['argo-events'].minimum} or newer)",
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


def _entry(configmap: dict[str, Any], version: str) -> dict[str, Any] | None:
    from pipelines.platform import events_controller

    text = (configmap.get("data") or {}).get(events_controller.CONTROLLER_CONFIG_KEY)
    return events_controller.jetstream_entry(yaml.safe_load(text or "null"), version)


def jetstream_versions(data: dict[str, str]) -> list[str]:
    """`eventBus.jetstream.versions[].version` of the file viper finds as /etc/argo-events/controller-config.*
    (argo-events pkg/reconciler/config.go LoadConfig; install.yaml ships key controller-config.yaml)."""
    keys = ("controller-config.json", "controller-config.yaml", "controller-config.yml", "controller-config")
    key = next((k for k in keys if k in data), None)
    parsed = yaml.safe_load(data[key]) if key else None
    jetstream = ((parsed or {}).get("eventBus") or {}).get("jetstream") or {} if isinstance(parsed, dict) else {}
    return [str(v.get("version")) for v in jetstream.get("versions") or [] if isinstance(v, dict)]
