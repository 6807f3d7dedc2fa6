"""The InferenceService: valid against kserve's SDK models (unknown fields rejected), restricted pods."""

from __future__ import annotations

import re
from typing import Any

import kserve
import kserve.models
import kubernetes.client.models as k8s_models
import pytest

from paddle_mlops.lint.rules import ALLOWED_VOLUME_TYPES
from paddle_mlops_core.config.loader import load_config, load_regions
from paddle_mlops_core.config.models import PipelineConfig
from paddle_mlops_core.config.regions import RegionConfig
from steps.runtime.release import inference_service as isvc

DIGEST = "sha256:" + "ab" * 32
PRIMITIVES = {"str", "int", "bool", "float", "object", "date", "datetime", "ResourceQuantity"}


def construct(data: Any, type_name: str, path: str = "") -> Any:
    """Build the SDK object tree with the models' constructors, rejecting any key a model does not declare.

    The constructors check required fields and enums; the key check is ours, because the generated
    clients silently drop unknown keys.
    """
    if data is None:
        return None
    # kserve's models write list[X] / dict(str, X); kubernetes 37's write List[X] / Dict[str, X].
    if type_name.lower().startswith("list["):
        assert isinstance(data, list), f"{path}: expected a list"
        return [construct(item, type_name[5:-1], f"{path}[{i}]") for i, item in enumerate(data)]
    match = re.match(r"dict\(([^,]*), (.*)\)", type_name) or re.match(r"Dict\[([^,]*), (.*)\]", type_name)
    if match:
        assert isinstance(data, dict), f"{path}: expected a mapping"
        return {key: construct(value, match.group(2), f"{path}.{key}") for key, value in data.items()}
    if type_name in PRIMITIVES:
        assert not isinstance(data, (dict, list)) or type_name == "object", f"{path}: expected {type_name}"
        return data
    model = getattr(kserve.models, type_name, None) or getattr(k8s_models, type_name)
    assert isinstance(data, dict), f"{path}: expected an object of {type_name}"
    by_json = {json_key: attr for attr, json_key in model.attribute_map.items()}
    unknown = set(data) - set(by_json)
    assert not unknown, f"{path}: {type_name} has no field(s) {sorted(unknown)}"
    return model(**{by_json[k]: construct(v, model.openapi_types[by_json[k]], f"{path}.{k}") for k, v in data.items()})


def sdk_object(body: dict[str, Any]) -> kserve.V1beta1InferenceService:
    return construct(body, "V1beta1InferenceService")


@pytest.fixture
def cfg() -> PipelineConfig:
    return load_config(overrides=["serving.use_gpu=true"])


@pytest.fixture
def region() -> RegionConfig:
    return load_regions()["cn-east"]


def build(cfg: PipelineConfig, region: RegionConfig, **kw: Any) -> dict[str, Any]:
    image = isvc.pin_image(cfg.images.serve, DIGEST)
    return isvc.build_inference_service(cfg, region, "s3://paddle-mlops/models/ernie-sentiment/7", image, "7", **kw)


def test_valid_against_kserve_sdk_models(cfg: PipelineConfig, region: RegionConfig) -> None:
    obj = sdk_object(build(cfg, region, canary_percent=10))
    assert obj.kind == "InferenceService" and obj.api_version == "serving.kserve.io/v1beta1"
    predictor = obj.spec.predictor
    assert predictor.canary_traffic_percent == 10
    container = predictor.containers[0]
    assert container.name == "kserve-container"
    assert container.image == f"registry.example.com/paddle-mlops/serve@{DIGEST}"
    assert container.command == ["python", "-m", "steps.serve"]
    args = container.args
    assert args[args.index("--model-uri") + 1] == "s3://paddle-mlops/models/ernie-sentiment/7"
    assert args[args.index("--host") + 1] == "0.0.0.0" and args[args.index("--port") + 1] == "8080"
    # No STORAGE_URI: KServe's storage-initializer would download without checking the manifest.
    assert all(e.name != "STORAGE_URI" for e in container.env)
    assert predictor.model is None


def test_strict_walk_rejects_unknown_fields(cfg: PipelineConfig, region: RegionConfig) -> None:
    body = build(cfg, region)
    body["spec"]["predictor"]["containers"][0]["securityContext"]["privilegd"] = False
    with pytest.raises(AssertionError, match="privilegd"):
        sdk_object(body)


