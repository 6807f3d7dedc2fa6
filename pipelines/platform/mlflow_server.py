"""The MLflow tracking server the steps log to (`mlflow.tracking_uri`): PostgreSQL metadata, artifacts
proxied to MinIO/S3, restricted pod, no credentials in the manifest.

The server reads every option from its environment (`mlflow server` maps each flag to an
`MLFLOW_*` variable), so the PostgreSQL URI (which holds a password) comes from a Secret without
appearing in the pod's arguments.
"""

from __future__ import annotations

from typing import Any

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import PART_OF
from pipelines.platform.meta import metadata, restricted_container_security_context, restricted_pod_security_context
from pipelines.platform.network import endpoint

NAME = "mlflow"
# Same MLflow version as the client pinned in uv.lock, so server and steps speak the same REST API;
# built from images/mlflow/Dockerfile, which adds the PostgreSQL driver, boto3 and the project's artifact repository
# (registry versions are read from their published copy: published-s3://...); the upstream image lacks the driver
# and boto3 (mlflow/mlflow#9513, #8342).
IMAGE_TAG = "3.17.2"
BACKEND_SECRET = {"name": "mlflow-backend", "key": "MLFLOW_BACKEND_STORE_URI"}
ARTIFACTS_DESTINATION = "s3://mlflow-artifacts"
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "tracking-server"}


def _secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _env(cfg: PipelineConfig, port: int) -> list[dict[str, Any]]:
    env = [
        _secret_env("MLFLOW_BACKEND_STORE_URI", BACKEND_SECRET["name"], BACKEND_SECRET["key"]),
        {"name": "MLFLOW_ARTIFACTS_DESTINATION", "value": ARTIFACTS_DESTINATION},
        _secret_env("AWS_ACCESS_KEY_ID", cfg.storage.credentials_secret, "AWS_ACCESS_KEY_ID"),
        _secret_env("AWS_SECRET_ACCESS_KEY", cfg.storage.credentials_secret, "AWS_SECRET_ACCESS_KEY"),
        {"name": "AWS_DEFAULT_REGION", "value": cfg.storage.region},
        {"name": "MLFLOW_HOST", "value": "0.0.0.0"},
        {"name": "MLFLOW_PORT", "value": str(port)},
        # MLflow 3 rejects Host headers it does not know (DNS-rebinding guard): allow the Service names
        # and both spellings of the loopback a `kubectl port-forward` user types.
        {
            "name": "MLFLOW_SERVER_ALLOWED_HOSTS",
            "value": (
                f"{NAME},{NAME}:{port},{NAME}.{cfg.cluster.namespace}.svc,{NAME}.{cfg.cluster.namespace}.svc:{port},"
                f"localhost:{port},127.0.0.1:{port}"
            ),
        },
        # The root filesystem is read-only; Python and gunicorn write only under /tmp.
        {"name": "HOME", "value": "/tmp"},
    ]
    if cfg.storage.endpoint_url:
        env.insert(2, {"name": "MLFLOW_S3_ENDPOINT_URL", "value": cfg.storage.endpoint_url})
    return env


def _port(cfg: PipelineConfig) -> int:
    tracking = endpoint(cfg.mlflow.tracking_uri, 5000)
    return tracking.port if tracking else 5000


def deployment(cfg: PipelineConfig) -> dict[str, Any]:
    port = _port(cfg)
    probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10, "timeoutSeconds": 5}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(NAME, cfg.cluster.namespace, labels=LABELS),
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": dict(LABELS)},
            "template": {
                "metadata": {"labels": {**PART_OF, **LABELS}},
                "spec": {
                    # The server talks to PostgreSQL and S3, never to the Kubernetes API.
                    "automountServiceAccountToken": False,
                    "securityContext": restricted_pod_security_context(),
                    "containers": [
                        {
                            "name": NAME,
                            "image": f"{cfg.images.registry}/mlflow:{IMAGE_TAG}",
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["mlflow", "server"],
                            # Artifacts are proxied (the steps need no S3 credentials to log models).
                            "args": ["--serve-artifacts", "--workers", "2"],
                            "env": _env(cfg, port),
                            "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
                            "resources": {
                                "requests": {"cpu": "250m", "memory": "512Mi"},
                                "limits": {"cpu": "2", "memory": "2Gi"},
                            },
                            "readinessProbe": {**probe, "initialDelaySeconds": 5},
                            "livenessProbe": {**probe, "initialDelaySeconds": 30, "failureThreshold": 6},
                            "securityContext": restricted_container_security_context(),
                            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                        }
                    ],
                    "volumes": [{"name": "tmp", "emptyDir": {}}],
                },
            },
        },
    }


def service(cfg: PipelineConfig) -> dict[str, Any]:
    port = _port(cfg)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(NAME, cfg.cluster.namespace, labels=LABELS),
        "spec": {
            "selector": dict(LABELS),
            "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def render(cfg: PipelineConfig) -> list[dict[str, Any]]:
    return [deployment(cfg), service(cfg)]
