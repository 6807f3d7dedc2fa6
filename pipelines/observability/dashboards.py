"""Grafana dashboards for training, the pipeline and serving, shipped as one ConfigMap that the
Grafana sidecar of kube-prometheus-stack loads."""

from __future__ import annotations

import json
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import (
    GATE_PASSED,
    PART_OF,
    ROLLOUT_OUTCOME,
    SERVING_BATCH_SIZE,
    SERVING_ERRORS_TOTAL,
    STEP_DURATION,
    STEP_RESULT,
    TRAIN_DATALOADER_WAIT_SECONDS,
    TRAIN_EPOCH,
    TRAIN_GPU_MEMORY_BYTES,
    TRAIN_LOSS,
    TRAIN_SAMPLES_PER_SECOND,
    TRAIN_STEP,
    VALIDATION_VERDICT,
)
from pipelines.observability.argo_metrics import exported
from pipelines.observability.monitors import serving_job
from pipelines.observability.promql import (
    failed_workflows,
    gpu,
    serving_error_rate,
    serving_latency_buckets,
    serving_p99_latency,
    serving_requests,
    training_pods,
)

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# (title, [(query, legend), ...], unit) of one panel.
PanelSpec = tuple[str, list[tuple[str, str]], str]


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


def _dashboard(uid: str, title: str, panels: list[PanelSpec]) -> dict[str, Any]:
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
    owned = training_pods(cfg)
    return _dashboard(
        "paddle-mlops-training",
        "paddle-mlops / Training",
        [
            ("GPU utilisation per training job",
             [(
                 f"avg by (owner_name) ({gpu('DCGM_FI_DEV_GPU_UTIL')} * on (namespace, pod) group_left (owner_name) "
                 f"{owned})", "{{owner_name}}")],
             "percent"),
            ("GPU memory used per training job",
             [(
                 f"sum by (owner_name) ({gpu('DCGM_FI_DEV_FB_USED')} * on (namespace, pod) group_left (owner_name) "
                 f"{owned})", "{{owner_name}}")],
             "decmbytes"),
            ("Training throughput (rank 0)",
             [(f"sum by (train_job) ({TRAIN_SAMPLES_PER_SECOND})", "{{train_job}}")], "short"),
            ("Training loss", [(TRAIN_LOSS, "{{train_job}}")], "short"),
            ("Progress",
             [(TRAIN_STEP, "step {{train_job}}"), (TRAIN_EPOCH, "epoch {{train_job}}")],
             "short"),
            ("Data loader wait p90",
             [(f"histogram_quantile(0.9, sum by (le, train_job) (rate({TRAIN_DATALOADER_WAIT_SECONDS}_bucket[5m])))",
               "{{train_job}}")],
             "s"),
            ("Trainer GPU memory (rank 0)", [(TRAIN_GPU_MEMORY_BYTES, "{{train_job}}")], "bytes"),
        ],
    )  # fmt: skip


def pipeline_dashboard(cfg: PipelineConfig) -> dict[str, Any]:
    failed = failed_workflows(cfg.cluster.namespace)
    return _dashboard(
        "paddle-mlops-pipeline",
        "paddle-mlops / Pipeline",
        [
            ("Step duration (last run)", [(f"max by (step) ({exported(STEP_DURATION)})", "{{step}}")], "s"),
            ("Step results (1h)",
             [(f"sum by (step, status) (increase({exported(STEP_RESULT)}[1h]))", "{{step}} {{status}}")], "short"),
            ("Workflows by phase", [("sum by (phase) (argo_workflows_gauge)", "{{phase}}")], "short"),
            ("Workflow failures (1h)", [(f"sum by (phase) (increase({failed}[1h]))", "{{phase}}")], "short"),
            ("Gate passed (last evaluation)", [(exported(GATE_PASSED), "gate")], "short"),
            ("Published models by verdict (24h)",
             [(f"sum by (verdict) (increase({exported(VALIDATION_VERDICT)}[24h]))", "{{verdict}}")], "short"),
            ("Rollouts by outcome (24h)",
             [(f"sum by (outcome) (increase({exported(ROLLOUT_OUTCOME)}[24h]))", "{{outcome}}")], "short"),
            ("Workflow pods by phase", [("sum by (phase) (argo_workflows_pods_gauge)", "{{phase}}")], "short"),
        ],
    )  # fmt: skip


def serving_dashboard(cfg: PipelineConfig) -> dict[str, Any]:
    ns = cfg.cluster.namespace
    lat = serving_latency_buckets(ns)
    return _dashboard(
        "paddle-mlops-serving",
        "paddle-mlops / Serving",
        [
            ("Requests per second by revision (canary vs stable)",
             [(f"sum by (isvc, revision) (rate({serving_requests(ns)}[5m]))", "{{isvc}} {{revision}}")], "reqps"),
            ("Latency percentiles",
             [(f"histogram_quantile({q}, sum by (le) (rate({lat}[5m])))", f"p{int(q * 100)}")
              for q in (0.5, 0.9, 0.99)],
             "s"),
            ("p99 latency by revision (canary vs stable)", [(serving_p99_latency(ns), "{{isvc}} {{revision}}")], "s"),
            ("Error rate by revision", [(serving_error_rate(ns), "{{isvc}} {{revision}}")], "percentunit"),
            ("Errors by reason",
             [(f'sum by (reason) (rate({SERVING_ERRORS_TOTAL}{{namespace="{ns}"}}[5m]))', "{{reason}}")], "reqps"),
            ("Batch size p50 / p95",
             [(f'histogram_quantile({q}, sum by (le) (rate({SERVING_BATCH_SIZE}_bucket{{namespace="{ns}"}}[5m])))',
               f"p{int(q * 100)}") for q in (0.5, 0.95)],
             "short"),
            ("Model server pods up", [(f'sum by (isvc) (up{{job="{serving_job(ns)}"}})', "{{isvc}}")], "short"),
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
