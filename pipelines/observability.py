"""Monitoring for the pipeline: scrape targets, alerts, Grafana dashboards and Argo custom metrics.

`render_observability(cfg)` returns the documents of `argo/monitoring.yaml` (Prometheus Operator
PodMonitors and a PrometheusRule) and `argo/dashboards.yaml` (a ConfigMap the
Grafana sidecar loads). `argo_template_metrics(name)` is the `metrics` block of one Argo template.

Every metric a query names comes from one of: our exporters (steps/runtime/metrics.py,
steps/runtime/serving.py), the Argo custom metrics below, the Argo controller, kube-state-metrics,
the NVIDIA DCGM exporter, or Prometheus itself (`up`). `EXTERNAL_METRICS` lists the outside ones
with their source; tests/test_observability.py checks every query against these names, and
tests/test_upstream_prometheus.py checks every alert's label matchers against the labels each series
really carries after Prometheus merges in the target labels (`honorLabels`, `exported_` prefix).
"""

from __future__ import annotations

import json
from typing import Any

from paddle_mlops.config import PipelineConfig
from paddle_mlops.contracts import (
    GATE_PASSED,
    PART_OF,
    ROLLOUT_OUTCOME,
    SERVING_BATCH_SIZE,
    SERVING_ERRORS_TOTAL,
    SERVING_PORT,
    SERVING_REQUEST_LATENCY_SECONDS,
    SERVING_REQUESTS_TOTAL,
    STEP_DURATION,
    STEP_RESULT,
    TRAIN_DATALOADER_WAIT_SECONDS,
    TRAIN_EPOCH,
    TRAIN_GPU_MEMORY_BYTES,
    TRAIN_LOSS,
    TRAIN_SAMPLES_PER_SECOND,
    TRAIN_STEP,
)
from pipelines.platform.argo_controller import CONTROLLER_NAMESPACE, METRICS_PATH, METRICS_SECURE

MONITORING_API = "monitoring.coreos.com/v1"
# kube-prometheus-stack's Prometheus selects monitors and rules by its Helm release label.
PROMETHEUS_SELECTOR = {"release": "kube-prometheus-stack"}
TRAIN_METRICS_PORT_NAME = "metrics"  # the training container's named port for `training.metrics_port`
# Argo prepends this to every metric name, its own and custom ones alike, when it exports them
# (v4.1.2 workflow/controller/controller.go passes `argo_workflows` to util/telemetry
# prometheusMetricsExporter as the namespace; no `_total`/unit suffixes are added).
ARGO_CUSTOM_PREFIX = "argo_workflows_"
# The controller container's named metrics port (Argo's install manifests, 9090).
ARGO_METRICS_PORT_NAME = "metrics"

# Metrics exported by others, by source. Names are checked by the tests; keep the sources current.
EXTERNAL_METRICS: dict[str, tuple[str, ...]] = {
    # Prometheus itself, per scrape target.
    "prometheus": ("up",),
    # NVIDIA dcgm-exporter default counters (etc/default-counters.csv): GPU utilisation %, framebuffer MiB.
    "dcgm-exporter": ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"),
    # kube-state-metrics pod metrics (docs/metrics/workload/pod-metrics.md).
    "kube-state-metrics": (
        "kube_pod_status_phase",
        "kube_pod_owner",
        "kube_pod_container_status_restarts_total",
    ),
    # Argo Workflows controller (docs/metrics.md, 3.6+; exported with the argo_workflows_ prefix):
    # gauge{phase}, total_count{phase, namespace}, error_count{cause}, pods_gauge{phase}.
    "argo-workflows-controller": (
        "argo_workflows_gauge",
        "argo_workflows_total_count",
        "argo_workflows_error_count",
        "argo_workflows_pods_gauge",
    ),
}

# --------------------------------------------------------------------------- Argo custom metrics



