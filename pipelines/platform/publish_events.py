"""Argo Events: a model published to the bucket becomes a `rollout` Workflow.

The `minio` EventSource listens to the model bucket (MinIO's ListenBucketNotification, credentials from the
store's Secret) for objects created under `<prefix>/<model>/` whose name ends in `/manifest.json`. The manifest
is written last (create-if-absent), so its creation means the whole version is in the store. The Sensor checks
the record again (event name, bucket, the key's exact shape: three segments under the prefix, a plain version
name) and submits the `rollout` WorkflowTemplate with the bucket, key and eTag; validate (steps/validate.py)
turns them into the model URI, checks the manifest is the one announced, and drops a model it judged before.
The trigger is at-least-once like the push trigger (retries, then a dead-letter ConfigMap).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from paddle_mlops.config import PipelineConfig
from paddle_mlops.contracts import MANIFEST_NAME, NAME_PATTERN, NOTIFICATION_RECORDS, store_bucket
from pipelines.platform import events
from pipelines.platform.meta import metadata

MODEL_STORE_SOURCE = "model-store"
MANIFEST_EVENT = "manifests"
SENSOR = "rollout-on-publish"
DEPENDENCY = "model-published"
WORKFLOW_TEMPLATE = "rollout"
# MinIO's event names for a finished upload (a single PUT, a multipart completion, a copy): all ObjectCreated.
CREATED_EVENTS = ("s3:ObjectCreated:*",)
# The rollout template's parameters the trigger sets, in order, and where each comes from in the event data.
# The minio EventSource dispatches the notification's records as `notification` (see RECORD).
RECORD = f"{NOTIFICATION_RECORDS}.0"
WORKFLOW_PARAMETERS: tuple[tuple[str, str], ...] = (
    ("event-bucket", f"{RECORD}.s3.bucket.name"),
    ("event-key", f"{RECORD}.s3.object.key"),
    ("event-etag", f"{RECORD}.s3.object.eTag"),
)
# MinIO URL-escapes the key in a record: a `/` may arrive as `%2F`.
_SLASH = "(/|%2F)"


def model_prefix(cfg: PipelineConfig) -> str:
    """The key prefix of this pipeline's model versions in its bucket: `<prefix>/<model>/`."""
    _, prefix = store_bucket(cfg.storage.uri)
    return "/".join(p for p in (prefix, cfg.mlflow.registered_model) if p) + "/"


def key_pattern(cfg: PipelineConfig) -> str:
    """RE2 for the key of a version's manifest, escaped or not: `<prefix>/<model>/<version>/manifest.json`."""
    parts = [events.regex_literal(p) for p in model_prefix(cfg).strip("/").split("/")]
    return "^" + _SLASH.join([*parts, NAME_PATTERN, events.regex_literal(MANIFEST_NAME)]) + "$"


def _endpoint(cfg: PipelineConfig) -> tuple[str, bool]:
    """(host:port, insecure) for minio-go, which takes no scheme."""
    url = urlparse(cfg.storage.endpoint_url or "https://s3.amazonaws.com")
    port = url.port or (80 if url.scheme == "http" else 443)
    return f"{url.hostname}:{port}", url.scheme == "http"


def model_store_event_source(cfg: PipelineConfig) -> dict[str, Any]:
    """MinIO bucket notifications for new manifests of this pipeline's model."""
    bucket, _ = store_bucket(cfg.storage.uri)
    endpoint, insecure = _endpoint(cfg)
    secret = cfg.storage.credentials_secret
    source = {
        "bucket": {"name": bucket},
        "endpoint": endpoint,
        "insecure": insecure,
        "region": cfg.storage.region,
        "events": list(CREATED_EVENTS),
        "filter": {"prefix": model_prefix(cfg), "suffix": f"/{MANIFEST_NAME}"},
        "accessKey": {"name": secret, "key": "AWS_ACCESS_KEY_ID"},
        "secretKey": {"name": secret, "key": "AWS_SECRET_ACCESS_KEY"},
    }
    return {
        "apiVersion": events.API_VERSION,
        "kind": "EventSource",
        "metadata": metadata(MODEL_STORE_SOURCE, cfg.cluster.namespace),
        "spec": {
            "eventBusName": events.EVENT_BUS,
            "template": events.pod_template(events.EVENTSOURCE_SERVICE_ACCOUNT),
            "minio": {MANIFEST_EVENT: source},
        },
    }


def manifest_filters(cfg: PipelineConfig) -> dict[str, Any]:
    """The record again, AND-ed: an ObjectCreated event, in our bucket, for exactly a version's manifest."""
    bucket, _ = store_bucket(cfg.storage.uri)
    return {
        "dataLogicalOperator": "and",
        "data": [
            {"path": f"{RECORD}.eventName", "type": "string", "value": ["^s3:ObjectCreated:"]},
            {"path": f"{RECORD}.s3.bucket.name", "type": "string", "value": [f"^{events.regex_literal(bucket)}$"]},
            {"path": f"{RECORD}.s3.object.key", "type": "string", "value": [key_pattern(cfg)]},
        ],
    }


def sensor(cfg: PipelineConfig) -> dict[str, Any]:
    names = tuple(name for name, _ in WORKFLOW_PARAMETERS)
    trigger = events.submit_trigger(
        "rollout-from-publish",
        DEPENDENCY,
        events.workflow_resource(cfg, WORKFLOW_TEMPLATE, "model-published", names),
        [{"dependencyName": DEPENDENCY, "dataKey": key} for _, key in WORKFLOW_PARAMETERS],
        events.dlq_trigger(cfg, DEPENDENCY, "publish", RECORD),
    )
    return {
        "apiVersion": events.API_VERSION,
        "kind": "Sensor",
        "metadata": metadata(SENSOR, cfg.cluster.namespace),
        "spec": {
            "eventBusName": events.EVENT_BUS,
            "template": events.pod_template(events.SENSOR_SERVICE_ACCOUNT),
            "dependencies": [
                {
                    "name": DEPENDENCY,
                    "eventSourceName": MODEL_STORE_SOURCE,
                    "eventName": MANIFEST_EVENT,
                    "filters": manifest_filters(cfg),
                }
            ],
            "triggers": [trigger],
        },
    }


def render(cfg: PipelineConfig) -> list[dict[str, Any]]:
    return [model_store_event_source(cfg), sensor(cfg)]
