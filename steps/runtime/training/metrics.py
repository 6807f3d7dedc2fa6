"""The Prometheus naming scheme and the training metrics rank 0 exposes while it trains.

Naming scheme: `paddle_mlops_<subsystem>_<name>_<unit>` — subsystems `train` (this module),
`serving` (steps/runtime/serving/model_server) and `step` (Argo custom metrics,
pipelines/observability/argo_metrics.py, which the Argo controller exports with its own
`argo_workflows_` prefix). Base units only (`_seconds`, `_bytes`), `_total` on counters; labels
are small closed sets, never run ids.
The names themselves are defined once, in `paddle_mlops_core/contracts.py`.

`TrainingMetrics` uses its own `CollectorRegistry`, not the process-global one, so that two
instances (tests, a retried trainer in one process) never collide on registration and the
trainer's endpoint shows only training metrics.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server

from paddle_mlops_core import contracts

# Waits for the next batch: sub-millisecond when the loader keeps up, seconds when it starves the GPU.
DATALOADER_WAIT_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def default_host() -> str:
    """Loopback on a workstation; all interfaces in a pod, where Prometheus scrapes the pod IP.

    Kubernetes sets KUBERNETES_SERVICE_HOST in every container, which makes it a reliable signal.
    """
    return "0.0.0.0" if os.environ.get("KUBERNETES_SERVICE_HOST") else "127.0.0.1"


class TrainingMetrics:
    """Throughput, loss, progress, input-pipeline stalls and GPU memory of one training process."""

    def __init__(self, gpu: bool = False, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.samples_per_second = Gauge(
            contracts.TRAIN_SAMPLES_PER_SECOND,
            "Training samples processed per second in the last step",
            registry=r,
        )
        self.loss = Gauge(contracts.TRAIN_LOSS, "Training loss of the last optimizer step", registry=r)
        self.step = Gauge(contracts.TRAIN_STEP, "Optimizer steps done", registry=r)
        self.epoch = Gauge(contracts.TRAIN_EPOCH, "Current epoch (1-based)", registry=r)
        self.dataloader_wait = Histogram(
            contracts.TRAIN_DATALOADER_WAIT_SECONDS,
            "Time a step waited for its batch from the data loader",
            buckets=DATALOADER_WAIT_BUCKETS,
            registry=r,
        )
        # Only on GPU: a constant 0 on CPU would read as "no memory used" on the dashboard.
        self.gpu_memory = (
            Gauge(contracts.TRAIN_GPU_MEMORY_BYTES, "GPU memory allocated by this process", registry=r) if gpu else None
        )
        self._server: Any = None
        self._thread: Any = None

    def start(self, port: int = 0, host: str | None = None, port_file: str | Path | None = None) -> int:
        """Serve `/metrics` on `host:port` (port 0 picks a free one) and return the bound port.

        `port_file`, when given, receives the port as text so that a supervisor (the local
        executor, a test) can find an endpoint whose port was chosen by the OS.
        """
        if self._server is not None:
            return int(self._server.server_port)
        self._server, self._thread = start_http_server(port, addr=host or default_host(), registry=self.registry)
        actual = int(self._server.server_port)
        if port_file:
            target = Path(port_file)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".tmp")
            tmp.write_text(str(actual), encoding="utf-8")
            tmp.replace(target)  # readers never see a half-written port
        return actual

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def update(
        self,
        step: int,
        epoch: int,
        loss: float,
        samples: int,
        seconds: float,
        wait: float = 0.0,
        gpu_memory_bytes: float | None = None,
    ) -> None:
        """Record one optimizer step: `samples` processed in `seconds`, `wait` of it spent on the loader."""
        self.step.set(step)
        self.epoch.set(epoch)
        self.loss.set(loss)
        if seconds > 0:
            self.samples_per_second.set(samples / seconds)
        self.dataloader_wait.observe(max(wait, 0.0))
        if self.gpu_memory is not None:
            self.gpu_memory.set(gpu_memory_bytes if gpu_memory_bytes is not None else _paddle_gpu_memory())


def _paddle_gpu_memory() -> float:
    import paddle

    return float(paddle.device.cuda.memory_allocated())
