"""Monitoring: every query names only metrics something exports; rules, dashboards and Argo
metrics have the shape their consumers require; the trainer's endpoint serves what it records."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families

from paddle_mlops_core import contracts
from paddle_mlops_core.config import PipelineConfig
from pipelines.observability import alerts, argo_metrics, monitors, render_observability
from pipelines.observability.promql import EXTERNAL_METRICS
from steps.runtime.training.metrics import TrainingMetrics
from tests.prometheus_rule_schema import PROMETHEUS_RULE_SPEC_SCHEMA
from tests.prometheus_sources import declared_metrics

ARGO_SCHEMA = Path("/work/shared/schemas/argo-workflows.schema.json")

# ------------------------------------------------------------------ PromQL metric names

_TOKEN = re.compile(
    r"""(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
      |(?P<braces>\{[^}]*\})
      |(?P<range>\[[^\]]*\])
      |(?P<duration>(?<![\w:])(?:\d+(?:ms|[smhdwy]))+(?![\w:]))
      |(?P<number>(?<![\w:])(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+|Inf|NaN)(?![\w:]))
      |(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
      |(?P<other>\S)""",
    re.VERBOSE,
)
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2"}
# Aggregation operators may take their `by (...)` before the parenthesised argument.
_AGGREGATIONS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
}  # fmt: skip
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions (followed by `(`),
    keywords, grouping clauses with their label lists, label matchers, ranges, durations or numbers."""
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(expr)]
    names: set[str] = set()
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        nxt = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if kind == "ident" and text in _GROUPING:
            if nxt == "(":  # skip the label list
                while i < len(tokens) and tokens[i][1] != ")":
                    i += 1
        elif kind == "ident" and text == "offset":
            i += 1  # the duration after offset
        elif kind == "ident" and text not in _KEYWORDS | _AGGREGATIONS and nxt != "(":
            names.add(text)
        i += 1
    return names


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("up", {"up"}),
        ('sum by (le, pod) (rate(x_bucket{a="b", c=~"5.."}[5m])) > 0.5', {"x_bucket"}),
        ("histogram_quantile(0.99, sum without (instance) (rate(y[1h] offset 1d)))", {"y"}),
        ('a * on (namespace, pod) group_left (owner_name) b{k="v(1)"} and bool c', {"a", "b", "c"}),
        ("max(m) / ignoring(code) group_right n_total + 1e3 - 0x1f", {"m", "n_total"}),
        ("sum(rate(x[5m])) by (job)", {"x"}),
        ('label_replace(up, "dst", "$1", "src", "(.*)")', {"up"}),
    ],
)
def test_promql_metric_names(expr: str, expected: set[str]) -> None:
    assert promql_metric_names(expr) == expected


# ------------------------------------------------------------------ what the project exports

_SERIES_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}


def _series(name: str, kind: str) -> set[str]:
    base = name.removesuffix("_total") if kind == "counter" else name
    return {base + suffix for suffix in _SERIES_SUFFIXES[kind]}


def training_series() -> set[str]:
    registry = TrainingMetrics(gpu=True).registry
    return {s for family in registry.collect() for s in _series(family.name, family.type)}


SERVING_AGREED = {  # the scheme the dashboards rely on; the model server must declare it
    contracts.SERVING_REQUESTS_TOTAL: "counter",
    contracts.SERVING_REQUEST_LATENCY_SECONDS: "histogram",
    contracts.SERVING_BATCH_SIZE: "histogram",
    contracts.SERVING_ERRORS_TOTAL: "counter",
}


def serving_series() -> set[str]:
    """Series names of every prometheus_client metric the model server constructs (read from its source)."""
    return {
        s
        for metric in declared_metrics("steps.runtime.serving.model_server")
        for s in _series(metric.name, metric.kind)
    }


def known_metrics() -> set[str]:
    external = {name for names in EXTERNAL_METRICS.values() for name in names}
    argo_custom: set[str] = set()
    for name in argo_metrics.argo_exported_names():
        argo_custom |= _series(name, "counter" if name.endswith("_total") else "gauge")
    return training_series() | serving_series() | argo_custom | external


@pytest.fixture(scope="module")
def cfg() -> PipelineConfig:
    return PipelineConfig()


@pytest.fixture(scope="module")
def rendered(cfg: PipelineConfig) -> dict[str, list[dict]]:
    return render_observability(cfg)


def test_serving_source_declares_the_agreed_names() -> None:
    assert {s for name, kind in SERVING_AGREED.items() for s in _series(name, kind)} <= serving_series()


def test_unknown_metric_is_caught() -> None:
    assert promql_metric_names("rate(paddle_mlops_serving_requests_totl[5m])") - known_metrics()


