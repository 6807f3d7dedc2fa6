"""Build the KServe InferenceService that serves one model version in one region.

Decisions, and why:

- Custom predictor container (`spec.predictor.containers[0]`, named `kserve-container`) running
  `python -m steps.serve`: the same server as the local run. The built-in Paddle runtime cannot
  tokenize text or batch dynamically.
- The model URI of the region's copy (steps/runtime/storage/region_stores.py `replicate_to`; the published one where the
  region has no store of its own) goes in the container's `--model-uri` argument, not in the `STORAGE_URI`
  env / `storageUri`: either would make KServe inject its storage-initializer, which downloads
  without checking `manifest.json`. Our server fetches and verifies every file itself, from the region's store:
  its endpoint in S3_ENDPOINT_URL and its keys in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY by reference to the
  region's Secret (configs/regions store_credentials_secret, else storage.credentials_secret) -- the variables
  KServe's own S3 credential builder would set from a ServiceAccount's Secret (kserve
  pkg/credentials/s3/s3_secret.go), set here on the container because no storage initializer runs.
- Canary: Serverless mode uses `spec.predictor.canaryTrafficPercent` (Knative splits traffic between
  the new and the previously rolled-out revision). KServe does not support canaryTrafficPercent in
  RawDeployment mode, so there the rollout step deploys the new revision as a separate
  InferenceService `<name>-canary` (see `canary_name`), smoke-tests it, gives it live traffic through a
  weighted route of its own where `serving.canary_router` names one (steps/runtime/release/canary_route.py) and
  watches its metrics, then updates the main service and deletes the canary.
- No pod-level `securityContext`: Knative Serving rejects it unless the cluster enables
  `kubernetes.podspec-securitycontext` (knative/serving v1.21 pkg/apis/serving/fieldmask.go
  PodSpecMask; pkg/apis/config/features.go defaults it to Disabled). The container-level context
  allows every field the restricted standard needs, and the /tmp emptyDir is writable without
  fsGroup. `nodeSelector` and `tolerations` do need `kubernetes.podspec-nodeselector` and
  `kubernetes.podspec-tolerations` enabled in Knative's `config-features` (README, Cluster install).
- Labels: KServe copies `metadata.labels` onto the predictor pods and adds
  `serving.kserve.io/inferenceservice: <name>` and `component: predictor` (kserve v0.20.0
  components/predictor.go buildObjectMeta), which the NetworkPolicy and PodMonitor select on.
"""

from __future__ import annotations

from typing import Any

from paddle_mlops_core.config.models import PipelineConfig
from paddle_mlops_core.config.region_store_rules import own_credentials
from paddle_mlops_core.config.regions import RegionConfig
from paddle_mlops_core.contracts import (
    PART_OF,
    REGION_OBJECT_LABEL,
    RUN_AS_GROUP,
    RUN_AS_USER,
    SERVING_PORT,
    STORE_CREDENTIAL_KEYS,
    image_repository,
)
from steps.runtime.storage import region_stores

GROUP = "serving.kserve.io"
VERSION = "v1beta1"
PLURAL = "inferenceservices"
API_VERSION = f"{GROUP}/{VERSION}"


def service_name(cfg: PipelineConfig, region: RegionConfig) -> str:
    """One InferenceService per region: regions are node pools of the cluster, chosen by nodeSelector."""
    return f"{cfg.serving.model_name}-{region.name}"


def canary_name(cfg: PipelineConfig, region: RegionConfig) -> str:
    return f"{service_name(cfg, region)}-canary"


def pin_image(image: str, digest: str | None) -> str:
    """`repo:tag` + `sha256:…` -> `repo@sha256:…`; the tag alone when no real digest was built."""
    if not digest or not digest.startswith("sha256:"):
        return image
    return f"{image_repository(image)}@{digest}"


