"""`serving:` how a model is served: the target, the engine and its threads, batching, the rollout's canary.

The checks here keep an engine on the device it runs on and the predictor's threads within its pod's CPUs; where
the predictors' requests come from follows the networking layer (networking.py).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from paddle_mlops_core.config.networking import ACTIVATOR_NAMESPACE, GATEWAY_NAMESPACES, NetworkingLayer
from paddle_mlops_core.config.strict import DNS_LABEL, Strict


class ServingConfig(Strict):
    target: Literal["kserve", "local"] = Field(
        "kserve", description="kserve: InferenceService on the cluster; local: a model server process on this machine"
    )
    model_name: str | None = Field(
        None,
        pattern=DNS_LABEL,
        description="the served model's name (URL, InferenceService); null: ernie-<task>",
    )
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535, description="0 picks a free port")
    cpu_threads: int | None = Field(
        None,
        ge=1,
        description="Paddle math threads per predictor; null: the container's CPU quota (cgroup cpu.max / "
        "cfs_quota_us, rounded down), else the CPUs this process may run on",
    )
    cpus: int = Field(
        2, ge=1, description="InferenceService CPU request and limit (whole cores); the predictor's threads follow it"
    )
    use_gpu: bool = False
    engine: Literal[
        "auto", "paddle-fp32", "paddle-bf16", "onnx-fp32", "onnx-int8", "openvino-bf16", "openvino-int8",
        "paddle-gpu-fp32", "paddle-gpu-fp16", "paddle-trt-fp16",
    ] = Field(
        "auto",
        description="auto: the fastest variant served within max_metric_drop of Paddle fp32, measured at evaluate; "
        "or a variant to serve (still measured and gated)",
    )  # fmt: skip
    quantization: bool = Field(True, description="false: int8 variants are never built or served")
    max_metric_drop: float = Field(
        0.005, ge=0, le=1, description="how far below Paddle fp32's gate metric a faster variant may be (absolute)"
    )
    max_batch_size: int = Field(16, ge=1)
    max_wait_ms: float = Field(
        5.0,
        ge=0,
        description="while a batch is smaller than the previous one, how long to wait for the next "
        "request (restarting with each arrival, at most 4x in all); a lone client never waits",
    )
    inline_lone_requests: bool = Field(
        True,
        description="a lone request on an idle server runs on the event loop thread (two thread wake-ups "
        "quicker); false: every model call on the model thread, so the loop never blocks on inference",
    )
    openmp_spin_ms: int | None = Field(
        200,
        ge=0,
        description="how long Paddle's Intel OpenMP workers spin after each parallel region, set on "
        "every thread that runs the model; Intel OpenMP's default is 200 but it drops to 0 when a "
        "process has more OpenMP threads than CPUs, as a server with a loop and a model thread does; "
        "null: the runtime's own setting (KMP_BLOCKTIME)",
    )
    max_request_bytes: int = Field(1_000_000, gt=0)
    max_instances: int = Field(64, ge=1)
    max_text_chars: int = Field(512, ge=1)
    ready_timeout_seconds: int = Field(120, gt=0)
    smoke_instances: tuple[str | tuple[str, str], ...] | None = Field(
        None,
        min_length=1,
        description="what a rollout sends before traffic moves: texts, or [text_a, text_b] pairs for text-matching; "
        "null: the task type's own",
    )
    deployment_mode: Literal["Serverless", "RawDeployment"] = "Serverless"
    networking_layer: NetworkingLayer = Field(
        "istio",
        description="Knative's networking layer (its config-network ingress class): where the gateway pods that "
        "send requests to the predictors run (paddle_mlops_core/config/networking.py)",
    )
    gateway_namespaces: tuple[str, ...] | None = Field(
        None,
        description="namespaces whose pods may send requests to the predictors, besides Knative's activator; "
        "null: the networking layer's own (istio-system; kourier-system; contour-external, contour-internal)",
    )
    canary_percent: int = Field(10, ge=1, le=99)
    canary_window_seconds: int = Field(300, ge=0)
    canary_router: Literal["none", "gateway-api", "istio"] = Field(
        "none",
        description="RawDeployment: what splits live traffic between the stable and the canary predictor "
        "(steps/runtime/release/canary_route.py): gateway-api (KServe's Gateway API mode: an HTTPRoute of weighted "
        "backendRefs beside KServe's own), istio (a VirtualService on canary_gateway); none: the canary gets smoke "
        "requests only and the rollout records 'smoke-checked, no canary'. Serverless splits with "
        "canaryTrafficPercent",
    )
    canary_gateway: str | None = Field(
        None,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="canary_router istio: the Istio Gateway (namespace/name) the VirtualService binds to, the one "
        "that serves the InferenceService's host",
    )
    canary_min_requests: int = Field(
        1,
        ge=1,
        description="live requests the canary must answer in the window (with a canary_router): fewer means the "
        "route did not carry traffic to it, and the canary fails",
    )
    max_error_rate: float = Field(0.01, ge=0, le=1)
    max_p99_latency_ms: float = Field(500.0, gt=0)
    regions: tuple[str, ...] = Field((), description="regions rolled out in order; empty: the run's region only")

    @field_validator("gateway_namespaces")
    @classmethod
    def _namespace_names(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for name in v or ():
            if not re.fullmatch(DNS_LABEL, name):
                raise ValueError(f"gateway namespace {name!r} is not a namespace name (lower case, digits, '-')")
        return v

    def ingress_namespaces(self) -> tuple[str, ...]:
        """Where the predictors' requests come from: Knative's activator and the gateway namespaces."""
        gateways = (
            self.gateway_namespaces
            if self.gateway_namespaces is not None
            else GATEWAY_NAMESPACES[self.networking_layer]
        )
        return tuple(dict.fromkeys((ACTIVATOR_NAMESPACE, *gateways)))

    @model_validator(mode="after")
    def _router_fits_the_mode(self) -> ServingConfig:
        if self.canary_router != "none" and self.deployment_mode != "RawDeployment":
            raise ValueError(
                f"serving.canary_router {self.canary_router} splits traffic in RawDeployment mode only; "
                f"deployment_mode {self.deployment_mode} splits it with canaryTrafficPercent: set canary_router none, "
                "or deployment_mode RawDeployment"
            )
        if self.canary_router == "istio" and not self.canary_gateway:
            raise ValueError(
                "serving.canary_router istio needs serving.canary_gateway: the Istio Gateway (namespace/name) that "
                "serves the InferenceService's host, which the canary's VirtualService binds to"
            )
        if self.canary_router == "gateway-api" and self.gateway_namespaces is None:
            # The Gateway's proxies, not Knative's layer, send the requests in this mode: their namespace depends on
            # the implementation (Envoy Gateway: its own controller namespace, proxy_infra.go GetResourceNamespace;
            # Istio: the Gateway's namespace), so the predictor NetworkPolicy cannot guess it.
            raise ValueError(
                "serving.canary_router gateway-api needs serving.gateway_namespaces: the namespaces the Gateway's "
                "proxy pods run in (envoy-gateway-system for Envoy Gateway, the Gateway's own namespace, e.g. kserve, "
                "for Istio), else the predictor NetworkPolicy drops every request they send; paddle-mlops preflight "
                "names them (raw-ingress)"
            )
        return self

    @model_validator(mode="after")
    def _engine_fits_the_device(self) -> ServingConfig:
        gpu_engine = self.engine.startswith(("paddle-gpu-", "paddle-trt-"))
        if self.engine != "auto" and gpu_engine != self.use_gpu:
            where = "a GPU" if gpu_engine else "the CPU"
            raise ValueError(
                f"serving.engine {self.engine} runs on {where} but serving.use_gpu is {str(self.use_gpu).lower()}; "
                "pick an engine for the device, or leave it auto"
            )
        return self

    @model_validator(mode="after")
    def _threads_fit_the_pod(self) -> ServingConfig:
        if self.target == "kserve" and self.cpu_threads is not None and self.cpu_threads > self.cpus:
            raise ValueError(
                f"serving.cpu_threads {self.cpu_threads} is more than serving.cpus {self.cpus}, the predictor "
                "pod's CPU limit: the extra threads only wait for CPU time. Raise serving.cpus, or leave "
                "cpu_threads unset (null) so the predictor sizes itself to its quota"
            )
        return self
