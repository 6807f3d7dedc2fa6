"""Test doubles the rollout tests share: a probe with canned metrics, a clock that sleeps at once, the
previous InferenceServices, and the `cfg`/`regions` fixtures (a test module takes them as `cfg = rollout_doubles.cfg`).
"""

from __future__ import annotations

from typing import Any

import pytest

from paddle_mlops_core.config.loader import load_config, load_regions
from paddle_mlops_core.contracts import SERVING_REQUEST_LATENCY_SECONDS as LATENCY
from paddle_mlops_core.contracts import SERVING_REQUESTS_TOTAL as REQUESTS
from steps.runtime.release import inference_service as isvc
from steps.runtime.release.kserve_rollout import KServeRollout
from steps.runtime.release.rollout_outcome import Outcome

MODEL_URI = "s3://paddle-mlops/models/ernie-sentiment/8"
IMAGE = "registry.example.com/paddle-mlops/serve@sha256:" + "cd" * 32


def metrics_text(ok: int, errors: int, slow: bool = False) -> str:
    le = "2.5" if slow else "0.05"
    total = ok + errors
    return "\n".join(
        [
            f"# TYPE {REQUESTS} counter",
            f'{REQUESTS}{{protocol="v1",code="200"}} {ok}',
            f'{REQUESTS}{{protocol="v1",code="500"}} {errors}',
            f"# TYPE {LATENCY} histogram",
            f'{LATENCY}_bucket{{protocol="v1",le="0.05"}} {0 if slow else total}',
            f'{LATENCY}_bucket{{protocol="v1",le="{le}"}} {total}' if slow else "",
            f'{LATENCY}_bucket{{protocol="v1",le="+Inf"}} {total}',
            f'{LATENCY}_count{{protocol="v1"}} {total}',
            f'{LATENCY}_sum{{protocol="v1"}} 1.0',
            "",
        ]
    )


class FakeProbe:
    def __init__(self, unhealthy_urls: tuple[str, ...] = ()):
        self.unhealthy = unhealthy_urls
        self.smoked: list[str] = []

    def smoke(self, url: str, model_name: str, texts: Any) -> None:
        self.smoked.append(url)

    def metrics(self, url: str) -> str:
        return metrics_text(90, 10) if any(u in url for u in self.unhealthy) else metrics_text(1000, 0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.001)


@pytest.fixture
def cfg() -> Any:
    return load_config(env="prod", overrides=["serving.ready_timeout_seconds=60", "serving.canary_window_seconds=30"])


@pytest.fixture
def regions(cfg: Any) -> list[Any]:
    known = load_regions()
    return [known[name] for name in cfg.serving.regions]


def previous_services(cfg: Any, regions: list[Any]) -> dict[str, dict[str, Any]]:
    """Version 7 already serving in each region."""
    return {
        isvc.service_name(cfg, r): isvc.build_inference_service(
            cfg, r, "s3://paddle-mlops/models/ernie-sentiment/7", IMAGE, "7"
        )
        for r in regions
    }


def run_machine(cfg: Any, regions: list[Any], api: Any, probe: FakeProbe) -> Outcome:
    """Roll version 8 out over `api` (a stand-in) with a clock that never waits."""
    clock = FakeClock()
    machine = KServeRollout(cfg, api, probe, clock=clock, sleep=clock.sleep, poll_seconds=5)
    return machine.run(regions, MODEL_URI, "8", IMAGE)