def _queries(rendered: dict[str, list[dict]]) -> list[tuple[str, str]]:
    queries = []
    for doc in rendered["monitoring.yaml"]:
        if doc["kind"] == "PrometheusRule":
            queries += [(r["alert"], r["expr"]) for g in doc["spec"]["groups"] for r in g["rules"]]
    for cm in rendered["dashboards.yaml"]:
        for key, text in cm["data"].items():
            for panel in json.loads(text)["panels"]:
                queries += [(f"{key}: {panel['title']}", t["expr"]) for t in panel["targets"]]
    return queries


def test_every_query_names_only_exported_metrics(rendered: dict[str, list[dict]]) -> None:
    known = known_metrics()
    queries = _queries(rendered)
    assert len(queries) > 20
    for where, expr in queries:
        names = promql_metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        assert names <= known, f"{where}: unknown metrics {sorted(names - known)} in {expr!r}"


def test_every_exported_metric_family_is_on_a_dashboard(rendered: dict[str, list[dict]]) -> None:
    used = {n for _, expr in _queries(rendered) for n in promql_metric_names(expr)}
    for family in TrainingMetrics(gpu=True).registry.collect():
        assert _series(family.name, family.type) & used, f"{family.name} is on no dashboard"
    for name, kind in SERVING_AGREED.items():
        assert _series(name, kind) & used, f"{name} is on no dashboard"


# ------------------------------------------------------------------ shapes


