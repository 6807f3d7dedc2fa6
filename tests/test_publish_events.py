"""A MinIO bucket notification through the generated `model-store` EventSource and `rollout-on-publish` Sensor.

The notifications are the records MinIO sends, in the shape MinIO documents and builds them:
- minio internal/event/event.go (Event, Metadata, Bucket, Object: the JSON field names) and
  cmd/event-notification.go (ToEvent: `s3.object.key` is `url.QueryEscape` of the object name, so `/`
  arrives as `%2F`; eTag and size are set for every event but ObjectRemoved:Delete);
- minio internal/event/rules.go NewPattern + wildcard.MatchSimple: the EventSource's `filter.prefix` and
  `filter.suffix` become the server-side pattern `prefix*suffix`, where `*` also matches `/`;
- argo-events pkg/eventsources/sources/minio/start.go handleOne: the event data is
  `MinioEventData{Notification: records, Metadata}` (JSON `notification`, `metadata` omitted when empty),
  which is what the Sensor's data filters and trigger parameters read (mirrored by paddle_mlops.local.sensor).
"""

from __future__ import annotations

import argparse
import re
from typing import Any
from urllib.parse import quote_plus

import pytest

from paddle_mlops.local.sensor import fire, workflow_parameters
from paddle_mlops_core.config import load_config
from pipelines import rollout_template
from pipelines.platform import publish_events
from steps import validate
from steps.runtime.runner import StepError
from steps.runtime.storage.objectstore import notifications
from tests.validate_manifests import validate_document

ETAG = "5fc7298143efe1276d39a3466d4e255f"


@pytest.fixture(scope="module")
def cfg():
    return load_config(env="prod")  # storage.uri s3://paddle-mlops/models on http://minio.minio.svc:9000


@pytest.fixture(scope="module")
def docs(cfg) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in publish_events.render(cfg)}


def minio_record(key: str, bucket: str = "paddle-mlops", event: str = "s3:ObjectCreated:Put") -> dict[str, Any]:
    """One record as MinIO's ToEvent(escape=true) builds it (the field set of internal/event/event.go)."""
    obj: dict[str, Any] = {"key": quote_plus(key), "versionId": "1", "sequencer": "17D8A3C6B9A0E6F1"}
    if event != "s3:ObjectRemoved:Delete":
        obj |= {
            "size": 1843,
            "eTag": ETAG,
            "contentType": "application/json",
            "userMetadata": {"content-type": "application/json"},
        }
    return {
        "eventVersion": "2.0",
        "eventSource": "minio:s3",
        "awsRegion": "",
        "eventTime": "2026-12-01T09:27:27.114Z",
        "eventName": event,
        "userIdentity": {"principalId": "paddle-mlops-publisher"},
        "requestParameters": {"principalId": "paddle-mlops-publisher", "region": "", "sourceIPAddress": "10.0.0.7"},
        "responseElements": {
            "x-amz-request-id": "17D8A3C6B9A0E6F1",
            "x-minio-deployment-id": "0170a4cc-dca6-4e72-86f1-c0cc760dff7f",
            "x-minio-origin-endpoint": "http://10.0.0.5:9000",
        },
        "s3": {
            "s3SchemaVersion": "1.0",
            "configurationId": "Config",
            "bucket": {
                "name": bucket,
                "ownerIdentity": {"principalId": "paddle-mlops-publisher"},
                "arn": f"arn:aws:s3:::{bucket}",
            },
            "object": obj,
        },
        "source": {"host": "10.0.0.7", "port": "", "userAgent": "MinIO (linux; amd64) minio-go/v7.0.70"},
    }


def wildcard_match_simple(pattern: str, name: str) -> bool:
    """minio/pkg wildcard.MatchSimple: `*` matches any run of characters (`/` included); nothing else is special."""
    head, *rest = pattern.split("*")
    if not rest:
        return name == head
    if not name.startswith(head):
        return False
    position = len(head)
    for piece in rest[:-1]:
        found = name.find(piece, position)
        if found < 0:
            return False
        position = found + len(piece)
    return name.endswith(rest[-1]) and len(name) - len(rest[-1]) >= position


