"""The model server's Prometheus series: requests, latency, batch sizes and errors.

Module-level: prometheus_client's default registry is what kserve's `/metrics` handler exports,
and a collector may be registered there only once per process.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from paddle_mlops_core.contracts import (
    SERVING_BATCH_SIZE,
    SERVING_ENGINE_INFO,
    SERVING_ERRORS_TOTAL,
    SERVING_REQUEST_LATENCY_SECONDS,
    SERVING_REQUESTS_TOTAL,
)

REQUESTS = Counter(SERVING_REQUESTS_TOTAL, "Inference requests answered", ["protocol", "code"])
LATENCY = Histogram(
    SERVING_REQUEST_LATENCY_SECONDS,
    "Inference request latency, receive to response",
    ["protocol"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
BATCH_SIZE = Histogram(
    SERVING_BATCH_SIZE,
    "Texts per model call after dynamic batching",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
ERRORS = Counter(SERVING_ERRORS_TOTAL, "Requests that failed, by reason", ["reason"])
ENGINE = Gauge(
    SERVING_ENGINE_INFO,
    "1 for the engine variant serving a model; fallback=true when the node could not run the chosen one",
    ["model", "engine", "precision", "fallback"],
)