def argo_template_metrics(template_name: str) -> dict[str, Any]:
    """Argo `metrics` for one template: duration and result of every step, plus the gate decision
    (evaluate) and the rollout outcome (rollout) from their output parameters.

    Labels carry the template name and status only: a workflow name would make one series per run.
    """
    step = {"key": "step", "value": template_name}
    metrics: list[dict[str, Any]] = [
        {
            "name": STEP_DURATION,
            "help": "Duration of the last run of a paddle-mlops pipeline step",
            "labels": [step],
            "gauge": {"value": "{{duration}}", "realtime": False},
        },
        {
            "name": STEP_RESULT,
            "help": "paddle-mlops pipeline step runs by final status",
            "labels": [step, {"key": "status", "value": "{{status}}"}],
            "counter": {"value": "1"},
        },
    ]
    if template_name == "evaluate":
        for value, passed in (("1", "true"), ("0", "false")):
            metrics.append(
                {
                    "name": GATE_PASSED,
                    "help": "1 if the last evaluation passed the gate, else 0",
                    "when": f"{{{{status}}}} == Succeeded && {{{{outputs.parameters.gate-passed}}}} == {passed}",
                    "gauge": {"value": value, "realtime": False},
                }
            )
    if template_name == "rollout":
        # A rolled-back rollout exits 3 (status Failed) but still writes its outcome file, which
        # Argo saves either way; so the condition reads the outcome, not the status.
        for outcome in ("promoted", "rolled-back"):
            metrics.append(
                {
                    "name": ROLLOUT_OUTCOME,
                    "help": "Rollouts by outcome (promoted or rolled-back)",
                    "labels": [{"key": "outcome", "value": outcome}],
                    # Quoted: govaluate would read a bare `rolled-back` as a subtraction.
                    "when": f"'{{{{outputs.parameters.outcome}}}}' == '{outcome}'",
                    "counter": {"value": "1"},
                }
            )
    return {"prometheus": metrics}


def argo_exported_names() -> set[str]:
    """Names under which Prometheus sees our Argo custom metrics (with Argo's prefix)."""
    names = {m["name"] for t in ("any", "evaluate", "rollout") for m in argo_template_metrics(t)["prometheus"]}
    return {ARGO_CUSTOM_PREFIX + n for n in names}


def _argo(name: str) -> str:
    return ARGO_CUSTOM_PREFIX + name


# --------------------------------------------------------------------------- scrape targets


