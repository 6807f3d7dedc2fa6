"""Alert rules: training stalls, pipeline failures and model-server health, as one PrometheusRule.

Thresholds come from the configuration (`serving.max_error_rate`, `serving.max_p99_latency_ms`,
`training.job.schedule_timeout_seconds`); tests/test_upstream_prometheus.py checks every
alert's label matchers against the labels each series really carries once scraped.
"""

from __future__ import annotations

from typing import Any

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import ROLLOUT_OUTCOME, STEP_RESULT, TRAIN_DATALOADER_WAIT_SECONDS, VALIDATION_VERDICT
from pipelines.observability.argo_metrics import exported
from pipelines.observability.monitors import MONITORING_API, monitoring_metadata, serving_job
from pipelines.observability.promql import (
    failed_workflows,
    gpu,
    selector,
    serving_error_rate,
    serving_p99_latency,
    training_pods,
)


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, "team": "paddle-mlops"},
        "annotations": {"summary": summary, "description": description},
    }


def _counted_in(counter: str, window: str) -> str:
    """Series of `counter` that counted at least once within `window`.

    Argo's counters (custom and `total_count`) are created at their first increment, so the first
    sample Prometheus ever sees is already 1 and `increase()` has nothing to compare it with: the
    right-hand side catches a series that did not exist `window` ago.
    """
    return f"(increase({counter}[{window}]) > 0) or ({counter} unless {counter} offset {window})"


def _pods_in_phase(ns: str, phase: str) -> str:
    return f'(kube_pod_status_phase{{namespace="{ns}", phase="{phase}"}} == 1)'


def training_alerts(cfg: PipelineConfig) -> list[dict[str, Any]]:
    """Idle GPUs, unscheduled training pods and restarting pods in the pipeline namespace."""
    ns = cfg.cluster.namespace
    return [
        _alert(
            "TrainingJobGPUIdle",
            f"(avg by (namespace, pod) ({gpu('DCGM_FI_DEV_GPU_UTIL')}) < 5)"
            f" and on (namespace, pod) {training_pods(cfg)}"
            f" and on (namespace, pod) {_pods_in_phase(ns, 'Running')}",
            "15m",
            "warning",
            "GPU idle in a running training pod",
            "{{ $labels.pod }} holds a GPU below 5% utilisation for 15 minutes: a stalled data loader, a "
            "hung collective, or a job waiting on peers. Check the pod log and " + TRAIN_DATALOADER_WAIT_SECONDS + ".",
        ),
        _alert(
            "TrainingJobPendingTooLong",
            f"{_pods_in_phase(ns, 'Pending')} * on (namespace, pod) group_left (owner_name) {training_pods(cfg)}",
            f"{cfg.training.job.schedule_timeout_seconds}s",
            "warning",
            "Training pod not scheduled within training.job.schedule_timeout_seconds",
            "{{ $labels.pod }} of {{ $labels.owner_name }} is Pending after admission: no node with free GPUs, "
            "quota exhausted, or a node selector that matches nothing. kubectl describe pod shows why (a TrainJob "
            "still queued has no pods: kubectl get workloads shows its Kueue admission).",
        ),
        _alert(
            "PaddleMLOpsPodRestarting",
            f'increase(kube_pod_container_status_restarts_total{{namespace="{ns}"}}[30m]) > 2',
            "0m",
            "warning",
            "Pod restarting repeatedly",
            "{{ $labels.pod }}/{{ $labels.container }} restarted more than twice in 30 minutes (OOM, crash loop).",
        ),
    ]


def pipeline_alerts(cfg: PipelineConfig) -> list[dict[str, Any]]:
    """Failed workflows and steps, and canaries rolled back."""
    return [
        _alert(
            "PaddleMLOpsWorkflowFailed",
            _counted_in(failed_workflows(cfg.cluster.namespace), "1h"),
            "0m",
            "critical",
            "Argo workflow failed",
            "A workflow in {{ $labels.namespace }} ended {{ $labels.phase }} in the last hour; see `argo list`.",
        ),
        _alert(
            "PaddleMLOpsStepFailed",
            _counted_in(selector(exported(STEP_RESULT), 'status=~"Failed|Error"'), "1h"),
            "0m",
            "warning",
            "Pipeline step failed",
            "Step {{ $labels.step }} ended {{ $labels.status }} in the last hour.",
        ),
        _alert(
            "PaddleMLOpsRolledBack",
            _counted_in(selector(exported(ROLLOUT_OUTCOME), 'outcome="rolled-back"'), "6h"),
            "0m",
            "warning",
            "Canary rolled back",
            "A rollout failed its canary checks and was rolled back; the previous model still serves.",
        ),
        _alert(
            "PaddleMLOpsModelRefused",
            _counted_in(selector(exported(VALIDATION_VERDICT), 'verdict="refused"'), "6h"),
            "0m",
            "warning",
            "Published model refused by validation",
            "A published model failed validation (checksums, load, smoke or test-set gate) and was not served; "
            "its MLflow version carries validation.reason.",
        ),
    ]


def serving_alerts(cfg: PipelineConfig) -> list[dict[str, Any]]:
    """Model-server error rate and p99 latency above the configured limits, and servers down."""
    ns, serving = cfg.cluster.namespace, cfg.serving
    revision = "{{ $labels.isvc }} revision {{ $labels.revision }}"
    return [
        _alert(
            "ModelServingErrorRateHigh",
            f"{serving_error_rate(ns)} > {serving.max_error_rate}",
            "5m",
            "critical",
            "Model server error rate above serving.max_error_rate",
            f"{revision} fails more than {serving.max_error_rate:.1%} of requests.",
        ),
        _alert(
            "ModelServingLatencyP99High",
            f"{serving_p99_latency(ns)} > {serving.max_p99_latency_ms / 1000:g}",
            "5m",
            "warning",
            "Model server p99 latency above serving.max_p99_latency_ms",
            f"{revision} p99 latency exceeds {serving.max_p99_latency_ms:g} ms.",
        ),
        _alert(
            "ModelServerDown",
            f'up{{namespace="{ns}", job="{serving_job(ns)}"}} == 0',
            "2m",
            "critical",
            "Model server not answering scrapes",
            "{{ $labels.pod }} ({{ $labels.isvc }}) has not answered /metrics for 2 minutes.",
        ),
    ]


def alert_rules(cfg: PipelineConfig) -> list[dict[str, Any]]:
    return training_alerts(cfg) + pipeline_alerts(cfg) + serving_alerts(cfg)


def prometheus_rule(cfg: PipelineConfig) -> dict[str, Any]:
    return {
        "apiVersion": MONITORING_API,
        "kind": "PrometheusRule",
        "metadata": monitoring_metadata(cfg, "paddle-mlops-alerts"),
        "spec": {"groups": [{"name": "paddle-mlops", "interval": "1m", "rules": alert_rules(cfg)}]},
    }
