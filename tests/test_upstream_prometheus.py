"""Every alert can fire: its label matchers name labels the stored series really carry, and its
counter expressions see a counter's first increment.

Prometheus' scrape and relabelling (scrape.go, prometheus-operator promcfg.go) are emulated in
tests/prometheus_scrape.py, the PromQL the counter alerts use in tests/promql_eval.py. Upstream
behaviour encoded here:
- prometheus-operator v0.93.0 pkg/prometheus/promcfg.go `AddHonorLabels` writes the endpoint's honorLabels.
- argo-workflows v4.1.2 util/telemetry/builder/values.yaml (TotalCount: phase, namespace; Gauge and
  PodsGauge: phase; ErrorCount: cause), util/telemetry/exporter_prometheus.go (`argo_workflows_`
  prefix, no suffixes), workflow/metrics/metrics_custom.go (a custom counter's value starts at 0
  and is incremented before its first export: the first sample is 1; labels are the template's).
- NVIDIA/dcgm-exporter internal/pkg/transformation/const.go (the GPU's pod as `pod`, `namespace`,
  `container`) and deployment/values.yaml (`serviceMonitor.honorLabels: false`).
- kube-state-metrics docs/metrics/workload/pod-metrics.md, scraped by kube-prometheus-stack with
  honorLabels: true.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from paddle_mlops.compile import default_compile_config
from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import ROLLOUT_OUTCOME, SERVING_PORT, STEP_RESULT, VALIDATION_VERDICT
from pipelines import paddlejob, trainjob
from pipelines.observability import alerts, argo_metrics, dashboards, render_observability
from pipelines.observability.promql import EXTERNAL_METRICS
from pipelines.platform.argo_controller import CONTROLLER_NAMESPACE
from steps.runtime.release import inference_service as isvc
from steps.runtime.training.metrics import TrainingMetrics
from tests.prometheus_scrape import FREE, Container, merge, pod_monitor_targets
from tests.prometheus_sources import declared_metrics
from tests.promql_eval import SELECTOR, Evaluator, counter, parse_selector

# ------------------------------------------------------------------ Prometheus' target-label merge


def test_merge_follows_prometheus() -> None:
    target = {"namespace": "argo", "pod": "ctrl", "job": "j"}
    assert merge({"namespace": "team"}, target, honor=True)["namespace"] == "team"
    stored = merge({"namespace": "team", "exported_namespace": "x"}, target, honor=False)
    assert stored["namespace"] == "argo" and stored["exported_exported_namespace"] == "team"


# ------------------------------------------------------------------ the pods and what they export


def training_containers(cfg: PipelineConfig) -> list[Container]:
    """Rank 0's container: a TrainJob node pod (the runtime's template, JobSet's labels, owned by the
    Indexed Job `<trainjob>-node-0`) or a legacy PaddleJob worker."""
    if cfg.training.backend == "trainjob":
        runtime = trainjob.cluster_training_runtime(cfg)
        template = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        (container,) = template["spec"]["containers"]
        labels = {**template["metadata"]["labels"], "jobset.sigs.k8s.io/jobset-name": "wf-train-x"}
        return _ports_of(cfg, "wf-train-x-node-0-0", labels, container, ("Job", "wf-train-x-node-0"))
    job = paddlejob.build_paddlejob(cfg).manifest
    template = job["spec"]["paddleReplicaSpecs"]["Worker"]["template"]
    (container,) = template["spec"]["containers"]
    labels = {**template["metadata"]["labels"], "training.kubeflow.org/replica-type": "worker"}
    return _ports_of(cfg, "wf-train-x-worker-0", labels, container, ("PaddleJob", "wf-train-x"))


def _ports_of(
    cfg: PipelineConfig, pod: str, labels: dict[str, str], container: dict[str, Any], owner: tuple[str, str]
) -> list[Container]:
    """One scrape candidate per declared port of `container` in pod `pod`, owned by `owner` (kind, name)."""
    return [
        Container(pod, cfg.cluster.namespace, labels, container["name"], p["name"], p["containerPort"], *owner)
        for p in container.get("ports", [])
    ]


def serving_containers(cfg: PipelineConfig) -> list[Container]:
    """A Serverless predictor pod: KServe's labels (predictor.go buildObjectMeta), Knative's revision
    label and queue-proxy's ports beside the model server's."""
    region = next(iter(__import__("paddle_mlops_core.config.loader", fromlist=["x"]).load_regions().values()))
    body = isvc.build_inference_service(cfg, region, "s3://m/1", "img", "7")
    name = body["metadata"]["name"]
    labels = {
        **body["metadata"]["labels"],
        "serving.kserve.io/inferenceservice": name,
        "component": "predictor",
        "serving.knative.dev/revision": f"{name}-predictor-00001",
    }
    (c,) = body["spec"]["predictor"]["containers"]
    pod = f"{name}-predictor-00001-deployment-abc"
    ns = cfg.cluster.namespace
    return [
        Container(pod, ns, labels, c["name"], "user-port", c["ports"][0]["containerPort"]),
        Container(pod, ns, labels, "queue-proxy", "http-queueadm", 8022),
        Container(pod, ns, labels, "queue-proxy", "http-usermetric", 9091),
    ]


def argo_containers() -> list[Container]:
    # argo-workflows manifests/base/workflow-controller/workflow-controller-deployment.yaml
    labels = {"app": "workflow-controller"}
    return [
        Container("workflow-controller-0", CONTROLLER_NAMESPACE, labels, "workflow-controller", "metrics", 9090),
        Container("workflow-controller-0", CONTROLLER_NAMESPACE, labels, "workflow-controller", "", 6060),
    ]


def _series(name: str, labels: list[str], histogram: bool) -> dict[str, dict[str, Any]]:
    exposed = dict.fromkeys(labels, FREE)
    if not histogram:
        return {name: exposed}
    return {name + "_bucket": {**exposed, "le": FREE}, name + "_sum": exposed, name + "_count": exposed}


@dataclass
class Source:
    """One exporter: its series (name -> exposed labels), the targets it is scraped as, honor_labels."""

    series: dict[str, dict[str, Any]]
    targets: list[dict[str, Any]]
    honor: bool


@dataclass
class Store:
    """What Prometheus stores: metric name -> the label sets of its series."""

    series: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, source: Source) -> None:
        for target in source.targets:
            self.series.setdefault("up", []).append(dict(target))
            for name, exposed in source.series.items():
                self.series.setdefault(name, []).append(merge(exposed, target, source.honor))


def _monitor(monitoring: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(d for d in monitoring if d["metadata"]["name"] == name)


def store_for(monitoring: list[dict[str, Any]], cfg: PipelineConfig, dcgm_honor: bool) -> Store:
    """Every series an alert may name, as stored, for these monitors."""
    store = Store()
    trainer = {}
    for family in TrainingMetrics(gpu=True).registry.collect():
        trainer |= _series(family.name, [], family.type == "histogram")
    train_monitor = _monitor(monitoring, "paddle-mlops-training")
    store.add(Source(trainer, pod_monitor_targets(train_monitor, training_containers(cfg)), _honor(train_monitor)))

    serving = {}
    for metric in declared_metrics("steps.runtime.serving.model_server"):
        serving |= _series(metric.name, list(metric.labels), metric.kind == "histogram")
    serve_monitor = _monitor(monitoring, "paddle-mlops-serving")
    store.add(Source(serving, pod_monitor_targets(serve_monitor, serving_containers(cfg)), _honor(serve_monitor)))

    argo = {
        "argo_workflows_total_count": {"phase": FREE, "namespace": FREE},
        "argo_workflows_gauge": {"phase": FREE},
        "argo_workflows_pods_gauge": {"phase": FREE},
        "argo_workflows_error_count": {"cause": FREE},
    }
    for template in ("train", "evaluate", "validate", "rollout"):
        for metric in argo_metrics.argo_template_metrics(template)["prometheus"]:
            argo[argo_metrics.exported(metric["name"])] = {label["key"]: FREE for label in metric.get("labels", [])}
    argo_monitor = _monitor(monitoring, "argo-workflow-controller")
    if argo_monitor["kind"] == "ServiceMonitor":
        endpoint = argo_monitor["spec"]["endpoints"][0]
        targets = [{"namespace": CONTROLLER_NAMESPACE, "pod": FREE, "container": FREE,
                    "service": "workflow-controller-metrics", "job": "workflow-controller-metrics",
                    "endpoint": "metrics", "instance": FREE}]  # fmt: skip
    else:
        endpoint = argo_monitor["spec"]["podMetricsEndpoints"][0]
        targets = pod_monitor_targets(argo_monitor, argo_containers())
    store.add(Source(argo, targets, bool(endpoint.get("honorLabels"))))

    def service_target(ns: str, job: str) -> dict[str, Any]:
        return {
            "namespace": ns,
            "pod": FREE,
            "container": FREE,
            "service": job,
            "job": job,
            "endpoint": "http",
            "instance": FREE,
        }

    pod = {"namespace": FREE, "pod": FREE, "uid": FREE}
    ksm = {
        "kube_pod_owner": {**pod, "owner_kind": FREE, "owner_name": FREE, "owner_is_controller": FREE},
        "kube_pod_status_phase": {**pod, "phase": FREE},
        "kube_pod_container_status_restarts_total": {**pod, "container": FREE},
    }
    store.add(Source(ksm, [service_target("monitoring", "kube-state-metrics")], honor=True))
    gpu = {"gpu": FREE, "UUID": FREE, "device": FREE, "modelName": FREE, "Hostname": FREE,
           "pod": FREE, "namespace": FREE, "container": FREE}  # fmt: skip
    dcgm = dict.fromkeys(EXTERNAL_METRICS["dcgm-exporter"], gpu)
    store.add(Source(dcgm, [service_target("gpu-operator", "nvidia-dcgm-exporter")], honor=dcgm_honor))
    return store


def _honor(monitor: dict[str, Any]) -> bool:
    return bool(monitor["spec"]["podMetricsEndpoints"][0].get("honorLabels"))


# ------------------------------------------------------------------ alert matchers against the store

_LABEL_REPLACE = re.compile(
    r'label_replace\(\s*(?P<inner>[A-Za-z_:][\w:]*(?:\{[^}]*\})?|__lr\d+)\s*,\s*"(?P<dst>\w+)"\s*,\s*"\$1"\s*,'
    r'\s*"(?P<src>\w+)"\s*,\s*"\(\.\+\)"\s*\)'
)
_GROUPING = re.compile(r"\b(by|on|group_left|group_right)\s*\(([^)]*)\)")


def _matches(labels: dict[str, Any], matchers: list[tuple[str, str, str]]) -> bool:
    for name, op, value in matchers:
        have = labels.get(name, "")
        if op in ("=", "=~") and not (value == "" and op == "="):
            if name not in labels:
                return False
            if have is not FREE and not re.fullmatch(value if op == "=~" else re.escape(value), have):
                return False
    return True


def alert_problems(expr: str, store: Store) -> list[str]:
    """Selectors that match no stored series; grouping labels no operand carries."""
    problems: list[str] = []
    sets: dict[str, list[dict[str, Any]]] = {}
    text = expr
    # label_replace(x, "dst", "$1", "src", "(.+)") copies src to dst where src has a value.
    while (m := _LABEL_REPLACE.search(text)) is not None:
        inner = m.group("inner")
        key = f"__lr{len(sets)}"
        base = sets[inner] if inner in sets else _select(inner, store, problems)
        sets[key] = [{**s, m.group("dst"): s[m.group("src")]} if s.get(m.group("src")) else s for s in base]
        text = text[: m.start()] + key + text[m.end() :]
    operands = list(sets.values())
    for m in SELECTOR.finditer(text):
        operands.append(_select(m.group(0), store, problems))
    for name in set(re.findall(r"\b([A-Za-z_:][A-Za-z0-9_:]*)\b(?![({\w])", SELECTOR.sub("", text))):
        if name in store.series:
            operands.append(store.series[name])
    for kind, names in _GROUPING.findall(text):
        for label in (n.strip() for n in names.split(",") if n.strip()):
            carriers = [any(label in s for s in op) for op in operands]
            need = all(carriers) if kind == "on" else any(carriers)
            if not need:
                problems.append(f"`{kind} ({label})`: not on {'every' if kind == 'on' else 'any'} operand")
    return problems


def _select(selector: str, store: Store, problems: list[str]) -> list[dict[str, Any]]:
    name, matchers = parse_selector(selector)
    chosen = [s for s in store.series.get(name, []) if _matches(s, matchers)]
    if not chosen:
        problems.append(f"{selector} matches no stored series (have: {_describe(store.series.get(name, []))})")
    return chosen


def _describe(series: list[dict[str, Any]]) -> str:
    return (
        "; ".join(", ".join(f"{k}={'*' if v is FREE else v}" for k, v in sorted(s.items())) for s in series[:2])
        or "none"
    )


@pytest.fixture(scope="module")
def cfg() -> PipelineConfig:
    return default_compile_config()


@pytest.mark.parametrize("dcgm_honor", [False, True], ids=["dcgm-chart-default", "dcgm-honorLabels"])
def test_every_alert_matches_stored_series(cfg: PipelineConfig, dcgm_honor: bool) -> None:
    monitoring = render_observability(cfg)["monitoring.yaml"]
    store = store_for(monitoring, cfg, dcgm_honor)
    for rule in alerts.alert_rules(cfg):
        assert alert_problems(rule["expr"], store) == [], rule["alert"]


def test_every_dashboard_query_matches_stored_series(cfg: PipelineConfig) -> None:
    rendered = render_observability(cfg)
    store = store_for(rendered["monitoring.yaml"], cfg, dcgm_honor=False)
    for dashboard in dashboards.dashboards(cfg):
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                assert alert_problems(target["expr"], store) == [], f"{dashboard['uid']}: {panel['title']}"


def test_the_check_catches_the_alerts_of_issue_15(cfg: PipelineConfig) -> None:
    """Before #15: the controller's `namespace` ended up in `exported_namespace`, and DCGM's pod in
    `exported_pod` (the chart scrapes without honorLabels)."""
    monitoring = render_observability(cfg)["monitoring.yaml"]
    argo = _monitor(monitoring, "argo-workflow-controller")
    argo["spec"]["podMetricsEndpoints"][0]["honorLabels"] = False
    store = store_for(monitoring, cfg, dcgm_honor=False)
    ns = cfg.cluster.namespace
    assert alert_problems(
        f'increase(argo_workflows_total_count{{namespace="{ns}", phase=~"Failed|Error"}}[1h]) > 0', store
    )
    assert alert_problems(
        f'(avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{{namespace="{ns}"}}) < 5) and on (namespace, pod) '
        f'kube_pod_owner{{namespace="{ns}", owner_kind="Job"}}',
        store,
    )


def test_monitors_keep_the_pods_they_are_for(cfg: PipelineConfig) -> None:
    """Each PodMonitor keeps exactly the metrics port of its pods, and the relabelled labels arrive."""
    monitoring = render_observability(cfg)["monitoring.yaml"]
    (train,) = pod_monitor_targets(_monitor(monitoring, "paddle-mlops-training"), training_containers(cfg))
    assert train["instance"].endswith(f":{cfg.training.metrics_port}") and train["train_job"] == "wf-train-x"
    (serve,) = pod_monitor_targets(_monitor(monitoring, "paddle-mlops-serving"), serving_containers(cfg))
    assert serve["instance"].endswith(f":{SERVING_PORT}")
    assert {"isvc", "revision", "component", "model_version", "region"} <= set(serve)
    (argo,) = pod_monitor_targets(_monitor(monitoring, "argo-workflow-controller"), argo_containers())
    assert argo["instance"].endswith(":9090")


def test_argo_metrics_port_is_the_controller_config_port() -> None:
    from pipelines.platform.argo_controller import METRICS_PORT

    # The monitor scrapes the controller's port named `metrics`, which Argo's manifests put on 9090.
    assert METRICS_PORT == 9090


# ------------------------------------------------------------------ counters born at 1

H = 3600.0


def _rules(cfg: PipelineConfig) -> dict[str, str]:
    return {r["alert"]: r["expr"] for r in alerts.alert_rules(cfg)}


def _cases(cfg: PipelineConfig) -> list[tuple[str, str, dict[str, str], dict[str, str]]]:
    """(alert, metric, labels of a series that must alert, labels of one that must not)."""
    ns = cfg.cluster.namespace
    return [
        ("PaddleMLOpsWorkflowFailed", "argo_workflows_total_count",
         {"namespace": ns, "phase": "Failed"}, {"namespace": ns, "phase": "Succeeded"}),
        ("PaddleMLOpsStepFailed", argo_metrics.exported(STEP_RESULT),
         {"step": "train", "status": "Failed"}, {"step": "train", "status": "Succeeded"}),
        ("PaddleMLOpsRolledBack", argo_metrics.exported(ROLLOUT_OUTCOME),
         {"outcome": "rolled-back"}, {"outcome": "promoted"}),
        ("PaddleMLOpsModelRefused", argo_metrics.exported(VALIDATION_VERDICT),
         {"verdict": "refused"}, {"verdict": "duplicate"}),
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(4))
def test_counter_alerts_fire_on_the_first_event(cfg: PipelineConfig, case: int) -> None:
    alert, metric, bad, good = _cases(cfg)[case]
    expr = _rules(cfg)[alert]
    now = 10 * H
    first = dict([counter(metric, now - 300, [], now, **bad)])
    assert Evaluator(first, now).run(expr), f"{alert} misses the first event"
    benign = dict([counter(metric, now - 300, [], now, **good)])
    assert not Evaluator(benign, now).run(expr)
    later = dict([counter(metric, now - 5 * H, [now - 600], now, **bad)])
    assert Evaluator(later, now).run(expr), f"{alert} misses a later event"
    quiet = dict([counter(metric, now - 8 * H, [], now, **bad)])
    assert not Evaluator(quiet, now).run(expr), f"{alert} fires with nothing new"
    window = 7 * H if alert in ("PaddleMLOpsRolledBack", "PaddleMLOpsModelRefused") else 2 * H
    old = dict([counter(metric, now - window, [], now, **bad)])
    assert not Evaluator(old, now).run(expr), f"{alert} keeps firing after its window"


def test_plain_increase_misses_a_counter_born_at_one() -> None:
    """The expression before #15: `increase()` needs two samples and sees 1 -> 1 as no change."""
    now = 10 * H
    series = dict([counter("c_total", now - 300, [], now, status="Failed")])
    assert not Evaluator(series, now).run('increase(c_total{status="Failed"}[1h]) > 0')
    assert Evaluator(series, now).run("(increase(c_total[1h]) > 0) or (c_total unless c_total offset 1h)")