def _monitor_metadata(cfg: PipelineConfig, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": cfg.cluster.namespace, "labels": {**PART_OF, **PROMETHEUS_SELECTOR}}


def _label_from(pod_label: str, target: str) -> dict[str, Any]:
    # Prometheus' Kubernetes SD sanitises pod label keys into __meta_kubernetes_pod_label_<key>.
    key = "".join(c if c.isalnum() else "_" for c in pod_label)
    return {"sourceLabels": [f"__meta_kubernetes_pod_label_{key}"], "targetLabel": target, "action": "replace"}


def training_pod_monitor(cfg: PipelineConfig) -> dict[str, Any]:
    """Rank 0 of every PaddleJob (either operator): pods whose controlling owner is a PaddleJob.

    honorLabels stays false: the trainer exports no label that a target label would overwrite.
    """
    return {
        "apiVersion": MONITORING_API,
        "kind": "PodMonitor",
        "metadata": _monitor_metadata(cfg, "paddle-mlops-training"),
        "spec": {
            "selector": {"matchLabels": dict(PART_OF)},
            "namespaceSelector": {"matchNames": [cfg.cluster.namespace]},
            "podMetricsEndpoints": [
                {
                    "port": TRAIN_METRICS_PORT_NAME,
                    "path": "/metrics",
                    "interval": "15s",
                    "relabelings": [
                        {
                            "sourceLabels": ["__meta_kubernetes_pod_controller_kind"],
                            "regex": "PaddleJob",
                            "action": "keep",
                        },
                        # The job is named `<workflow>-train-<suffix>`, so it names the run too.
                        {
                            "sourceLabels": ["__meta_kubernetes_pod_controller_name"],
                            "targetLabel": "paddlejob",
                            "action": "replace",
                        },
                    ],
                }
            ],
        },
    }


def serving_pod_monitor(cfg: PipelineConfig) -> dict[str, Any]:
    """The model server container of every InferenceService pod, stable and canary alike.

    Knative renames the user port to `user-port` while RawDeployment keeps `http1`, so the target
    is chosen by port number; queue-proxy's own ports are dropped the same way. honorLabels stays
    false: the model server exports no label that a target label would overwrite.
    """
    return {
        "apiVersion": MONITORING_API,
        "kind": "PodMonitor",
        "metadata": _monitor_metadata(cfg, "paddle-mlops-serving"),
        "spec": {
            "selector": {
                "matchLabels": dict(PART_OF),
                "matchExpressions": [{"key": "serving.kserve.io/inferenceservice", "operator": "Exists"}],
            },
            "namespaceSelector": {"matchNames": [cfg.cluster.namespace]},
            "podMetricsEndpoints": [
                {
                    "path": "/metrics",
                    "interval": "15s",
                    "relabelings": [
                        {
                            "sourceLabels": ["__meta_kubernetes_pod_container_port_number"],
                            "regex": str(SERVING_PORT),
                            "action": "keep",
                        },
                        _label_from("serving.kserve.io/inferenceservice", "isvc"),
                        _label_from("serving.knative.dev/revision", "revision"),
                        _label_from("component", "component"),
                        _label_from("paddle-mlops/model-version", "model_version"),
                        _label_from("paddle-mlops/region", "region"),
                    ],
                }
            ],
        },
    }


def argo_controller_monitor(cfg: PipelineConfig) -> dict[str, Any]:
    """Argo's controller metrics, scraped from the controller pods themselves.

    A PodMonitor, not a ServiceMonitor: Argo installs no metrics Service (docs/telemetry-configuration.md,
    "A metrics service is not installed"). honorLabels: `total_count` carries the workflow's own
    `namespace`, which the target's `namespace` (argo) would otherwise push to `exported_namespace`.
    The scheme follows the controller ConfigMap we ship: TLS with a self-signed certificate when
    `metricsConfig.secure` (the default since 3.6, controller.go `GetSecure(true)`).
    """
    endpoint: dict[str, Any] = {
        "port": ARGO_METRICS_PORT_NAME,
        "path": METRICS_PATH,
        "honorLabels": True,
        "scheme": "https" if METRICS_SECURE else "http",
    }
    if METRICS_SECURE:
        endpoint["tlsConfig"] = {"insecureSkipVerify": True}
    return {
        "apiVersion": MONITORING_API,
        "kind": "PodMonitor",
        "metadata": _monitor_metadata(cfg, "argo-workflow-controller"),
        "spec": {
            "selector": {"matchLabels": {"app": "workflow-controller"}},
            "namespaceSelector": {"matchNames": [CONTROLLER_NAMESPACE]},
            "podMetricsEndpoints": [endpoint],
        },
    }


# --------------------------------------------------------------------------- alerts

# A minimal schema of PrometheusRule.spec (prometheus-operator CRD), strict where we write.
PROMETHEUS_RULE_SPEC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["groups"],
    "additionalProperties": False,
    "properties": {
        "groups": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "rules"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                    "rules": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["alert", "expr"],
                            "additionalProperties": False,
                            "properties": {
                                "alert": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9_]*$"},
                                "expr": {"type": "string", "minLength": 1},
                                "for": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h|d)$"},
                                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                            },
                        },
                    },
                },
            },
        }
    },
}


def _sel(metric: str, *matchers: str) -> str:
    """`metric{m1, m2}`: a selector without brace-escaping in every f-string."""
    return f"{metric}{{{', '.join(matchers)}}}"


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, "team": "paddle-mlops"},
        "annotations": {"summary": summary, "description": description},
    }


def _gpu(metric: str) -> str:
    """A DCGM metric with the GPU's workload in `namespace`/`pod`, whichever way it was scraped.

    dcgm-exporter labels a GPU's series with the pod using it as `pod`/`namespace`/`container`
    (internal/pkg/transformation/const.go). Its chart's ServiceMonitor defaults to honorLabels:
    false, which moves them to `exported_pod`/`exported_namespace` and puts the exporter's own pod
    in `pod`. label_replace copies the exported values back when present (`(.+)` needs a value).
    """
    inner = f'label_replace({metric}, "namespace", "$1", "exported_namespace", "(.+)")'
    return f'label_replace({inner}, "pod", "$1", "exported_pod", "(.+)")'