def test_restricted_pod_security(cfg: PipelineConfig, region: RegionConfig) -> None:
    predictor = build(cfg, region)["spec"]["predictor"]
    # No pod-level context: Knative rejects it by default (tests/test_upstream_kserve.py); the
    # restricted standard is met container by container.
    assert "securityContext" not in predictor
    for container in predictor["containers"]:
        ctx = container["securityContext"]
        assert ctx["runAsUser"] != 0 and ctx["runAsGroup"] != 0
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["capabilities"]["drop"] == ["ALL"] and "add" not in ctx["capabilities"]
        assert ctx["runAsNonRoot"] is True and ctx["seccompProfile"]["type"] == "RuntimeDefault"
        assert "privileged" not in ctx
    for volume in predictor["volumes"]:
        assert set(volume) - {"name"} <= ALLOWED_VOLUME_TYPES
    assert not any(predictor.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))


def test_gpu_region_annotations_and_secrets(cfg: PipelineConfig, region: RegionConfig) -> None:
    body = build(cfg, region)
    predictor = body["spec"]["predictor"]
    resources = predictor["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == "1"
    assert predictor["nodeSelector"] == {"region": "cn-east", "gpu-type": "v100", "cost-tier": "spot"}
    assert {"key": "cost-tier", "operator": "Equal", "value": "spot", "effect": "NoSchedule"} in predictor[
        "tolerations"
    ]
    ann = body["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == "8080"
    assert ann["prometheus.io/path"] == "/metrics"
    assert ann["serving.kserve.io/enable-prometheus-scraping"] == "true"
    assert ann["serving.kserve.io/deploymentMode"] == "Serverless"
    # RawDeployment has no queue-proxy: KServe's aggregator would point prometheus.io/port at its absent port 9091.
    raw = build(
        cfg.model_copy(update={"serving": cfg.serving.model_copy(update={"deployment_mode": "RawDeployment"})}), region
    )
    assert "serving.kserve.io/enable-prometheus-scraping" not in raw["metadata"]["annotations"]
    assert raw["metadata"]["annotations"]["prometheus.io/port"] == "8080"
    assert "canaryTrafficPercent" not in predictor
    env = {e["name"]: e for e in predictor["containers"][0]["env"]}
    # the region's own store, signed with its own Secret (configs/regions/cn-east.yaml; test_model_replication.py)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env[key]["valueFrom"]["secretKeyRef"] == {"name": region.store_credentials_secret, "key": key}
    assert env["S3_ENDPOINT_URL"]["value"] == region.store_endpoint_url
    assert body["metadata"]["name"] == "ernie-sentiment-cn-east"


def test_cpu_serving_requests_no_gpu(region: RegionConfig) -> None:
    cfg = load_config()
    resources = build(cfg, region)["spec"]["predictor"]["containers"][0]["resources"]
    assert "nvidia.com/gpu" not in resources["limits"] and "nvidia.com/gpu" not in resources["requests"]


def test_raw_deployment_has_no_canary_traffic_percent(region: RegionConfig) -> None:
    cfg = load_config(overrides=["serving.deployment_mode=RawDeployment"])
    with pytest.raises(ValueError, match="RawDeployment"):
        build(cfg, region, canary_percent=10)
    canary = sdk_object(build(cfg, region, name=isvc.canary_name(cfg, region)))
    assert canary.metadata.name == "ernie-sentiment-cn-east-canary"
    assert canary.metadata.annotations["serving.kserve.io/deploymentMode"] == "RawDeployment"


def test_pin_image() -> None:
    assert isvc.pin_image("r.io/a/serve:0.1.0", DIGEST) == f"r.io/a/serve@{DIGEST}"
    assert isvc.pin_image("r.io:5000/serve:0.1.0", DIGEST) == f"r.io:5000/serve@{DIGEST}"
    assert isvc.pin_image("r.io/a/serve:0.1.0", "local") == "r.io/a/serve:0.1.0"
    assert isvc.pin_image("r.io/a/serve:0.1.0", None) == "r.io/a/serve:0.1.0"
