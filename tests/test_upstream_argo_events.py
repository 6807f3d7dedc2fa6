"""Argo Events controller and sensor behaviour the generated events.yaml must survive.

Encodes argoproj/argo-events at the tags in paddle_mlops_core/versions.py (minimum v1.9.10, tested v1.9.11):
- manifests/install.yaml, ConfigMap `argo-events-controller-config`, key `controller-config.yaml`:
  the JetStream versions the controller accepts (`eventBus.jetstream.versions[].version`);
- pkg/reconciler/config.go GetJetStreamVersion: EventBus `jetstream.version` must equal one of them;
- pkg/reconciler/eventbus/validate.go: a version is required, replicas are 1 or >= 3;
- pkg/reconciler/sensor/validate.go ValidateSensor: what makes the controller refuse a Sensor
  (a dlqTrigger needs `atLeastOnce: true` on the trigger AND on the dlqTrigger, among others);
- pkg/sensors/listener.go: a trigger whose `atLeastOnce` is false runs in a goroutine, so the
  retry loop around it sees success at once and never retries;
- pkg/eventsources/sources/minio/validate.go: what makes the controller refuse a minio EventSource (its
  `unknown event` check is a Go type conversion, `notification.EventType(event) == ""`, so only an empty
  name is refused; a misspelt event reaches MinIO, whose ListenBucketNotification refuses names that
  minio internal/event/name.go does not parse); minio-go's `minio.New` takes `host:port`, no scheme or path.
The vendored Argo Events schema subset (tests/validate_crds.py) is checked against the upstream JSON schema in
`../shared/schemas/argo-events.schema.json` where a checkout has it.
The documents checked are the generated files under argo/, so a regression in the generator fails here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from paddle_mlops_core.versions import MATRIX, at_least, supports
from pipelines.platform import events, events_controller, publish_events
from tests.validate_crds import ARGO_EVENTS_SUBSET

ARGO = Path(__file__).resolve().parents[1] / "argo"
UPSTREAM_SCHEMA = Path(__file__).resolve().parents[2] / "shared" / "schemas" / "argo-events.schema.json"
# minio internal/event/name.go: the names ParseName accepts for the object events this project could listen to.
MINIO_EVENT_NAMES = {
    "s3:ObjectCreated:*",
    "s3:ObjectCreated:Put",
    "s3:ObjectCreated:Post",
    "s3:ObjectCreated:Copy",
    "s3:ObjectCreated:CompleteMultipartUpload",
    "s3:ObjectCreated:PutRetention",
    "s3:ObjectCreated:PutLegalHold",
    "s3:ObjectCreated:PutTagging",
    "s3:ObjectCreated:DeleteTagging",
    "s3:ObjectRemoved:*",
    "s3:ObjectRemoved:Delete",
    "s3:ObjectRemoved:DeleteMarkerCreated",
}

# `eventBus.jetstream.versions[].version` of manifests/install.yaml at each release (the list is the
# same in install.yaml and in the ConfigMap the controller mounts at /etc/argo-events).
JETSTREAM_VERSIONS: dict[str, tuple[str, ...]] = {
    "1.9.9": ("latest", "2.8.1", "2.8.1-alpine", "2.8.2", "2.8.2-alpine", "2.9.1", "2.9.12", "2.9.16", "2.10.10"),
    "1.9.10": ("latest", "2.8.1", "2.8.1-alpine", "2.8.2", "2.8.2-alpine", "2.9.1", "2.9.12", "2.9.16", "2.10.29"),
    "1.9.11": ("latest", "2.8.1", "2.8.1-alpine", "2.8.2", "2.8.2-alpine", "2.9.1", "2.9.12", "2.9.16", "2.10.29"),
}

SUBMIT_OPERATIONS = {"submit", "submit-from", "suspend", "retry", "resume", "resubmit", "terminate", "stop"}
K8S_OPERATIONS = {"", "create", "patch", "update", "delete"}
PARAMETER_OPERATIONS = {"", "append", "overwrite", "prepend"}
COMPARATORS = {"", ">=", ">", "=", "!=", "<", "<="}


def load(directory: Path = ARGO) -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((directory / "events.yaml").read_text())
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs if d}


# --- mirrors of the controller's checks ---------------------------------------------------------


def jetstream_version_problem(bus: dict[str, Any], release: str, added: tuple[str, ...] = ()) -> str | None:
    """GetJetStreamVersion + eventbus validate.go for one Argo Events release whose controller config lists upstream's
    versions plus `added` (what a patch of the controller config adds); None when accepted."""
    js = bus["spec"]["jetstream"]
    version = js.get("version", "")
    if not version:
        return "invalid spec: a version for jetstream needs to be specified"
    replicas = js.get("replicas")
    if replicas is not None and (replicas == 2 or replicas <= 0):
        return "invalid spec: a jetstream eventbus requires 1 replica or >= 3 replicas"
    listed = (*JETSTREAM_VERSIONS[release], *added)
    if version not in listed:
        return f"unsupported version {version!r} on v{release}, supported: {','.join(listed)}"
    return None


def _parameter_problems(params: list[dict[str, Any]], where: str) -> list[str]:
    problems = []
    for i, p in enumerate(params or []):
        src = p.get("src")
        if not src:
            problems.append(f"{where} parameter {i}: parameter source can't be empty")
        elif not src.get("dependencyName"):
            problems.append(f"{where} parameter {i}: parameter dependency name can't be empty")
        if not p.get("dest"):
            problems.append(f"{where} parameter {i}: parameter destination can't be empty")
        if p.get("operation", "") not in PARAMETER_OPERATIONS:
            problems.append(f"{where} parameter {i}: operation {p['operation']} is invalid")
    return problems


def _trigger_problems(trigger: dict[str, Any]) -> list[str]:
    template = trigger.get("template") or {}
    name = template.get("name", "")
    if not name:
        return ["trigger must define a name"]
    problems = _parameter_problems(trigger.get("parameters", []), name)
    if "argoWorkflow" in template:
        wf = template["argoWorkflow"]
        if not wf.get("source"):
            problems.append(f"{name}: argoWorkflow trigger does not contain an absolute action")
        if wf.get("operation") not in SUBMIT_OPERATIONS:
            problems.append(f"{name}: unknown operation type {wf.get('operation')}")
        problems += _parameter_problems(wf.get("parameters", []), name)
    if "k8s" in template:
        k8s = template["k8s"]
        if not k8s.get("source"):
            problems.append(f"{name}: k8s trigger does not contain an absolute action")
        if k8s.get("operation", "") not in K8S_OPERATIONS:
            problems.append(f"{name}: unknown operation type {k8s['operation']}")
        problems += _parameter_problems(k8s.get("parameters", []), name)
    dlq = trigger.get("dlqTrigger")
    if dlq is not None:
        if not trigger.get("atLeastOnce"):
            problems.append(f"{name}: to use dlqTrigger, trigger.atLeastOnce must be set to true")
        if not dlq.get("atLeastOnce"):
            problems.append(f"{name}: atLeastOnce must be set to true within the dlqTrigger")
        problems += _trigger_problems(dlq)
    return problems


def sensor_problems(sensor: dict[str, Any]) -> list[str]:
    """ValidateSensor (v1.9.11) for the trigger kinds and data filters the project uses."""
    spec = sensor["spec"]
    problems = []
    for dep in spec.get("dependencies") or []:
        if not (dep.get("name") and dep.get("eventSourceName") and dep.get("eventName")):
            problems.append(f"dependency {dep}: name, eventSourceName and eventName are required")
        filters = dep.get("filters") or {}
        for flt in filters.get("data", []):
            if flt.get("comparator", "") not in COMPARATORS:
                problems.append(f"{dep['name']}: comparator {flt['comparator']} not supported")
            if not (flt.get("path") and flt.get("type") and flt.get("value")) or "" in flt["value"]:
                problems.append(f"{dep['name']}: data filter needs type, path and non-empty values")
    if not spec.get("dependencies"):
        problems.append("no event dependencies found")
    names: set[str] = set()
    for trigger in spec.get("triggers") or []:
        problems += _trigger_problems(trigger)
        name = trigger["template"]["name"]
        if name in names:
            problems.append(f"duplicate trigger name: {name}")
        names.add(name)
    return problems


def minio_source_problems(source: dict[str, Any]) -> list[str]:
    """minio validate.go, plus what minio-go and the MinIO server refuse when the listener starts."""
    problems = []
    if source.get("accessKey") is None:
        problems.append("access key can't be empty")
    if source.get("secretKey") is None:
        problems.append("secret key can't be empty")
    if not source.get("endpoint"):
        problems.append("endpoint url can't be empty")
    elif "://" in source["endpoint"] or "/" in source["endpoint"]:
        problems.append(f"minio-go: endpoint {source['endpoint']!r} must be host:port, without scheme or path")
    if source.get("bucket") is not None and not source["bucket"].get("name"):
        problems.append("bucket name can't be empty")
    names = source.get("events") or []
    problems += [f"unknown event {e}" for e in names if e == ""]
    problems += [f"MinIO: unsupported event {e}" for e in names if e and e not in MINIO_EVENT_NAMES]
    return problems


def retried_attempts(trigger: dict[str, Any], failures_before_success: int) -> int:
    """How often listener.go's DoWithRetry runs a trigger whose first attempts fail.

    A trigger without `atLeastOnce` runs in a goroutine and reports success at once, so it gets
    exactly one attempt whatever happens (pkg/sensors/listener.go triggerActions).
    """
    steps = (trigger.get("retryStrategy") or {}).get("steps", 1)
    if not trigger.get("atLeastOnce"):
        return 1
    return min(steps, failures_before_success + 1)


# --- tests ---------------------------------------------------------------------------------------


def releases_in_matrix() -> list[str]:
    component = MATRIX["argo-events"]
    return [r for r in JETSTREAM_VERSIONS if at_least(r, component.minimum) and at_least(component.tested, r)]


def test_the_matrix_releases_are_all_encoded():
    component = MATRIX["argo-events"]
    assert component.minimum in JETSTREAM_VERSIONS and component.tested in JETSTREAM_VERSIONS


@pytest.mark.parametrize("release", releases_in_matrix())
def test_event_bus_version_is_one_the_controller_lists(release):
    """Listed once argo/controller-settings/argo-events-config.yaml is patched in; not by upstream alone, whose own
    entries would run NATS by tag (installer/jetstream.go takes the entry's images as they are)."""
    bus = load()[f"EventBus/{events.EVENT_BUS}"]
    added = tuple(v["version"] for v in shipped_controller_config()["eventBus"]["jetstream"]["versions"])
    assert jetstream_version_problem(bus, release, added) is None
    assert jetstream_version_problem(bus, release) is not None
    assert bus["spec"]["jetstream"]["version"] == events.JETSTREAM_VERSION


def shipped_controller_config(directory: Path = ARGO / "controller-settings") -> dict[str, Any]:
    (doc,) = yaml.safe_load_all((directory / "argo-events-config.yaml").read_text())
    return yaml.safe_load(doc["data"][events_controller.CONTROLLER_CONFIG_KEY])


def test_the_patched_controller_config_keeps_upstreams_versions_and_pins_ours() -> None:
    """The key is one document (pkg/reconciler/config.go LoadConfig: viper reads the whole file), so ours carries
    upstream v1.9.11's own lists (other EventBuses of the cluster keep their versions; ValidateConfig wants a stan and
    a jetstream version) plus our entry: upstream's 2.10.29 images, by digest in the release overlay."""
    config = shipped_controller_config()
    versions = {v["version"]: v for v in config["eventBus"]["jetstream"]["versions"]}
    assert set(JETSTREAM_VERSIONS["1.9.11"]) < set(versions)
    assert config["eventBus"]["nats"]["versions"][0]["version"] == "0.22.1"
    ours = versions[events.JETSTREAM_VERSION]
    upstream = versions["2.10.29"]
    assert {k: v for k, v in ours.items() if k != "version"} == {k: v for k, v in upstream.items() if k != "version"}
    assert upstream["natsImage"] == "nats:2.10.29" and upstream["startCommand"] == "/nats-server"
    released = shipped_controller_config(ARGO.parent / "overlays" / "prod" / "controller-settings")
    pinned = next(v for v in released["eventBus"]["jetstream"]["versions"] if v["version"] == events.JETSTREAM_VERSION)
    assert all("@sha256:" in pinned[k] for k in ("natsImage", "metricsExporterImage", "configReloaderImage"))


def test_jetstream_version_is_declared_version_dependent():
    assert supports("argo-events", f"EventBus jetstream.version {events.JETSTREAM_VERSION}")


def test_version_check_refuses_what_the_controller_refuses():
    bus = {"spec": {"jetstream": {"version": "2.10.10", "replicas": 3}}}
    assert "unsupported version" in jetstream_version_problem(bus, "1.9.11")
    assert jetstream_version_problem(bus, "1.9.9") is None
    bus["spec"]["jetstream"].update(version=events.JETSTREAM_VERSION, replicas=2)
    assert "replicas" in jetstream_version_problem(bus, "1.9.11")


@pytest.mark.parametrize("name", [events.SENSOR, publish_events.SENSOR])
def test_controller_accepts_the_sensor(name):
    assert sensor_problems(load()[f"Sensor/{name}"]) == []


def test_controller_and_minio_accept_the_model_store_event_source():
    (source,) = load()[f"EventSource/{publish_events.MODEL_STORE_SOURCE}"]["spec"]["minio"].values()
    assert minio_source_problems(source) == []


def test_event_source_check_refuses_what_the_listener_refuses():
    (source,) = load()[f"EventSource/{publish_events.MODEL_STORE_SOURCE}"]["spec"]["minio"].values()
    assert minio_source_problems({**source, "endpoint": "http://minio:9000"})[0].startswith("minio-go")
    assert minio_source_problems({**source, "events": ["s3:ObjectCreated"]}) == [
        "MinIO: unsupported event s3:ObjectCreated"
    ]
    assert minio_source_problems({**source, "accessKey": None}) == ["access key can't be empty"]


def test_the_vendored_event_schema_matches_upstream():
    if not UPSTREAM_SCHEMA.is_file():
        pytest.skip(f"no upstream schema at {UPSTREAM_SCHEMA} (a checkout without ../shared)")
    upstream = json.loads(UPSTREAM_SCHEMA.read_text())["definitions"]
    for name, (keys, refs, required) in ARGO_EVENTS_SUBSET.items():
        definition = upstream.get(f"io.argoproj.events.v1alpha1.{name}") or upstream[f"io.k8s.api.core.v1.{name}"]
        assert set(keys.split()) == set(definition["properties"]), name
        assert set(required) == set(definition.get("required", [])), name
        for key, ref in refs.items():
            prop = definition["properties"][key]
            target = prop.get("$ref") or (prop.get("items") or prop.get("additionalProperties") or {}).get("$ref")
            assert target is not None and target.rsplit(".", 1)[-1] == ref.lstrip("*"), f"{name}.{key}"


def test_sensor_check_refuses_a_dead_letter_trigger_without_at_least_once():
    sensor = load()[f"Sensor/{events.SENSOR}"]
    del sensor["spec"]["triggers"][0]["dlqTrigger"]["atLeastOnce"]
    assert sensor_problems(sensor) == [
        "train-deploy-from-github: atLeastOnce must be set to true within the dlqTrigger"
    ]


def test_dead_letter_trigger_is_retried_when_it_fails():
    for trigger in load()[f"Sensor/{events.SENSOR}"]["spec"]["triggers"]:
        assert retried_attempts(trigger, failures_before_success=2) == 3
        dlq = trigger["dlqTrigger"]
        assert retried_attempts(dlq, failures_before_success=2) == 3


def test_controller_config_names_match_upstream():
    # preflight reads the accepted versions from this ConfigMap key (install.yaml, config.go LoadConfig
    # reads /etc/argo-events/controller-config.yaml).
    assert events_controller.CONTROLLER_CONFIGMAP == "argo-events-controller-config"
    assert events_controller.CONTROLLER_CONFIG_KEY == "controller-config.yaml"
    # start.go reads the EventSource/Sensor image from this variable of the controller-manager Deployment.
    assert (events_controller.DEPLOYMENT, events_controller.IMAGE_ENV) == ("controller-manager", "ARGO_EVENTS_IMAGE")