def _counted_in(counter: str, window: str) -> str:
    """Series of `counter` that counted at least once within `window`.

    Argo's counters (custom and `total_count`) are created at their first increment, so the first
    sample Prometheus ever sees is already 1 and `increase()` has nothing to compare it with: the
    right-hand side catches a series that did not exist `window` ago.
    """
    return f"(increase({counter}[{window}]) > 0) or ({counter} unless {counter} offset {window})"


def _pending_pods_of_paddlejobs(ns: str) -> str:
    return (
        f'(kube_pod_status_phase{{namespace="{ns}", phase="Pending"}} == 1)'
        f' * on (namespace, pod) group_left (owner_name) kube_pod_owner{{namespace="{ns}", owner_kind="PaddleJob"}}'
    )


def alert_rules(cfg: PipelineConfig) -> list[dict[str, Any]]:
    ns = cfg.cluster.namespace
    serving = cfg.serving
    paddlejob_pods = f'kube_pod_owner{{namespace="{ns}", owner_kind="PaddleJob"}}'
    requests = _sel(SERVING_REQUESTS_TOTAL, f'namespace="{ns}"')
    errors = _sel(SERVING_REQUESTS_TOTAL, f'namespace="{ns}"', 'code=~"5.."')
    return [
        _alert(
            "PaddleJobGPUIdle",
            f"(avg by (namespace, pod) ({_gpu('DCGM_FI_DEV_GPU_UTIL')}) < 5)"
            f" and on (namespace, pod) {paddlejob_pods}"
            f' and on (namespace, pod) (kube_pod_status_phase{{namespace="{ns}", phase="Running"}} == 1)',
            "15m",
            "warning",
            "GPU idle in a running PaddleJob pod",
            "{{ $labels.pod }} holds a GPU below 5% utilisation for 15 minutes: a stalled data loader, a "
            "hung collective, or a job waiting on peers. Check the pod log and " + TRAIN_DATALOADER_WAIT_SECONDS + ".",
        ),
        _alert(
            "PaddleJobPendingTooLong",
            _pending_pods_of_paddlejobs(ns),
            f"{cfg.training.paddlejob.schedule_timeout_seconds}s",
            "warning",
            "PaddleJob pod not scheduled within training.paddlejob.schedule_timeout_seconds",
            "{{ $labels.pod }} of PaddleJob {{ $labels.owner_name }} is Pending: no node with free GPUs, "
            "quota exhausted, or a node selector that matches nothing. kubectl describe pod shows why.",
        ),
        _alert(
            "PaddleMLOpsPodRestarting",
            f'increase(kube_pod_container_status_restarts_total{{namespace="{ns}"}}[30m]) > 2',
            "0m",
            "warning",
            "Pod restarting repeatedly",
            "{{ $labels.pod }}/{{ $labels.container }} restarted more than twice in 30 minutes (OOM, crash loop).",
        ),
        _alert(
            "PaddleMLOpsWorkflowFailed",
            _counted_in(f'argo_workflows_total_count{{namespace="{ns}", phase=~"Failed|Error"}}', "1h"),
            "0m",
            "critical",
            "Argo workflow failed",
            "A workflow in {{ $labels.namespace }} ended {{ $labels.phase }} in the last hour; see `argo list`.",
        ),
        _alert(
            "PaddleMLOpsStepFailed",
            _counted_in(_sel(_argo(STEP_RESULT), 'status=~"Failed|Error"'), "1h"),
            "0m",
            "warning",
            "Pipeline step failed",
            "Step {{ $labels.step }} ended {{ $labels.status }} in the last hour.",
        ),
        _alert(
            "PaddleMLOpsRolledBack",
            _counted_in(_sel(_argo(ROLLOUT_OUTCOME), 'outcome="rolled-back"'), "6h"),
            "0m",
            "warning",
            "Canary rolled back",
            "A rollout failed its canary checks and was rolled back; the previous model still serves.",
        ),
        _alert(
            "ModelServingErrorRateHigh",
            f"sum by (isvc, revision) (rate({errors}[5m])) / sum by (isvc, revision) (rate({requests}[5m]))"
            f" > {serving.max_error_rate}",
            "5m",
            "critical",
            "Model server error rate above serving.max_error_rate",
            f"{{{{ $labels.isvc }}}} revision {{{{ $labels.revision }}}} fails more than {serving.max_error_rate:.1%} of requests.",
        ),
        _alert(
            "ModelServingLatencyP99High",
            "histogram_quantile(0.99, sum by (le, isvc, revision) "
            f'(rate({SERVING_REQUEST_LATENCY_SECONDS}_bucket{{namespace="{ns}"}}[5m])))'
            f" > {serving.max_p99_latency_ms / 1000:g}",
            "5m",
            "warning",
            "Model server p99 latency above serving.max_p99_latency_ms",
            f"{{{{ $labels.isvc }}}} revision {{{{ $labels.revision }}}} p99 latency exceeds {serving.max_p99_latency_ms:g} ms.",
        ),
        _alert(
            "ModelServerDown",
            f'up{{namespace="{ns}", job="{ns}/paddle-mlops-serving"}} == 0',
            "2m",
            "critical",
            "Model server not answering scrapes",
            "{{ $labels.pod }} ({{ $labels.isvc }}) has not answered /metrics for 2 minutes.",
        ),
    ]


