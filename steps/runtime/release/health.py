"""HTTP checks of a model server: readiness, smoke predictions, and canary health from its metrics.

A canary is healthy while its 5xx rate stays under `serving.max_error_rate` and its p99 latency under
`serving.max_p99_latency_ms` for `serving.canary_window_seconds`; any check that fails raises `RolloutFailed`.
What is read is the predictor's own `/metrics` (the request counter and latency histogram it exports): since it
started (`watch_canary`, a canary without live traffic), or, with live traffic routed to it, the difference from the
scrape taken when the router began sending it requests (`watch_live`), so only the window's real requests count.
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


@dataclass(frozen=True)
class Counts:
    """The server's cumulative counters at one scrape: requests, 5xx answers, latency histogram (le -> count)."""

    requests: float
    errors: float
    buckets: tuple[tuple[float, float], ...]

    def health(self) -> Health:
        return _health(self.requests, self.errors, dict(self.buckets))

    def since(self, earlier: Counts) -> Health:
        """What the server answered between `earlier` and this scrape. RolloutFailed when a counter went back: the
        pod restarted (or another replica answered the scrape), and the window's requests cannot be told apart."""
        before = dict(earlier.buckets)
        buckets = {le: n - before.get(le, 0.0) for le, n in self.buckets}
        if self.requests < earlier.requests or self.errors < earlier.errors or any(n < 0 for n in buckets.values()):
            raise RolloutFailed(
                f"canary unhealthy: its request counters went back ({earlier.requests:.0f} -> {self.requests:.0f}); "
                "its predictor restarted during the window"
            )
        return _health(self.requests - earlier.requests, self.errors - earlier.errors, buckets)


def _health(requests: float, errors: float, buckets: dict[float, float]) -> Health:
    total = buckets.get(math.inf, 0.0)
    p99 = 0.0
    if total:
        p99 = next(le for le in sorted(buckets) if buckets[le] >= 0.99 * total) * 1000.0
    return Health(requests, errors, p99)


def read_counts(text: str) -> Counts:
    """Requests, 5xx answers and the latency histogram from the server's `paddle_mlops_serving_*` metrics."""
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
    return Counts(requests, errors, tuple(sorted(buckets.items())))


def parse_health(text: str) -> Health:
    """Error rate (5xx) and p99 latency since the server started."""
    return read_counts(text).health()


def _guard(health: Health, cfg: PipelineConfig, what: str) -> None:
    serving = cfg.serving
    if health.error_rate > serving.max_error_rate:
        raise RolloutFailed(
            f"canary unhealthy: error rate {health.error_rate:.3f} > max_error_rate {serving.max_error_rate}{what}"
        )
    if health.p99_ms > serving.max_p99_latency_ms:
        raise RolloutFailed(
            f"canary unhealthy: p99 latency {health.p99_ms:.0f} ms > {serving.max_p99_latency_ms} ms{what}"
        )


def watch_canary(
    probe: Any, url: str, cfg: PipelineConfig, clock: Callable[[], float], sleep: Callable[[float], None]
) -> Health:
    """Scrape the canary's metrics for the window; fail as soon as a threshold is crossed."""
    end = clock() + cfg.serving.canary_window_seconds
    while True:
        health = parse_health(probe.metrics(url))
        _guard(health, cfg, "")
        if clock() >= end:
            return health
        sleep(min(10.0, max(0.0, end - clock())))


def watch_live(
    probe: Any,
    url: str,
    cfg: PipelineConfig,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    since: Counts,
) -> Health:
    """The canary's live traffic for the window: what it answered after `since` (the scrape taken when the router
    began sending it requests), guarded as `watch_canary`; at the end it must have answered at least
    `canary_min_requests`, or the route carried no traffic to it and nothing was checked."""
    serving = cfg.serving
    end = clock() + serving.canary_window_seconds
    while True:
        health = read_counts(probe.metrics(url)).since(since)
        _guard(health, cfg, f" over {health.requests:.0f} live requests")
        if clock() >= end:
            break
        sleep(min(10.0, max(0.0, end - clock())))
    if health.requests < serving.canary_min_requests:
        raise RolloutFailed(
            f"canary got {health.requests:.0f} live requests in {serving.canary_window_seconds}s, fewer than "
            f"canary_min_requests {serving.canary_min_requests}: the {serving.canary_router} route carried no traffic "
            "to it (is the route accepted by the gateway, and does it win over KServe's own for the host?)"
        )
    return health
