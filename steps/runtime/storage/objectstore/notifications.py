"""Bucket notifications for published models: the record a publish produces, and the model a record names.

A version is published when its `manifest.json` is created (it is written last, create-if-absent), so an
`s3:ObjectCreated:*` notification for `<prefix>/<model>/<version>/manifest.json` means the whole model is in
the store. On the cluster MinIO sends the record (Argo Events' minio EventSource passes it on as the event
data); a local run or `paddle-mlops publish` makes the same record itself. A local directory store is the
bucket `LOCAL_BUCKET` with no prefix.

MinIO URL-escapes the object key in a record (`/` as `%2F`); `model_uri_for` unescapes it.
"""

from __future__ import annotations

import hashlib
import re
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote

from paddle_mlops_core.contracts import LOCAL_BUCKET, NAME_PATTERN, NOTIFICATION_RECORDS, store_bucket
from steps.runtime.runner import StepError
from steps.runtime.storage.objectstore.manifest import MANIFEST

__all__ = [
    "LOCAL_BUCKET",
    "check_name",
    "created_record",
    "event_data",
    "manifest_object_key",
    "model_uri_for",
    "store_bucket",
]

EVENT_NAME = "s3:ObjectCreated:Put"
_NAME = re.compile(rf"^{NAME_PATTERN}$")


def check_name(what: str, value: str) -> str:
    """`value` unless it is not a valid model or version name (a StepError naming `what`)."""
    if not _NAME.match(value) or len(value) > 128:
        raise StepError(
            f"{what} {value!r} is not a valid name: use letters, digits, '.', '_' and '-' "
            "(starting with a letter or digit, at most 128 characters)"
        )
    return value


def manifest_object_key(root: str, model: str, version: str) -> str:
    """The bucket key of a version's manifest."""
    _, prefix = store_bucket(root)
    return "/".join(p for p in (prefix, model, version, MANIFEST) if p)


def created_record(root: str, key: str, body: bytes, etag: str | None = None) -> dict[str, Any]:
    """The notification record MinIO sends for a PUT of `key` holding `body`, with the store's ETag for it
    (default: the MD5 of `body`, what a single-part PUT without SSE-KMS/SSE-C reports)."""
    bucket, _ = store_bucket(root)
    now = datetime.now(UTC)
    return {
        "eventVersion": "2.0",
        "eventSource": "minio:s3",
        "awsRegion": "",
        "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z",
        "eventName": EVENT_NAME,
        "userIdentity": {"principalId": "paddle-mlops"},
        "requestParameters": {"principalId": "paddle-mlops", "region": "", "sourceIPAddress": "127.0.0.1"},
        "responseElements": {},
        "s3": {
            "s3SchemaVersion": "1.0",
            "configurationId": "Config",
            "bucket": {
                "name": bucket,
                "ownerIdentity": {"principalId": "paddle-mlops"},
                "arn": f"arn:aws:s3:::{bucket}",
            },
            "object": {
                "key": quote(key, safe=""),
                "size": len(body),
                "eTag": etag or hashlib.md5(body, usedforsecurity=False).hexdigest(),
                "contentType": "application/json",
                "userMetadata": {"content-type": "application/json"},
                "sequencer": f"{time.time_ns():X}",
            },
        },
        "source": {"host": "127.0.0.1", "port": "", "userAgent": "paddle-mlops"},
    }


def event_data(record: dict[str, Any]) -> dict[str, Any]:
    """The event data Argo Events' minio EventSource dispatches for one record (what the Sensor filters)."""
    return {NOTIFICATION_RECORDS: [record]}


def model_uri_for(root: str, bucket: str, key: str) -> str:
    """The model URI a notification for `bucket`/`key` names, checked against the store at `root`.

    StepError when the record is not about a manifest of a model in this store (another bucket, another
    prefix, another object, an escaped name that is not a plain name)."""
    own_bucket, prefix = store_bucket(root)
    if bucket != own_bucket:
        raise StepError(f"the event is for bucket {bucket!r}; this pipeline's store is {root} (bucket {own_bucket!r})")
    path = unquote(key)
    parts = path.split("/")
    expected = [p for p in prefix.split("/") if p]
    if len(parts) != len(expected) + 3 or parts[: len(expected)] != expected or parts[-1] != MANIFEST:
        where = f"{prefix}/" if prefix else ""
        raise StepError(
            f"the event's object {path!r} is not a model manifest of this store "
            f"(expected {where}<model>/<version>/{MANIFEST} in bucket {own_bucket!r})"
        )
    model, version = check_name("model name", parts[-3]), check_name("version", parts[-2])
    return f"{root.rstrip('/')}/{model}/{version}"