def prometheus_rule(cfg: PipelineConfig) -> dict[str, Any]:
    return {
        "apiVersion": MONITORING_API,
        "kind": "PrometheusRule",
        "metadata": _monitor_metadata(cfg, "paddle-mlops-alerts"),
        "spec": {"groups": [{"name": "paddle-mlops", "interval": "1m", "rules": alert_rules(cfg)}]},
    }


# --------------------------------------------------------------------------- dashboards

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _panel(
    title: str, targets: list[tuple[str, str]], unit: str, slot: int, kind: str = "timeseries"
) -> dict[str, Any]:
    """One panel; `slot` places it on a two-column grid, 8 units high."""
    return {
        "id": slot + 1,
        "type": kind,
        "title": title,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": (slot % 2) * 12, "y": (slot // 2) * 8},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def _dashboard(uid: str, title: str, panels: list[tuple[str, list[tuple[str, str]], str]]) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "tags": ["paddle-mlops"],
        "timezone": "browser",
        "schemaVersion": 39,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [{"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source"}]
        },
        "panels": [_panel(t, targets, unit, i) for i, (t, targets, unit) in enumerate(panels)],
    }


def training_dashboard(cfg: PipelineConfig) -> dict[str, Any]:
    ns = cfg.cluster.namespace
    owned = f'kube_pod_owner{{namespace="{ns}", owner_kind="PaddleJob"}}'
    return _dashboard(
        "paddle-mlops-training",
        "paddle-mlops / Training",
        [
            ("GPU utilisation per PaddleJob",
             [(f"avg by (owner_name) ({_gpu('DCGM_FI_DEV_GPU_UTIL')} * on (namespace, pod) group_left (owner_name) {owned})", "{{owner_name}}")],
             "percent"),
            ("GPU memory used per PaddleJob",
             [(f"sum by (owner_name) ({_gpu('DCGM_FI_DEV_FB_USED')} * on (namespace, pod) group_left (owner_name) {owned})", "{{owner_name}}")],
             "decmbytes"),
            ("Training throughput (rank 0)",
             [(f"sum by (paddlejob) ({TRAIN_SAMPLES_PER_SECOND})", "{{paddlejob}}")], "short"),
            ("Training loss", [(TRAIN_LOSS, "{{paddlejob}}")], "short"),
            ("Progress",
             [(TRAIN_STEP, "step {{paddlejob}}"), (TRAIN_EPOCH, "epoch {{paddlejob}}")],
             "short"),
            ("Data loader wait p90",
             [(f"histogram_quantile(0.9, sum by (le, paddlejob) (rate({TRAIN_DATALOADER_WAIT_SECONDS}_bucket[5m])))",
               "{{paddlejob}}")],
             "s"),
            ("Trainer GPU memory (rank 0)", [(TRAIN_GPU_MEMORY_BYTES, "{{paddlejob}}")], "bytes"),
        ],
    )  # fmt: skip