def deliver(docs: dict[str, dict[str, Any]], key: str, **record: Any) -> list[dict[str, Any]]:
    """MinIO's server-side filter and event list, then the EventSource's dispatch into the Sensor."""
    (source,) = docs["EventSource"]["spec"]["minio"].values()
    rec = minio_record(key, **record)
    pattern = source["filter"]["prefix"] + "*" + source["filter"]["suffix"]  # rules.go NewPattern
    wanted = any(
        rec["eventName"] == e or (e.endswith("*") and rec["eventName"].startswith(e[:-1])) for e in source["events"]
    )
    if rec["s3"]["bucket"]["name"] != source["bucket"]["name"] or not wanted or not wildcard_match_simple(pattern, key):
        return []  # MinIO sends the listener nothing
    data = {"notification": [rec]}  # start.go handleOne: MinioEventData, metadata omitted when empty
    return fire(docs["Sensor"], publish_events.MODEL_STORE_SOURCE, data, publish_events.MANIFEST_EVENT)


def test_event_source_and_sensor_validate_strictly(docs):
    for doc in docs.values():
        assert validate_document(doc, doc["kind"]) == []
    typo = {**docs["EventSource"], "spec": {**docs["EventSource"]["spec"]}}
    typo["spec"]["minio"] = {"manifests": {**docs["EventSource"]["spec"]["minio"]["manifests"], "filters": {}}}
    assert any("filters" in p for p in validate_document(typo, "EventSource"))


def test_event_source_reads_the_store_credentials_by_secret_reference(cfg, docs):
    (source,) = docs["EventSource"]["spec"]["minio"].values()
    secret = cfg.storage.credentials_secret
    assert source["accessKey"] == {"name": secret, "key": "AWS_ACCESS_KEY_ID"}
    assert source["secretKey"] == {"name": secret, "key": "AWS_SECRET_ACCESS_KEY"}
    # minio-go takes host:port without a scheme; `insecure` follows the configured endpoint's scheme.
    assert source["endpoint"] == "minio.minio.svc:9000" and source["insecure"] is True
    assert source["events"] == ["s3:ObjectCreated:*"]
    # preflight lists the Secret among those the cluster must hold before the install.
    from paddle_mlops.cluster_requirements import secret_refs

    refs = set(secret_refs(docs["EventSource"]))
    assert {(secret, "AWS_ACCESS_KEY_ID", None), (secret, "AWS_SECRET_ACCESS_KEY", None)} <= refs


def test_a_published_manifest_submits_rollout_with_the_event(cfg, docs):
    (workflow,) = deliver(docs, "models/ernie-sentiment/20261201-0927-3f2a9c1/manifest.json")
    assert validate_document(workflow, "Workflow") == []
    assert workflow["spec"]["workflowTemplateRef"] == {"name": "rollout"}
    assert workflow["metadata"]["generateName"] == "rollout-"
    params = workflow_parameters(workflow)
    assert params == {
        "event-bucket": "paddle-mlops",
        "event-key": "models%2Fernie-sentiment%2F20261201-0927-3f2a9c1%2Fmanifest.json",
        "event-etag": ETAG,
        "task": "sentiment",
    }
    declared = {p.name for p in rollout_template.parameters(cfg)}
    assert set(params) <= declared
    # What validate makes of it: the version's prefix in this pipeline's store.
    uri = notifications.model_uri_for(cfg.storage.uri, params["event-bucket"], params["event-key"])
    assert uri == "s3://paddle-mlops/models/ernie-sentiment/20261201-0927-3f2a9c1"


@pytest.mark.parametrize(("task", "model"), [("ner", "ernie-ner"), ("text-matching", "ernie-text-matching")])
def test_each_task_s_manifest_submits_rollout_for_that_task(docs, task: str, model: str):
    """One dependency and trigger per configured task (configs/tasks/): a model's manifest starts `rollout` under
    its own task's configuration, so it is judged on its own data and served under its own name."""
    (workflow,) = deliver(docs, f"models/{model}/v3/manifest.json")
    assert workflow_parameters(workflow)["task"] == task
    assert workflow_parameters(workflow)["event-key"] == f"models%2F{model}%2Fv3%2Fmanifest.json"
    names = {d["name"] for d in docs["Sensor"]["spec"]["dependencies"]}
    assert {f"{publish_events.DEPENDENCY}-{t}" for t in ("sentiment", "ner", "text-matching")} <= names


