"""PromQL pieces the alerts and the dashboards share, and the metrics of other exporters they name.

Every metric a query names comes from one of: our exporters (steps/runtime/training/metrics.py,
steps/runtime/serving/model_server/metrics.py), our Argo custom metrics (argo_metrics.py), the Argo controller,
kube-state-metrics, the NVIDIA DCGM exporter, or Prometheus itself (`up`). `EXTERNAL_METRICS` lists
the outside ones with their source; tests/test_observability.py checks every query against these names.
"""

from __future__ import annotations

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import SERVING_REQUEST_LATENCY_SECONDS, SERVING_REQUESTS_TOTAL

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


def selector(metric: str, *matchers: str) -> str:
    """`metric{m1, m2}`: a selector without brace-escaping in every f-string."""
    return f"{metric}{{{', '.join(matchers)}}}"


def gpu(metric: str) -> str:
    """A DCGM metric with the GPU's workload in `namespace`/`pod`, whichever way it was scraped.

    dcgm-exporter labels a GPU's series with the pod using it as `pod`/`namespace`/`container`
    (internal/pkg/transformation/const.go). Its chart's ServiceMonitor defaults to honorLabels:
    false, which moves them to `exported_pod`/`exported_namespace` and puts the exporter's own pod
    in `pod`. label_replace copies the exported values back when present (`(.+)` needs a value).
    """
    inner = f'label_replace({metric}, "namespace", "$1", "exported_namespace", "(.+)")'
    return f'label_replace({inner}, "pod", "$1", "exported_pod", "(.+)")'


def training_pods(cfg: PipelineConfig) -> str:
    """kube-state-metrics' owner series of the training pods in the pipeline namespace (joins carry
    `owner_name`): a TrainJob's pods are owned by the Indexed Jobs of its JobSet (`<trainjob>-node-0`;
    no other Jobs run there), a legacy backend's by the PaddleJob."""
    owner = 'owner_kind="Job"' if cfg.training.backend == "trainjob" else 'owner_kind="PaddleJob"'
    return selector("kube_pod_owner", f'namespace="{cfg.cluster.namespace}"', owner)


def failed_workflows(ns: str) -> str:
    """The controller's counter of workflows in `ns` that ended Failed or Error."""
    return selector("argo_workflows_total_count", f'namespace="{ns}"', 'phase=~"Failed|Error"')


def serving_requests(ns: str, *matchers: str) -> str:
    return selector(SERVING_REQUESTS_TOTAL, f'namespace="{ns}"', *matchers)


def serving_error_rate(ns: str) -> str:
    """Share of requests answered 5xx over 5 minutes, per InferenceService revision (canary vs stable)."""
    errors, requests = serving_requests(ns, 'code=~"5.."'), serving_requests(ns)
    return f"sum by (isvc, revision) (rate({errors}[5m])) / sum by (isvc, revision) (rate({requests}[5m]))"


def serving_latency_buckets(ns: str) -> str:
    return selector(f"{SERVING_REQUEST_LATENCY_SECONDS}_bucket", f'namespace="{ns}"')


def serving_p99_latency(ns: str) -> str:
    """p99 request latency in seconds over 5 minutes, per InferenceService revision."""
    return f"histogram_quantile(0.99, sum by (le, isvc, revision) (rate({serving_latency_buckets(ns)}[5m])))"
