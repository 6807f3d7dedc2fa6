"""The Argo Events controller settings the install set needs: the images of the pods it creates, pinned.

Argo Events gives EventSource and Sensor pods the image in its controller's `ARGO_EVENTS_IMAGE` environment variable
(argo-events v1.9.11 pkg/reconciler/cmd/start.go; eventsource/resource.go and sensor/resource.go use it as is), and a
JetStream EventBus the images of the entry of `eventBus.jetstream.versions` whose `version` equals the bus's
`spec.jetstream.version` (pkg/reconciler/config.go GetJetStreamVersion; installer/jetstream.go). Neither is a field of
the EventBus/EventSource/Sensor, so pinning them by digest means setting both: this module writes

- the controller's ConfigMap (`argo-events-controller-config`, key `controller-config.yaml`): upstream v1.9.11's own
  content (viper reads the one file, pkg/reconciler/config.go LoadConfig, and ValidateConfig wants a jetstream and a
  stan version), plus the entry `PINNED_JETSTREAM_VERSION`, which our EventBus names;
- the `ARGO_EVENTS_IMAGE` variable of the controller Deployment, as a patch of that one list entry (containers and
  env merge by `name` in a strategic merge patch).

Both are patched into the live objects (controller_settings.py says how and why). The key is one YAML document, so
whoever writes it last decides all of it: an Argo Events upgrade writes upstream's back, and `paddle-mlops preflight`
then reports the missing version (paddle_mlops/preflight/controller_settings.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import yaml

from pipelines.platform.meta import metadata
from pipelines.platform.upstream_images import ARGO_EVENTS, NATS, NATS_EXPORTER, NATS_RELOADER, NATS_VERSION, pinned

NAMESPACE = "argo-events"
CONTROLLER_CONFIGMAP = "argo-events-controller-config"
CONTROLLER_CONFIG_KEY = "controller-config.yaml"
DEPLOYMENT = "controller-manager"
CONTAINER = "controller-manager"
IMAGE_ENV = "ARGO_EVENTS_IMAGE"
# Marks a patch that sets a few fields of an upstream object (not a whole object: lint and the schema check read it as
# such); the annotation lands on the live object too, naming what we set there.
PARTIAL = "paddle-mlops/patched"
PARTIAL_WHY = (
    "env ARGO_EVENTS_IMAGE of container controller-manager and the pod template's controller-config digest "
    "(paddle-mlops argo/controller-settings/)"
)
CONFIG_DIGEST = "paddle-mlops/controller-config-digest"
# The version our EventBus names: upstream's 2.10.29 entry under a name of our own, whose images a release pins.
PINNED_JETSTREAM_VERSION = f"paddle-mlops-{NATS_VERSION}"

# Upstream v1.9.11's defaults (manifests/base/controller-manager/controller-config.yaml), kept as shipped.
_STAN_VERSIONS = [
    {
        "version": "0.22.1",
        "natsStreamingImage": "nats-streaming:0.22.1",
        "metricsExporterImage": "natsio/prometheus-nats-exporter:0.8.0",
    }
]
_JETSTREAM_SETTINGS = "max_memory_store: -1\nmax_file_store: 1TB\n"
_STREAM_CONFIG = "maxMsgs: 50000\nmaxAge: 168h\nmaxBytes: -1\nreplicas: 3\nduplicates: 300s\nretention: 0\ndiscard: 0\n"
_OLD_EXPORTER, _OLD_RELOADER = "natsio/prometheus-nats-exporter:0.9.1", "natsio/nats-server-config-reloader:0.7.0"


def _version(name: str, nats: str, exporter: str, reloader: str, start: str = "/nats-server") -> dict[str, str]:
    return {
        "version": name,
        "natsImage": nats,
        "metricsExporterImage": exporter,
        "configReloaderImage": reloader,
        "startCommand": start,
    }


def upstream_jetstream_versions() -> list[dict[str, str]]:
    """The JetStream versions Argo Events v1.9.11 lists, so that other EventBuses of the cluster keep theirs."""
    old = [
        _version(
            v, f"nats:{v}", _OLD_EXPORTER, _OLD_RELOADER, "nats-server" if v.endswith("alpine") else "/nats-server"
        )
        for v in ("2.8.1", "2.8.1-alpine", "2.8.2", "2.8.2-alpine", "2.9.1", "2.9.12", "2.9.16")
    ]
    current = [_version(v, NATS, NATS_EXPORTER, NATS_RELOADER) for v in ("latest", NATS_VERSION)]
    return [current[0], *old, current[1]]


def pinned_jetstream_version(pins: Mapping[str, str] | None = None) -> dict[str, str]:
    """Our entry: the images of upstream's 2.10.29, each pinned by `pins` (an overlay's repository → digest)."""
    pins = pins or {}
    return _version(
        PINNED_JETSTREAM_VERSION, pinned(NATS, pins), pinned(NATS_EXPORTER, pins), pinned(NATS_RELOADER, pins)
    )


def controller_config(pins: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The parsed `controller-config.yaml`: upstream's, plus our pinned JetStream version."""
    return {
        "eventBus": {
            "nats": {"versions": _STAN_VERSIONS},
            "jetstream": {
                "settings": _JETSTREAM_SETTINGS,
                "streamConfig": _STREAM_CONFIG,
                "versions": [*upstream_jetstream_versions(), pinned_jetstream_version(pins)],
            },
        }
    }


def controller_configmap(pins: Mapping[str, str] | None = None) -> dict[str, Any]:
    text = yaml.safe_dump(controller_config(pins), sort_keys=False, default_flow_style=False, width=120)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(CONTROLLER_CONFIGMAP, NAMESPACE),
        "data": {CONTROLLER_CONFIG_KEY: text},
    }


def config_digest(pins: Mapping[str, str] | None = None) -> str:
    """A digest of the controller config we write (its text, as controller_configmap renders it)."""
    text = controller_configmap(pins)["data"][CONTROLLER_CONFIG_KEY]
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def controller_image_env(pins: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The controller Deployment's `ARGO_EVENTS_IMAGE`, as a patch: only the fields it sets (a strategic merge patch
    merges containers and env by `name`; the API server validates the merged object)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE, "annotations": {PARTIAL: PARTIAL_WHY}},
        "spec": {
            "template": {
                # The controller reloads its config file in memory only (pkg/reconciler/config.go LoadConfig
                # OnConfigChange), and re-renders an EventBus only on its own generation or label change
                # (cmd/start.go predicates): a release that changes only the NATS digests would never reach the bus.
                # The config's digest in the pod template restarts the controller, which reconciles every bus anew.
                "metadata": {"annotations": {CONFIG_DIGEST: config_digest(pins)}},
                "spec": {
                    "containers": [
                        {"name": CONTAINER, "env": [{"name": IMAGE_ENV, "value": pinned(ARGO_EVENTS, pins or {})}]}
                    ]
                },
            }
        },
    }


def jetstream_entry(config: Any, version: str) -> dict[str, Any] | None:
    """The `eventBus.jetstream.versions` entry named `version` in a parsed controller config, None when absent."""
    jetstream = ((config or {}).get("eventBus") or {}).get("jetstream") or {} if isinstance(config, dict) else {}
    return next(
        (v for v in jetstream.get("versions") or [] if isinstance(v, dict) and str(v.get("version")) == version), None
    )