@pytest.mark.parametrize(
    ("key", "record"),
    [
        ("models/ernie-sentiment/v7/inference.pdiparams", {}),
        ("models/ernie-sentiment/v7/label_map.json", {}),
        ("models/objects/sha256/9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", {}),
        ("models/ernie-sentiment/v7/manifest.json.part", {}),
        ("models/ernie-sentiment/v7/tokenizer/manifest.json", {}),  # passes MinIO's `*`, not the Sensor
        ("models/ernie-sentiment/manifest.json", {}),
        ("models/other-model/v7/manifest.json", {}),
        ("staging/models/ernie-sentiment/v7/manifest.json", {}),
        ("models/ernie-sentiment/v7/manifest.json", {"bucket": "someone-elses"}),
        ("models/ernie-sentiment/v7/manifest.json", {"event": "s3:ObjectRemoved:Delete"}),
        ("models/ernie-sentiment/v7/manifest.json", {"event": "s3:ObjectAccessed:Get"}),
    ],
    ids=[
        "weights",
        "label-map",
        "content-object",
        "partial-name",
        "nested-manifest",
        "model-level-manifest",
        "other-model",
        "other-prefix",
        "other-bucket",
        "deleted",
        "read",
    ],
)
def test_only_the_creation_of_a_version_manifest_creates_a_workflow(docs, key, record):
    assert deliver(docs, key, **record) == []


def test_the_sensor_filters_drop_what_minios_filter_lets_through(docs):
    """The Sensor checks the record again: a record for another object, reaching it however, creates nothing."""
    sensor = docs["Sensor"]
    for key in ("models/ernie-sentiment/v7/tokenizer/manifest.json", "models/ernie-sentiment/v7/inference.json"):
        data = {"notification": [minio_record(key)]}
        assert fire(sensor, publish_events.MODEL_STORE_SOURCE, data, publish_events.MANIFEST_EVENT) == []
    removed = {"notification": [minio_record("models/ernie-sentiment/v7/manifest.json", event="s3:ObjectRemoved:Put")]}
    assert fire(sensor, publish_events.MODEL_STORE_SOURCE, removed, publish_events.MANIFEST_EVENT) == []


def test_an_unescaped_key_is_read_the_same(cfg, docs):
    record = minio_record("models/ernie-sentiment/v8/manifest.json")
    record["s3"]["object"]["key"] = "models/ernie-sentiment/v8/manifest.json"  # ToEvent(escape=false)
    (workflow,) = fire(docs["Sensor"], publish_events.MODEL_STORE_SOURCE, {"notification": [record]}, "manifests")
    params = workflow_parameters(workflow)
    uri = notifications.model_uri_for(cfg.storage.uri, params["event-bucket"], params["event-key"])
    assert uri == "s3://paddle-mlops/models/ernie-sentiment/v8"


def test_the_local_notification_has_minios_shape(cfg, docs):
    """What `paddle-mlops run` and `paddle-mlops publish` deliver locally is the record MinIO sends."""
    key = notifications.manifest_object_key(cfg.storage.uri, "ernie-sentiment", "v9")
    ours = notifications.created_record(cfg.storage.uri, key, b'{"files": []}')
    theirs = minio_record(key)

    def shape(value: Any) -> Any:
        return {k: shape(v) for k, v in value.items()} if isinstance(value, dict) else type(value).__name__

    assert set(shape(ours)) == set(shape(theirs))
    assert set(ours["s3"]["object"]) <= set(theirs["s3"]["object"])
    assert ours["s3"]["object"]["key"] == theirs["s3"]["object"]["key"]
    (workflow,) = fire(docs["Sensor"], publish_events.MODEL_STORE_SOURCE, notifications.event_data(ours), "manifests")
    assert workflow_parameters(workflow)["event-key"] == quote_plus(key)


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("models%2Fernie-sentiment%2F..%2Fmanifest.json", "not a valid name"),
        ("models%2Fernie-sentiment%2Fv1%2Fextra%2Fmanifest.json", "not a model manifest"),
        ("models%2Fother%2Fv1%2Fmanifest.json", "this pipeline serves 'ernie-sentiment'"),
    ],
)
def test_validate_refuses_a_key_the_sensor_should_never_have_passed(cfg, key, message):
    """Defence in depth: validate reads the event again and names the model, the store and the version."""
    args = argparse.Namespace(model_uri="", event_bucket="paddle-mlops", event_key=key)
    with pytest.raises(StepError, match=re.escape(message)):
        validate.model_uri(cfg, args)
