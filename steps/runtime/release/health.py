"""HTTP checks of a model server: readiness, smoke predictions, and canary health from its metrics.

A canary is healthy while its 5xx rate stays under `serving.max_error_rate` and its p99 latency under
`serving.max_p99_latency_ms` for `serving.canary_window_seconds`; any check that fails raises `RolloutFailed`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from paddle_mlops_core.config.models import PipelineConfig
from paddle_mlops_core.contracts import SERVING_REQUEST_LATENCY_SECONDS, SERVING_REQUESTS_TOTAL
from steps.runtime.release.rollout_outcome import RolloutFailed


def check_predictions(body: Any, instances: Sequence[Any]) -> None:
    """Smoke check of a v1 response: one prediction per instance, each a known label with probabilities that
    form a distribution, or (token classification) a list of entities whose offsets cut their text out of it."""
    preds = body.get("predictions") if isinstance(body, dict) else None
    if not isinstance(preds, list) or len(preds) != len(instances):
        raise RolloutFailed(f"smoke test: expected {len(instances)} predictions, got {str(body)[:200]}")
    for i, (pred, instance) in enumerate(zip(preds, instances, strict=True)):
        if isinstance(pred, dict) and "entities" in pred:
            _check_entities(i, pred["entities"], instance)
            continue
        probs = pred.get("probabilities") if isinstance(pred, dict) else None
        if not isinstance(probs, dict) or pred.get("label") not in probs:
            raise RolloutFailed(f"smoke test: prediction {i} has no label with probabilities: {pred!r}")
        values = list(probs.values())
        if not all(isinstance(p, (int, float)) and 0.0 <= p <= 1.0 for p in values) or not math.isclose(
            sum(values), 1.0, abs_tol=1e-3
        ):
            raise RolloutFailed(f"smoke test: prediction {i} probabilities do not form a distribution: {probs}")


def _check_entities(i: int, entities: Any, text: Any) -> None:
    if not isinstance(entities, list) or not isinstance(text, str):
        raise RolloutFailed(f"smoke test: prediction {i} entities must be a list for a text: {entities!r}")
    for entity in entities:
        ok = isinstance(entity, dict) and {"type", "text", "start", "end", "score"} <= set(entity)
        if not ok or text[entity["start"] : entity["end"]] != entity["text"] or not 0 <= entity["score"] <= 1:
            raise RolloutFailed(f"smoke test: prediction {i} has an entity that does not fit its text: {entity!r}")


class HttpProbe:
    """Readiness, smoke requests and metrics scrapes against a model server URL."""

    def __init__(self, timeout: float = 10.0):
        self._client = httpx.Client(timeout=timeout)

    def ready(self, url: str, model_name: str) -> bool:
        try:
            return self._client.get(f"{url}/v1/models/{model_name}").status_code == 200
        except httpx.HTTPError:
            return False

    def smoke(self, url: str, model_name: str, instances: Sequence[Any]) -> None:
        try:
            resp = self._client.post(f"{url}/v1/models/{model_name}:predict", json={"instances": list(instances)})
        except httpx.HTTPError as exc:
            raise RolloutFailed(f"smoke test: request to {url} failed: {exc}") from None
        if resp.status_code != 200:
            raise RolloutFailed(f"smoke test: {url} answered {resp.status_code}: {resp.text[:300]}")
        check_predictions(resp.json(), instances)

    def metrics(self, url: str) -> str:
        try:
            resp = self._client.get(f"{url}/metrics")
            resp.raise_for_status()
        except httpx.HTTPError as exc:
            raise RolloutFailed(f"metrics: cannot scrape {url}/metrics: {exc}") from None
        return resp.text


@dataclass(frozen=True)
class Health:
    requests: float
    errors: float
    p99_ms: float

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


def parse_health(text: str) -> Health:
    """Error rate (5xx) and p99 latency from the server's `paddle_mlops_serving_*` metrics."""
    requests = errors = 0.0
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == SERVING_REQUESTS_TOTAL:
                requests += sample.value
                if sample.labels.get("code", "").startswith("5"):
                    errors += sample.value
            elif sample.name == f"{SERVING_REQUEST_LATENCY_SECONDS}_bucket":
                le = float(sample.labels["le"])
                buckets[le] = buckets.get(le, 0.0) + sample.value
    total = buckets.get(math.inf, 0.0)
    p99 = 0.0
    if total:
        p99 = next(le for le in sorted(buckets) if buckets[le] >= 0.99 * total) * 1000.0
    return Health(requests, errors, p99)


def watch_canary(
    probe: Any, url: str, cfg: PipelineConfig, clock: Callable[[], float], sleep: Callable[[float], None]
) -> Health:
    """Scrape the canary's metrics for the window; fail as soon as a threshold is crossed."""
    serving = cfg.serving
    end = clock() + serving.canary_window_seconds
    while True:
        health = parse_health(probe.metrics(url))
        if health.error_rate > serving.max_error_rate:
            raise RolloutFailed(
                f"canary unhealthy: error rate {health.error_rate:.3f} > max_error_rate {serving.max_error_rate}"
            )
        if health.p99_ms > serving.max_p99_latency_ms:
            raise RolloutFailed(
                f"canary unhealthy: p99 latency {health.p99_ms:.0f} ms > {serving.max_p99_latency_ms} ms"
            )
        if clock() >= end:
            return health
        sleep(min(10.0, max(0.0, end - clock())))
