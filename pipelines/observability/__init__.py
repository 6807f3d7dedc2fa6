"""Monitoring for the pipeline: scrape targets, alerts, Grafana dashboards and Argo custom metrics.

`render_observability(cfg)` returns the documents of `argo/monitoring.yaml` (Prometheus Operator
PodMonitors and a PrometheusRule) and `argo/dashboards.yaml` (a ConfigMap the Grafana sidecar
loads); `argo_template_metrics(name)` is the `metrics` block of one Argo template.

Modules: `argo_metrics` (Argo custom metrics), `monitors` (PodMonitors), `promql` (query pieces and
the outside metrics they name), `alerts` (the PrometheusRule),
`dashboards` (Grafana). tests/test_observability.py checks every query against the names something
exports, and tests/test_upstream_prometheus.py checks every alert's label matchers against the labels
each series really carries after Prometheus merges in the target labels (`honorLabels`, `exported_` prefix).
"""

from __future__ import annotations

from typing import Any

from paddle_mlops_core.config import PipelineConfig
from pipelines.observability.alerts import prometheus_rule
from pipelines.observability.argo_metrics import argo_template_metrics
from pipelines.observability.dashboards import dashboards_configmap
from pipelines.observability.monitors import pod_monitors

__all__ = ["argo_template_metrics", "render_observability"]


def render_observability(cfg: PipelineConfig) -> dict[str, list[dict[str, Any]]]:
    """File name under argo/ -> the Kubernetes documents it holds."""
    return {
        "monitoring.yaml": [*pod_monitors(cfg), prometheus_rule(cfg)],
        "dashboards.yaml": [dashboards_configmap(cfg)],
    }
