"""The bucket notification a local publish makes, delivered to the generated `rollout-on-publish` Sensor.

On the cluster MinIO notifies Argo Events when a `manifest.json` is created and the Sensor submits `rollout`.
Locally nothing listens to the store, so whoever published (the run's upload step, `paddle-mlops publish`)
makes the same record (steps/runtime/storage/objectstore/notifications.py) from the manifest it just wrote and hands
it to the same Sensor document (paddle_mlops/local/sensor.py): the Workflow parameters that come back start
the local `rollout`. A record the Sensor filters out starts nothing, as on the cluster.
"""

from __future__ import annotations

import os
from typing import Any

from paddle_mlops.local import sensor
from paddle_mlops_core.config import PipelineConfig
from pipelines.platform import publish_events
from steps.runtime.storage.objectstore import fetching, manifest, notifications


def endpoint_url(cfg: PipelineConfig) -> str | None:
    return os.environ.get("S3_ENDPOINT_URL") or cfg.storage.endpoint_url


def notification(cfg: PipelineConfig, model_uri: str) -> dict[str, Any]:
    """The event data for the creation of `model_uri`'s manifest, as the minio EventSource dispatches it."""
    tagged = fetching.read_manifest_tagged(model_uri, endpoint_url(cfg))
    if tagged is None:
        raise FileNotFoundError(f"{model_uri} has no {manifest.MANIFEST}: nothing was published, nothing to notify")
    body, etag = tagged
    root, model, version = manifest.split_model_uri(model_uri)
    key = notifications.manifest_object_key(root, model, version)
    return notifications.event_data(notifications.created_record(root, key, body, etag))


def rollout_parameters(cfg: PipelineConfig, data: dict[str, Any]) -> dict[str, str] | None:
    """The `rollout` Workflow parameters the Sensor sets for this event, or None when its filters drop it."""
    created = sensor.fire(
        publish_events.sensor(cfg), publish_events.MODEL_STORE_SOURCE, data, publish_events.MANIFEST_EVENT
    )
    return sensor.workflow_parameters(created[0]) if created else None


def after_upload(cfg: PipelineConfig, outputs: dict[str, dict[str, str]]) -> dict[str, str] | None:
    """For the local run: the rollout the upload step's publish starts, None when nothing was published."""
    model_uri = (outputs.get("upload") or {}).get("model-uri")
    if not model_uri:
        return None
    return rollout_parameters(cfg, notification(cfg, model_uri))