def pipeline_dashboard(cfg: PipelineConfig) -> dict[str, Any]:
    ns = cfg.cluster.namespace
    return _dashboard(
        "paddle-mlops-pipeline",
        "paddle-mlops / Pipeline",
        [
            ("Step duration (last run)", [(f"max by (step) ({_argo(STEP_DURATION)})", "{{step}}")], "s"),
            ("Step results (1h)",
             [(f"sum by (step, status) (increase({_argo(STEP_RESULT)}[1h]))", "{{step}} {{status}}")], "short"),
            ("Workflows by phase", [("sum by (phase) (argo_workflows_gauge)", "{{phase}}")], "short"),
            ("Workflow failures (1h)",
             [(f'sum by (phase) (increase(argo_workflows_total_count{{namespace="{ns}", phase=~"Failed|Error"}}[1h]))',
               "{{phase}}")],
             "short"),
            ("Gate passed (last evaluation)", [(_argo(GATE_PASSED), "gate")], "short"),
            ("Rollouts by outcome (24h)",
             [(f"sum by (outcome) (increase({_argo(ROLLOUT_OUTCOME)}[24h]))", "{{outcome}}")], "short"),
            ("Workflow pods by phase", [("sum by (phase) (argo_workflows_pods_gauge)", "{{phase}}")], "short"),
        ],
    )  # fmt: skip


def serving_dashboard(cfg: PipelineConfig) -> dict[str, Any]:
    ns = cfg.cluster.namespace
    req = _sel(SERVING_REQUESTS_TOTAL, f'namespace="{ns}"')
    failed = _sel(SERVING_REQUESTS_TOTAL, f'namespace="{ns}"', 'code=~"5.."')
    lat = f'{SERVING_REQUEST_LATENCY_SECONDS}_bucket{{namespace="{ns}"}}'
    return _dashboard(
        "paddle-mlops-serving",
        "paddle-mlops / Serving",
        [
            ("Requests per second by revision (canary vs stable)",
             [(f"sum by (isvc, revision) (rate({req}[5m]))", "{{isvc}} {{revision}}")], "reqps"),
            ("Latency percentiles",
             [(f"histogram_quantile({q}, sum by (le) (rate({lat}[5m])))", f"p{int(q * 100)}") for q in (0.5, 0.9, 0.99)],
             "s"),
            ("p99 latency by revision (canary vs stable)",
             [(f"histogram_quantile(0.99, sum by (le, isvc, revision) (rate({lat}[5m])))", "{{isvc}} {{revision}}")], "s"),
            ("Error rate by revision",
             [(f"sum by (isvc, revision) (rate({failed}[5m])) / sum by (isvc, revision) (rate({req}[5m]))",
               "{{isvc}} {{revision}}")],
             "percentunit"),
            ("Errors by reason",
             [(f'sum by (reason) (rate({SERVING_ERRORS_TOTAL}{{namespace="{ns}"}}[5m]))', "{{reason}}")], "reqps"),
            ("Batch size p50 / p95",
             [(f'histogram_quantile({q}, sum by (le) (rate({SERVING_BATCH_SIZE}_bucket{{namespace="{ns}"}}[5m])))',
               f"p{int(q * 100)}") for q in (0.5, 0.95)],
             "short"),
            ("Model server pods up", [(f'sum by (isvc) (up{{job="{ns}/paddle-mlops-serving"}})', "{{isvc}}")], "short"),
        ],
    )  # fmt: skip


def dashboards(cfg: PipelineConfig) -> list[dict[str, Any]]:
    return [training_dashboard(cfg), pipeline_dashboard(cfg), serving_dashboard(cfg)]


def dashboards_configmap(cfg: PipelineConfig) -> dict[str, Any]:
    """The Grafana sidecar (kube-prometheus-stack) imports every ConfigMap labelled grafana_dashboard=1."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "paddle-mlops-dashboards",
            "namespace": cfg.cluster.namespace,
            "labels": {**PART_OF, "grafana_dashboard": "1"},
        },
        "data": {f"{d['uid']}.json": json.dumps(d, indent=2, sort_keys=True) for d in dashboards(cfg)},
    }


def render_observability(cfg: PipelineConfig) -> dict[str, list[dict[str, Any]]]:
    """File name under argo/ -> the Kubernetes documents it holds."""
    return {
        "monitoring.yaml": [
            training_pod_monitor(cfg),
            serving_pod_monitor(cfg),
            argo_controller_monitor(cfg),
            prometheus_rule(cfg),
        ],
        "dashboards.yaml": [dashboards_configmap(cfg)],
    }
