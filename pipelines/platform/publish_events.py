"""Argo Events: a model published to the bucket becomes a `rollout` Workflow.

The `minio` EventSource listens to the model bucket (MinIO's ListenBucketNotification, credentials from the
store's Secret) for objects created under the store's prefix whose name ends in `/manifest.json`. The manifest
is written last (create-if-absent), so its creation means the whole version is in the store. The Sensor has one
dependency per configured task (configs/tasks/): it checks the record again (event name, bucket, the key's exact
shape: `<prefix>/<the task's model>/<version>/manifest.json` with a plain version name), and that task's
trigger submits the `rollout` WorkflowTemplate with the bucket, key and eTag and the task, so a model is judged
and served under its own task's configuration. validate (steps/validate.py) turns them into the model URI,
checks the manifest is the one announced, and drops a model it judged before. Each trigger is at-least-once like
the push trigger (retries, then a dead-letter ConfigMap).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.config.loader import load_task_configs
from paddle_mlops_core.contracts import MANIFEST_NAME, NAME_PATTERN, NOTIFICATION_RECORDS, store_bucket
from pipelines.platform import events
from pipelines.platform.meta import metadata

MODEL_STORE_SOURCE = "model-store"
MANIFEST_EVENT = "manifests"
SENSOR = "rollout-on-publish"
DEPENDENCY = "model-published"  # one per task: model-published-<task>
WORKFLOW_TEMPLATE = "rollout"
# The rollout parameter naming the task; each task's trigger sets it to its own name.
TASK_PARAMETER = "task"
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


def task_models(cfg: PipelineConfig) -> dict[str, str]:
    """Registered model by task: every configured task (configs/tasks/), and `cfg`'s own. Each task gets a
    dependency and a trigger; the store (bucket, prefix) is `cfg`'s for all of them."""
    # Every loaded configuration names its model (config/task_rules.py fill_defaults: ernie-<task> when unset).
    configs = {**load_task_configs(), cfg.task: cfg}
    return {task: c.mlflow.registered_model for task, c in configs.items() if c.mlflow.registered_model is not None}


def store_prefix(cfg: PipelineConfig) -> str:
    """The key prefix of every model's versions in the bucket: `<prefix>/` (empty at the bucket's root)."""
    _, prefix = store_bucket(cfg.storage.uri)
    return f"{prefix}/" if prefix else ""


def model_prefix(cfg: PipelineConfig, model: str | None = None) -> str:
    """The key prefix of a model's versions in the bucket (default: `cfg`'s task's): `<prefix>/<model>/`."""
    return f"{store_prefix(cfg)}{model or cfg.mlflow.registered_model}/"


def key_pattern(cfg: PipelineConfig, model: str | None = None) -> str:
    """RE2 for the key of a version's manifest, escaped or not: `<prefix>/<model>/<version>/manifest.json`."""
    parts = [events.regex_literal(p) for p in model_prefix(cfg, model).strip("/").split("/")]
    return "^" + _SLASH.join([*parts, NAME_PATTERN, events.regex_literal(MANIFEST_NAME)]) + "$"


def _endpoint(cfg: PipelineConfig) -> tuple[str, bool]:
    """(host:port, insecure) for minio-go, which takes no scheme."""
    url = urlparse(cfg.storage.endpoint_url or "https://s3.amazonaws.com")
    port = url.port or (80 if url.scheme == "http" else 443)
    return f"{url.hostname}:{port}", url.scheme == "http"


def model_store_event_source(cfg: PipelineConfig) -> dict[str, Any]:
    """MinIO bucket notifications for new manifests of any model in the store (the Sensor tells tasks apart)."""
    bucket, _ = store_bucket(cfg.storage.uri)
    endpoint, insecure = _endpoint(cfg)
    secret = cfg.storage.credentials_secret
    source = {
        "bucket": {"name": bucket},
        "endpoint": endpoint,
        "insecure": insecure,
        "region": cfg.storage.region,
        "events": list(CREATED_EVENTS),
        "filter": {"prefix": store_prefix(cfg), "suffix": f"/{MANIFEST_NAME}"},
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


def manifest_filters(cfg: PipelineConfig, model: str | None = None) -> dict[str, Any]:
    """The record again, AND-ed: an ObjectCreated event, in our bucket, for exactly a version's manifest of
    `model` (default: `cfg`'s task's)."""
    bucket, _ = store_bucket(cfg.storage.uri)
    return {
        "dataLogicalOperator": "and",
        "data": [
            {"path": f"{RECORD}.eventName", "type": "string", "value": ["^s3:ObjectCreated:"]},
            {"path": f"{RECORD}.s3.bucket.name", "type": "string", "value": [f"^{events.regex_literal(bucket)}$"]},
            {"path": f"{RECORD}.s3.object.key", "type": "string", "value": [key_pattern(cfg, model)]},
        ],
    }


def dependency(task: str) -> str:
    return f"{DEPENDENCY}-{task}"


def _task_trigger(cfg: PipelineConfig, task: str) -> dict[str, Any]:
    """Submit `rollout` for `task` with the event's bucket, key and eTag (and the task, fixed)."""
    names = tuple(name for name, _ in WORKFLOW_PARAMETERS)
    resource = events.workflow_resource(cfg, WORKFLOW_TEMPLATE, "model-published", names)
    resource["spec"]["arguments"]["parameters"].append({"name": TASK_PARAMETER, "value": task})
    dep = dependency(task)
    return events.submit_trigger(
        f"rollout-from-publish-{task}",
        dep,
        resource,
        [{"dependencyName": dep, "dataKey": key} for _, key in WORKFLOW_PARAMETERS],
        events.dlq_trigger(cfg, dep, "publish", RECORD),
    )


def sensor(cfg: PipelineConfig) -> dict[str, Any]:
    models = task_models(cfg)
    return {
        "apiVersion": events.API_VERSION,
        "kind": "Sensor",
        "metadata": metadata(SENSOR, cfg.cluster.namespace),
        "spec": {
            "eventBusName": events.EVENT_BUS,
            "template": events.pod_template(events.SENSOR_SERVICE_ACCOUNT),
            "dependencies": [
                {
                    "name": dependency(task),
                    "eventSourceName": MODEL_STORE_SOURCE,
                    "eventName": MANIFEST_EVENT,
                    "filters": manifest_filters(cfg, model),
                }
                for task, model in sorted(models.items())
            ],
            "triggers": [_task_trigger(cfg, task) for task in sorted(models)],
        },
    }


def render(cfg: PipelineConfig) -> list[dict[str, Any]]:
    return [model_store_event_source(cfg), sensor(cfg)]