def _security_context_container() -> dict[str, Any]:
    """Pod Security Standard "restricted", all of it at container level (see the module docstring)."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_GROUP,
        "readOnlyRootFilesystem": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _env(cfg: PipelineConfig, region: RegionConfig) -> list[dict[str, Any]]:
    # The predictor reads the model from its own region's store (the rollout replicated it there), through that
    # store's endpoint and with its keys: the region's own (configs/regions store_endpoint_url,
    # store_credentials_secret), else the pipeline's (storage.endpoint_url, storage.credentials_secret).
    store = region_stores.of_region(cfg, region)
    secret = own_credentials(cfg, region) or cfg.storage.credentials_secret
    env: list[dict[str, Any]] = [
        # The root filesystem is read-only; model downloads and library caches go to the /tmp volume.
        {"name": "HOME", "value": "/tmp"},
        {"name": "PPNLP_HOME", "value": "/tmp/paddlenlp"},
        {"name": "AWS_DEFAULT_REGION", "value": cfg.storage.region},
        *({"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}} for key in STORE_CREDENTIAL_KEYS),
    ]
    if store.endpoint_url:
        env.append({"name": "S3_ENDPOINT_URL", "value": store.endpoint_url})
    return env


def _resources(cfg: PipelineConfig) -> dict[str, Any]:
    # Request = limit, whole cores: the CFS quota the predictor sizes its threads to
    # (steps/runtime/serving/cpu_quota.py)
    # is exactly what the scheduler reserved, and with the static CPU manager the cores are exclusive.
    cpus = str(cfg.serving.cpus)
    requests = {"cpu": cpus, "memory": "2Gi"}
    limits: dict[str, Any] = {"cpu": cpus, "memory": "4Gi"}
    if cfg.serving.use_gpu:
        requests["nvidia.com/gpu"] = "1"
        limits["nvidia.com/gpu"] = "1"
    return {"requests": requests, "limits": limits}


def build_inference_service(
    cfg: PipelineConfig,
    region: RegionConfig,
    model_uri: str,
    image: str,
    model_version: str = "",
    canary_percent: int | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """The InferenceService for `model_uri` in `region`; `canary_percent` sends that share to it (Serverless)."""
    if canary_percent is not None and cfg.serving.deployment_mode != "Serverless":
        raise ValueError(
            "canaryTrafficPercent needs deploymentMode Serverless; RawDeployment uses a <name>-canary service"
        )
    predictor = _predictor(cfg, region, _container(cfg, region, model_uri, image))
    if canary_percent is not None:
        predictor["canaryTrafficPercent"] = canary_percent
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceService",
        "metadata": _metadata(cfg, region, model_uri, model_version, name or service_name(cfg, region), image),
        "spec": {"predictor": predictor},
    }


def _container(cfg: PipelineConfig, region: RegionConfig, model_uri: str, image: str) -> dict[str, Any]:
    serving = cfg.serving
    return {
        "name": "kserve-container",
        "image": image,
        "command": ["python", "-m", "steps.serve"],
        "args": [
            "--model-uri",
            model_uri,
            "--host",
            "0.0.0.0",
            "--port",
            str(SERVING_PORT),
            "--model-name",
            serving.model_name,
            "--overrides",
            "[]",
        ],
        "ports": [{"containerPort": SERVING_PORT, "name": "http1", "protocol": "TCP"}],
        "env": _env(cfg, region),
        "resources": _resources(cfg),
        "readinessProbe": {
            "httpGet": {"path": f"/v1/models/{serving.model_name}", "port": SERVING_PORT},
            "periodSeconds": 5,
        },
        "livenessProbe": {"httpGet": {"path": "/v2/health/live", "port": SERVING_PORT}, "periodSeconds": 15},
        "securityContext": _security_context_container(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }


def _predictor(cfg: PipelineConfig, region: RegionConfig, container: dict[str, Any]) -> dict[str, Any]:
    return {
        "containers": [container],
        "nodeSelector": region.node_selector(),
        "tolerations": [t.model_dump(exclude_none=True) for t in region.tolerations],
        "automountServiceAccountToken": False,
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "4Gi"}}],
        "minReplicas": 1,
    }


def _metadata(
    cfg: PipelineConfig, region: RegionConfig, model_uri: str, model_version: str, name: str, image: str
) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": cfg.serving.model_name, **PART_OF, REGION_OBJECT_LABEL: region.name}
    if model_version:
        labels["paddle-mlops/model-version"] = str(model_version)
    return {
        "name": name,
        "namespace": cfg.cluster.namespace,
        "labels": labels,
        "annotations": {
            "serving.kserve.io/deploymentMode": cfg.serving.deployment_mode,
            # Tag routing gives the canary revision its own URL, so the rollout can probe it alone.
            "serving.kserve.io/enable-tag-routing": "true",
            # Serverless only: KServe then points prometheus.io/port at queue-proxy's aggregated port 9091
            # (pkg/webhook/admission/pod/metrics_aggregate_injector.go), which RawDeployment pods do not have.
            **(
                {"serving.kserve.io/enable-prometheus-scraping": "true"}
                if cfg.serving.deployment_mode == "Serverless"
                else {}
            ),
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(SERVING_PORT),
            "prometheus.io/path": "/metrics",
            "paddle-mlops/model-uri": model_uri,
            # What this service serves, readable without parsing the pod spec: model version (label above),
            # model URI and serving image digest.
            "paddle-mlops/image-digest": image.partition("@")[2],
        },
    }
