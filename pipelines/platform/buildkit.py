"""A shared rootless BuildKit daemon in the build namespace, so the pipeline's pods stay restricted.

Rootless buildkitd needs seccomp and AppArmor `Unconfined` (user namespaces, mounts), which Pod
Security "restricted" and even "baseline" forbid. Argo runs every pod of a workflow in the
workflow's namespace, so a buildkitd sidecar would put one unrestricted pod into the restricted
pipeline namespace. Instead the daemon runs here, in `cluster.build_namespace` (labelled for it,
argo/tenancy.yaml), reachable only from the pipeline namespace over mutual TLS; the build-image
step is an ordinary restricted pod that talks to it with `buildctl`.

The daemon's security settings follow upstream's rootless example (moby/buildkit
`examples/kubernetes/deployment+service.rootless.yaml`, `docs/rootless.md`); each deviation that
would stop it is explained where the field is set.
"""

from __future__ import annotations

from typing import Any

from paddle_mlops_core.config import PipelineConfig
from pipelines import k8s
from pipelines.platform.meta import metadata

NAME = "buildkitd"
PORT = 1234
SERVER_CERTS = "buildkitd-server-certs"  # tls.crt, tls.key, ca.crt (e.g. from cert-manager)
CLIENT_CERTS = "buildkit-client-certs"  # in the pipeline namespace, mounted by the build step
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "image-build"}
# The rootless image's user: its /etc/subuid and /etc/subgid ranges belong to 1000:1000, so the uid is
# the image's, not the project's (upstream: "To change UID/GID, you need to rebuild the image").
IMAGE_UID = 1000
# Where the image points TMPDIR and XDG_RUNTIME_DIR (moby/buildkit Dockerfile, `rootless` stage):
# rootlesskit makes its state dir and buildkitd its temporary mounts under TMPDIR.
TMPDIR = "/home/user/.local/tmp"
RUNTIME_DIR = f"/run/user/{IMAGE_UID}"
STATE_DIR = "/home/user/.local/share/buildkit"
EXEMPT_REASON = (
    "rootless BuildKit needs seccomp and AppArmor Unconfined for user namespaces and mounts, and "
    "privilege escalation with the runtime's default capabilities for the setuid newuidmap/newgidmap "
    "that map those namespaces (moby/buildkit#1671); it runs as uid 1000, never privileged, alone in the "
    "build namespace, reachable only from the pipeline namespace over mutual TLS"
)
# The checkov checks this one pod cannot pass, for the same reason: seccomp (CKV_K8S_31), privilege
# escalation (CKV_K8S_20), and the runtime's default capabilities, NET_RAW among them (CKV_K8S_28, _37).
CHECKOV_SKIPS = {
    f"checkov.io/skip{n}": f"{check}={EXEMPT_REASON}"
    for n, check in enumerate(("CKV_K8S_31", "CKV_K8S_20", "CKV_K8S_28", "CKV_K8S_37"), start=1)
}


def address(cfg: PipelineConfig) -> str:
    """`BUILDKIT_HOST` for the build step."""
    return f"tcp://{NAME}.{cfg.cluster.build_namespace}.svc:{PORT}"


def _daemon_object(
    cfg: PipelineConfig, api_version: str, kind: str, spec: dict[str, Any], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """One of the daemon's objects: named for it, in the build namespace, selected by its labels."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": metadata(NAME, cfg.cluster.build_namespace, LABELS, annotations),
        "spec": spec,
    }


def _security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": IMAGE_UID,
        "runAsGroup": IMAGE_UID,
        # rootlesskit maps the user namespace with the setuid-root newuidmap/newgidmap, which need
        # privilege escalation (no no_new_privs) and CAP_SETUID/CAP_SETGID in the bounding set:
        # `allowPrivilegeEscalation: false` or `capabilities.drop: [ALL]` stop the daemon with
        # "newuidmap: Could not set caps" (moby/buildkit#1671, #3217). Upstream's rootless example
        # keeps both at the runtime's defaults, and so does this one.
        "allowPrivilegeEscalation": True,
        # Upstream allows it: build state, XDG_RUNTIME_DIR and TMPDIR are emptyDirs.
        "readOnlyRootFilesystem": True,
        # The exemption (see the pod annotation): user namespaces and mounts need these unconfined.
        "seccompProfile": {"type": "Unconfined"},
        "appArmorProfile": {"type": "Unconfined"},
    }


def _container(cfg: PipelineConfig) -> dict[str, Any]:
    resources = k8s.BUILD_RESOURCES
    return {
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
        # Stated rather than inherited from the image, so the emptyDirs below are where they are used.
        "env": [{"name": "TMPDIR", "value": TMPDIR}, {"name": "XDG_RUNTIME_DIR", "value": RUNTIME_DIR}],
        "securityContext": _security_context(),
        "volumeMounts": [
            {"name": "certs", "mountPath": "/certs", "readOnly": True},
            {"name": "state", "mountPath": STATE_DIR},
            {"name": "run", "mountPath": RUNTIME_DIR},
            {"name": "tmp", "mountPath": TMPDIR},
        ],
    }


def deployment(cfg: PipelineConfig) -> dict[str, Any]:
    pod_meta = {
        "labels": {**metadata(NAME)["labels"], **LABELS},
        "annotations": {"paddle-mlops/pod-security-exempt": EXEMPT_REASON},
    }
    pod_spec = {
        # buildkitd needs no Kubernetes API.
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": IMAGE_UID,
            "runAsGroup": IMAGE_UID,
            "fsGroup": IMAGE_UID,
        },
        "containers": [_container(cfg)],
        "volumes": [
            {"name": "certs", "secret": {"secretName": SERVER_CERTS}},
            {"name": "state", "emptyDir": {}},
            {"name": "run", "emptyDir": {}},
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    spec = {"replicas": 1, "selector": {"matchLabels": LABELS}, "template": {"metadata": pod_meta, "spec": pod_spec}}
    return _daemon_object(cfg, "apps/v1", "Deployment", spec, CHECKOV_SKIPS)


def service(cfg: PipelineConfig) -> dict[str, Any]:
    ports = [{"name": "buildkit", "port": PORT, "targetPort": "buildkit", "protocol": "TCP"}]
    return _daemon_object(cfg, "v1", "Service", {"selector": LABELS, "ports": ports})


def network_policy(cfg: PipelineConfig) -> dict[str, Any]:
    """Only pods of the pipeline namespace may reach the daemon."""
    pipeline_namespace = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": cfg.cluster.namespace}}}
    spec = {
        "podSelector": {"matchLabels": LABELS},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [pipeline_namespace], "ports": [{"protocol": "TCP", "port": PORT}]}],
    }
    return _daemon_object(cfg, "networking.k8s.io/v1", "NetworkPolicy", spec)


def render(cfg: PipelineConfig) -> list[dict[str, Any]]:
    return [deployment(cfg), service(cfg), network_policy(cfg)]