def test_prometheus_rule_validates_and_covers_the_required_alerts(
    rendered: dict[str, list[dict]], cfg: PipelineConfig
) -> None:
    (rule,) = [d for d in rendered["monitoring.yaml"] if d["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    jsonschema.validate(rule["spec"], PROMETHEUS_RULE_SPEC_SCHEMA)
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {
        "TrainingJobGPUIdle", "TrainingJobPendingTooLong", "PaddleMLOpsPodRestarting", "PaddleMLOpsWorkflowFailed",
        "ModelServingErrorRateHigh", "ModelServingLatencyP99High", "ModelServerDown",
    } <= set(rules)  # fmt: skip
    assert rules["TrainingJobPendingTooLong"]["for"] == f"{cfg.training.job.schedule_timeout_seconds}s"
    assert str(cfg.serving.max_error_rate) in rules["ModelServingErrorRateHigh"]["expr"]
    assert f"> {cfg.serving.max_p99_latency_ms / 1000:g}" in rules["ModelServingLatencyP99High"]["expr"]
    assert "DCGM_FI_DEV_GPU_UTIL" in rules["TrainingJobGPUIdle"]["expr"]


def test_rule_schema_rejects_unknown_keys() -> None:
    bad = {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up", "severity": "x"}]}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, PROMETHEUS_RULE_SPEC_SCHEMA)


def test_thresholds_follow_config() -> None:
    cfg = PipelineConfig.model_validate(
        {"serving": {"max_p99_latency_ms": 250, "max_error_rate": 0.05}, "cluster": {"namespace": "team-a"}}
    )
    rules = {r["alert"]: r for r in alerts.alert_rules(cfg)}
    assert "> 0.25" in rules["ModelServingLatencyP99High"]["expr"]
    assert "> 0.05" in rules["ModelServingErrorRateHigh"]["expr"]
    assert 'namespace="team-a"' in rules["TrainingJobPendingTooLong"]["expr"]


def test_monitors(rendered: dict[str, list[dict]], cfg: PipelineConfig) -> None:
    monitors = {d["metadata"]["name"]: d for d in rendered["monitoring.yaml"] if d["kind"] != "PrometheusRule"}
    train, serve = monitors["paddle-mlops-training"], monitors["paddle-mlops-serving"]
    assert train["kind"] == serve["kind"] == "PodMonitor"
    for doc in monitors.values():
        assert doc["apiVersion"] == "monitoring.coreos.com/v1"
        assert doc["metadata"]["namespace"] == cfg.cluster.namespace
    keep = train["spec"]["podMetricsEndpoints"][0]["relabelings"][0]
    # TrainJob pods by the JobSet name label (tests/test_upstream_prometheus.py keeps real targets).
    assert keep == {
        "sourceLabels": ["__meta_kubernetes_pod_label_jobset_sigs_k8s_io_jobset_name"],
        "regex": ".+",
        "action": "keep",
    }
    targets = {r.get("targetLabel") for r in serve["spec"]["podMetricsEndpoints"][0]["relabelings"]}
    assert {"isvc", "revision", "component"} <= targets  # what canary-vs-stable panels group by
    # Argo installs no metrics Service, so the controller pods are scraped directly.
    argo = monitors["argo-workflow-controller"]
    assert argo["kind"] == "PodMonitor"
    assert argo["spec"]["podMetricsEndpoints"][0]["honorLabels"] is True


@pytest.mark.parametrize("secure", [True, False])
def test_argo_monitor_scheme_follows_the_controller_config(
    secure: bool, cfg: PipelineConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """argo-workflows util/telemetry/exporter_prometheus.go serves TLS exactly when metricsConfig.secure
    (default true since 3.6: workflow/controller/controller.go `GetSecure(true)`; 3.5 `GetSecure(false)`)."""
    monkeypatch.setattr(monitors, "METRICS_SECURE", secure)
    (endpoint,) = monitors.argo_controller_monitor(cfg)["spec"]["podMetricsEndpoints"]
    assert endpoint["scheme"] == ("https" if secure else "http")
    assert ("tlsConfig" in endpoint) == secure


def test_dashboards_configmap(rendered: dict[str, list[dict]]) -> None:
    (cm,) = rendered["dashboards.yaml"]
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    titles = set()
    for key, text in cm["data"].items():
        dashboard = json.loads(text)
        assert key == f"{dashboard['uid']}.json"
        assert dashboard["panels"]
        ids = [p["id"] for p in dashboard["panels"]]
        assert len(ids) == len(set(ids))
        for panel in dashboard["panels"]:
            assert panel["targets"] and all(t["expr"] and t["refId"] for t in panel["targets"])
            titles.add(panel["title"])
    assert any("canary" in t for t in titles)


def _argo_metrics_validator() -> jsonschema.Validator:
    definitions = json.loads(ARGO_SCHEMA.read_text())["definitions"]
    schema = {"$ref": "#/definitions/io.argoproj.workflow.v1alpha1.Metrics", "definitions": definitions}
    return jsonschema.Draft7Validator(schema)


@pytest.mark.parametrize("template", ["prepare-data", "train", "evaluate", "rollout"])
def test_argo_template_metrics(template: str) -> None:
    block = argo_metrics.argo_template_metrics(template)
    if ARGO_SCHEMA.is_file():
        _argo_metrics_validator().validate(block)
    names = {m["name"] for m in block["prometheus"]}
    assert {contracts.STEP_DURATION, contracts.STEP_RESULT} <= names
    for metric in block["prometheus"]:
        # Argo accepts only [a-zA-Z0-9_] names; one name must keep one help text and one type.
        assert re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", metric["name"])
        assert sum(k in metric for k in ("gauge", "counter", "histogram")) == 1
    duration = next(m for m in block["prometheus"] if m["name"] == contracts.STEP_DURATION)
    assert duration["gauge"]["value"] == "{{duration}}"
    assert {"key": "step", "value": template} in duration["labels"]
    assert ("gate-passed" in json.dumps(block)) == (template == "evaluate")
    assert ("outputs.parameters.outcome" in json.dumps(block)) == (template == "rollout")


def test_argo_metric_help_is_consistent_across_templates() -> None:
    helps: dict[str, str] = {}
    for template in ("prepare-data", "evaluate", "rollout"):
        for metric in argo_metrics.argo_template_metrics(template)["prometheus"]:
            assert helps.setdefault(metric["name"], metric["help"]) == metric["help"]


# ------------------------------------------------------------------ the trainer's endpoint


def test_training_metrics_endpoint(tmp_path: Path) -> None:
    metrics = TrainingMetrics(gpu=True)
    port_file = tmp_path / "port"
    port = metrics.start(0, host="127.0.0.1", port_file=port_file)
    try:
        assert port > 0 and port_file.read_text() == str(port)
        metrics.update(step=7, epoch=2, loss=0.25, samples=64, seconds=0.5, wait=0.02, gpu_memory_bytes=1024.0)
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        metrics.stop()
    samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}
    assert samples[contracts.TRAIN_STEP] == 7
    assert samples[contracts.TRAIN_EPOCH] == 2
    assert samples[contracts.TRAIN_LOSS] == 0.25
    assert samples[contracts.TRAIN_SAMPLES_PER_SECOND] == 128
    assert samples[contracts.TRAIN_GPU_MEMORY_BYTES] == 1024
    assert samples[contracts.TRAIN_DATALOADER_WAIT_SECONDS + "_count"] == 1
    assert samples[contracts.TRAIN_DATALOADER_WAIT_SECONDS + "_sum"] == pytest.approx(0.02)
    # Its own registry: the process-global one (kserve, other libraries) does not leak in.
    assert "python_gc_objects_collected_total" not in text


def test_training_metrics_without_gpu_omit_gpu_memory() -> None:
    names = {f.name for f in TrainingMetrics(gpu=False).registry.collect()}
    assert contracts.TRAIN_GPU_MEMORY_BYTES not in names
    assert contracts.TRAIN_LOSS in names


def test_two_instances_do_not_collide() -> None:
    TrainingMetrics()
    TrainingMetrics()
