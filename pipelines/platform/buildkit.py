"""A shared rootless BuildKit daemon in the build namespace, so the pipeline's pods stay restricted.

Rootless buildkitd needs seccomp and AppArmor `Unconfined` (user namespaces, mounts), which Pod
Security "restricted" and even "baseline" forbid. Argo runs every pod of a workflow in the
workflow's namespace, so a buildkitd sidecar would put one unrestricted pod into the restricted
pipeline namespace. Instead the daemon runs here, in `cluster.build_namespace` (labelled for it,
argo/tenancy.yaml), reachable only from the pipeline namespace over mutual TLS; the build-image
step is an ordinary restricted pod that talks to it with `buildctl`.
"""

from __future__ import annotations

from typing import Any

from paddle_mlops.config import PipelineConfig
from pipelines import k8s
from pipelines.platform.meta import metadata

NAME = "buildkitd"
PORT = 1234
SERVER_CERTS = "buildkitd-server-certs"  # tls.crt, tls.key, ca.crt (e.g. from cert-manager)
CLIENT_CERTS = "buildkit-client-certs"  # in the pipeline namespace, mounted by the build step
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "image-build"}
EXEMPT_REASON = (
    "rootless BuildKit needs seccomp and AppArmor Unconfined for user namespaces and mounts; it runs "
    "non-root without privilege escalation or capabilities, alone in the build namespace, reachable "
    "only from the pipeline namespace over mutual TLS"
)
# checkov's seccomp/AppArmor checks cannot pass for this one pod; the reason is the same.
CHECKOV_SKIPS = {
    "checkov.io/skip1": f"CKV_K8S_31={EXEMPT_REASON}",
    "checkov.io/skip2": f"CKV_K8S_32={EXEMPT_REASON}",
}


def address(cfg: PipelineConfig) -> str:
    """`BUILDKIT_HOST` for the build step."""
    return f"tcp://{NAME}.{cfg.cluster.build_namespace}.svc:{PORT}"


def deployment(cfg: PipelineConfig) -> dict[str, Any]:
    resources = k8s.BUILD_RESOURCES
    container = {
        "name": NAME,
        "image": cfg.images.buildkit,
        "imagePullPolicy": "IfNotPresent",
        "command": ["rootlesskit", "buildkitd"],
        "args": [
            "--oci-worker-no-process-sandbox",
            f"--addr=tcp://0.0.0.0:{PORT}",
            "--tlscacert=/certs/ca.crt",
            "--tlscert=/certs/tls.crt",
            "--tlskey=/certs/tls.key",
        ],
        "ports": [{"name": "buildkit", "containerPort": PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": "buildkit"}, "periodSeconds": 10},
        "livenessProbe": {"tcpSocket": {"port": "buildkit"}, "periodSeconds": 30, "failureThreshold": 5},
        "resources": {
            "requests": {"cpu": resources.cpu_request, "memory": resources.memory_request},
            "limits": {"cpu": resources.cpu_limit, "memory": resources.memory_limit},
        },
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": k8s.RUN_AS_USER,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            # Build state, the daemon's runtime dir and /tmp are emptyDirs; nothing else is written.
            "readOnlyRootFilesystem": True,
            # The exemption (see the pod annotation): user namespaces need these unconfined.
            "seccompProfile": {"type": "Unconfined"},
            "appArmorProfile": {"type": "Unconfined"},
        },
        "volumeMounts": [
            {"name": "certs", "mountPath": "/certs", "readOnly": True},
            {"name": "state", "mountPath": "/home/user/.local/share/buildkit"},
            {"name": "run", "mountPath": f"/run/user/{k8s.RUN_AS_USER}"},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    pod_meta = {"labels": {**metadata(NAME)["labels"], **LABELS}, "annotations": {"paddle-mlops/pod-security-exempt": EXEMPT_REASON}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(NAME, cfg.cluster.build_namespace, LABELS, CHECKOV_SKIPS),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": LABELS},
            "template": {
                "metadata": pod_meta,
                "spec": {
                    # buildkitd needs no Kubernetes API.
                    "automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": k8s.RUN_AS_USER, "fsGroup": k8s.RUN_AS_USER},
                    "containers": [container],
                    "volumes": [
                        {"name": "certs", "secret": {"secretName": SERVER_CERTS}},
                        {"name": "state", "emptyDir": {}},
                        {"name": "run", "emptyDir": {}},
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    }


def service(cfg: PipelineConfig) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(NAME, cfg.cluster.build_namespace, LABELS),
        "spec": {
            "selector": LABELS,
            "ports": [{"name": "buildkit", "port": PORT, "targetPort": "buildkit", "protocol": "TCP"}],
        },
    }


def network_policy(cfg: PipelineConfig) -> dict[str, Any]:
    """Only pods of the pipeline namespace may reach the daemon."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(NAME, cfg.cluster.build_namespace, LABELS),
        "spec": {
            "podSelector": {"matchLabels": LABELS},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": cfg.cluster.namespace}}}
                    ],
                    "ports": [{"protocol": "TCP", "port": PORT}],
                }
            ],
        },
    }


def render(cfg: PipelineConfig) -> list[dict[str, Any]]:
    return [deployment(cfg), service(cfg), network_policy(cfg)]
