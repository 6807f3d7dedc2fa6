"""The images Argo Events gives the pods it creates, as its controller settings decide them.

EventSource and Sensor pods run the controller's `ARGO_EVENTS_IMAGE` (argo-events v1.9.11 pkg/reconciler/cmd/start.go;
eventsource/resource.go, sensor/resource.go); a JetStream EventBus's pods run the images of the controller config's
`eventBus.jetstream.versions` entry its `jetstream.version` names (pkg/reconciler/eventbus/installer/jetstream.go:
containers main, reloader, metrics). Read from the settings documents among the linted files, else upstream's own
defaults (the v1.9.11 install: the image by tag, upstream's version list).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from paddle_mlops.lint.documents import LintInputError, document_name
from pipelines.platform import events_controller as ec
from pipelines.platform.upstream_images import ARGO_EVENTS


@dataclass(frozen=True)
class EventsImages:
    image: str = ARGO_EVENTS
    # jetstream version → its controller-config entry (natsImage, metricsExporterImage, configReloaderImage)
    jetstream: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {v["version"]: v for v in ec.upstream_jetstream_versions()}
    )

    def bus_images(self, version: str) -> list[tuple[str, str]]:
        """(container, image) of a JetStream EventBus pod; an unlisted version runs nothing (the controller refuses
        the bus, which preflight reports)."""
        entry = self.jetstream.get(version) or {}
        return [
            (name, str(entry[key]))
            for name, key in (
                ("main", "natsImage"),
                ("reloader", "configReloaderImage"),
                ("metrics", "metricsExporterImage"),
            )
            if entry.get(key)
        ]


def _is(doc: dict[str, Any], kind: str, name: str) -> bool:
    return doc.get("kind") == kind and (doc.get("metadata") or {}).get("name") == name


def events_images(docs: Iterable[dict[str, Any]]) -> EventsImages:
    """The Argo Events controller settings among `docs`, over upstream's defaults."""
    base = EventsImages()
    image, jetstream = base.image, base.jetstream
    for doc in docs:
        if _is(doc, "ConfigMap", ec.CONTROLLER_CONFIGMAP):
            text = (doc.get("data") or {}).get(ec.CONTROLLER_CONFIG_KEY)
            try:
                config = yaml.safe_load(text or "null")
            except yaml.YAMLError as exc:
                raise LintInputError(
                    f"{document_name(doc)}: {ec.CONTROLLER_CONFIG_KEY} is not valid YAML ({exc})."
                ) from None
            versions = (((config or {}).get("eventBus") or {}).get("jetstream") or {}).get("versions") or []
            jetstream = {str(v.get("version")): v for v in versions if isinstance(v, dict)}
        elif _is(doc, "Deployment", ec.DEPLOYMENT):
            for container in ((doc.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []:
                for env in container.get("env") or [] if container.get("name") == ec.CONTAINER else []:
                    if env.get("name") == ec.IMAGE_ENV and env.get("value"):
                        image = str(env["value"])
    return EventsImages(image, jetstream)
