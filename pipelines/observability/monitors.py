"""Scrape targets: Prometheus Operator PodMonitors for the trainer, the model server and the Argo
controller, and the metadata every monitoring object shares."""

from __future__ import annotations

from typing import Any

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import PART_OF, REGION_OBJECT_LABEL, SERVING_PORT
from pipelines.platform.argo_controller import CONTROLLER_NAMESPACE, METRICS_PATH, METRICS_SECURE

MONITORING_API = "monitoring.coreos.com/v1"
# kube-prometheus-stack's Prometheus selects monitors and rules by its Helm release label.
PROMETHEUS_SELECTOR = {"release": "kube-prometheus-stack"}
TRAIN_METRICS_PORT_NAME = "metrics"  # the training container's named port for `training.metrics_port`
# The controller container's named metrics port (Argo's install manifests, 9090).
ARGO_METRICS_PORT_NAME = "metrics"
TRAINING_MONITOR = "paddle-mlops-training"
SERVING_MONITOR = "paddle-mlops-serving"
ARGO_MONITOR = "argo-workflow-controller"


def monitoring_metadata(cfg: PipelineConfig, name: str) -> dict[str, Any]:
    """Metadata of a monitor or rule: in the pipeline namespace, labelled for our Prometheus."""
    return {"name": name, "namespace": cfg.cluster.namespace, "labels": {**PART_OF, **PROMETHEUS_SELECTOR}}


def serving_job(ns: str) -> str:
    """The `job` label of the model server's series: prometheus-operator names it `<namespace>/<monitor>`."""
    return f"{ns}/{SERVING_MONITOR}"


def _label_from(pod_label: str, target: str) -> dict[str, Any]:
    # Prometheus' Kubernetes SD sanitises pod label keys into __meta_kubernetes_pod_label_<key>.
    key = "".join(c if c.isalnum() else "_" for c in pod_label)
    return {"sourceLabels": [f"__meta_kubernetes_pod_label_{key}"], "targetLabel": target, "action": "replace"}


def _pod_monitor(
    cfg: PipelineConfig, name: str, selector: dict[str, Any], namespace: str, endpoint: dict[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": MONITORING_API,
        "kind": "PodMonitor",
        "metadata": monitoring_metadata(cfg, name),
        "spec": {
            "selector": selector,
            "namespaceSelector": {"matchNames": [namespace]},
            "podMetricsEndpoints": [endpoint],
        },
    }


def training_pod_monitor(cfg: PipelineConfig) -> dict[str, Any]:
    """Rank 0 of every training job, labelled `train_job` with the job's name: a TrainJob's pods carry
    the JobSet name label (jobset v0.12.0 labelAndAnnotateObject; the JobSet is named after the
    TrainJob), a PaddleJob's pods have the PaddleJob as controlling owner.

    honorLabels stays false: the trainer exports no label that a target label would overwrite.
    """
    if cfg.training.backend == "trainjob":
        source = "__meta_kubernetes_pod_label_jobset_sigs_k8s_io_jobset_name"
        keep = {"sourceLabels": [source], "regex": ".+", "action": "keep"}
    else:
        source = "__meta_kubernetes_pod_controller_name"
        keep = {"sourceLabels": ["__meta_kubernetes_pod_controller_kind"], "regex": "PaddleJob", "action": "keep"}
    endpoint = {
        "port": TRAIN_METRICS_PORT_NAME,
        "path": "/metrics",
        "interval": "15s",
        "relabelings": [
            keep,
            # The job is named `<workflow>-train-<suffix>`, so it names the run too.
            {"sourceLabels": [source], "targetLabel": "train_job", "action": "replace"},
        ],
    }
    return _pod_monitor(cfg, TRAINING_MONITOR, {"matchLabels": dict(PART_OF)}, cfg.cluster.namespace, endpoint)


def serving_pod_monitor(cfg: PipelineConfig) -> dict[str, Any]:
    """The model server container of every InferenceService pod, stable and canary alike.

    Knative renames the user port to `user-port` while RawDeployment keeps `http1`, so the target
    is chosen by port number; queue-proxy's own ports are dropped the same way. honorLabels stays
    false: the model server exports no label that a target label would overwrite.
    """
    selector = {
        "matchLabels": dict(PART_OF),
        "matchExpressions": [{"key": "serving.kserve.io/inferenceservice", "operator": "Exists"}],
    }
    endpoint = {
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
            _label_from(REGION_OBJECT_LABEL, "region"),
        ],
    }
    return _pod_monitor(cfg, SERVING_MONITOR, selector, cfg.cluster.namespace, endpoint)


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
    selector = {"matchLabels": {"app": "workflow-controller"}}
    return _pod_monitor(cfg, ARGO_MONITOR, selector, CONTROLLER_NAMESPACE, endpoint)


def pod_monitors(cfg: PipelineConfig) -> list[dict[str, Any]]:
    return [training_pod_monitor(cfg), serving_pod_monitor(cfg), argo_controller_monitor(cfg)]
