"""What a checkpoint holds, captured at a step boundary and restored on resume.

`capture` runs on the training thread, synchronously: it copies the parameters, the optimizer's accumulators and LR
schedule, the AMP loss scaler and the random number generators' states (Python, NumPy, Paddle's CPU and GPU
generators) off the live objects, so the training can go on while another thread serialises and uploads them.
Restoring the generators, not reseeding them, is what makes a resumed run draw the same dropout masks as an
uninterrupted one, and so end with the same parameters.
"""

from __future__ import annotations

import json
import pickle
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

STATE_FILE = "state.json"  # step, data position, best-on-dev so far, MLflow run id, batch layout (readable)
RNG_FILE = "rng.pkl"
ARRAYS = ("model", "optimizer", "best")  # <name>.pdparams


def _host_copy(value: Any) -> Any:
    """Tensors as NumPy arrays (a copy: `Tensor.numpy()` never shares memory), nested dicts walked."""
    if isinstance(value, dict):
        return {key: _host_copy(item) for key, item in value.items()}
    numpy = getattr(value, "numpy", None)
    return numpy() if callable(numpy) else value


def rng_states(use_gpu: bool) -> dict[str, Any]:
    import paddle

    states: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(),
                              "paddle_cpu": paddle.get_rng_state("cpu")}  # fmt: skip
    if use_gpu:
        states["paddle_gpu"] = paddle.get_cuda_rng_state()
    return states


def set_rng_states(states: dict[str, Any], use_gpu: bool) -> None:
    import paddle

    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    paddle.set_rng_state(states["paddle_cpu"], "cpu")
    if use_gpu and "paddle_gpu" in states:
        paddle.set_cuda_rng_state(states["paddle_gpu"])


@dataclass
class Snapshot:
    """One checkpoint, in host memory: the arrays, the generators' states, and `meta` (JSON)."""

    step: int
    arrays: dict[str, Any]
    rng: dict[str, Any]
    meta: dict[str, Any]

    def write(self, directory: Path) -> None:
        """The checkpoint's files: `<array>.pdparams` (paddle.save), `rng.pkl`, `state.json`."""
        import paddle

        directory.mkdir(parents=True, exist_ok=True)
        for name, value in self.arrays.items():
            paddle.save(value, str(directory / f"{name}.pdparams"), protocol=4)
        (directory / RNG_FILE).write_bytes(pickle.dumps(self.rng, protocol=4))
        (directory / STATE_FILE).write_text(json.dumps(self.meta, indent=2, ensure_ascii=False))


def capture(
    step: int, model: Any, optimizer: Any, scaler: Any, best: Any, meta: dict[str, Any], use_gpu: bool
) -> Snapshot:
    """Copy the training state off the live objects (the caller continues training as soon as this returns)."""
    arrays: dict[str, Any] = {"model": _host_copy(model.state_dict()), "optimizer": _host_copy(optimizer.state_dict())}
    if best is not None:
        arrays["best"] = best
    if scaler is not None:
        meta = {**meta, "scaler": _host_copy(scaler.state_dict())}
    return Snapshot(step, arrays, rng_states(use_gpu), {**meta, "step": step})


def load(step: int, directory: Path) -> Snapshot:
    """The checkpoint of `step` that `Snapshot.write` wrote into `directory`."""
    import paddle

    arrays = {name: paddle.load(str(directory / f"{name}.pdparams"), return_numpy=True)
              for name in ARRAYS if (directory / f"{name}.pdparams").is_file()}  # fmt: skip
    rng = pickle.loads((directory / RNG_FILE).read_bytes())  # noqa: S301 - our own file, verified by its sha256
    return Snapshot(step, arrays, rng, json.loads((directory / STATE_FILE).read_text()))


def restore(arrays: dict[str, Any], model: Any, optimizer: Any, scaler: Any, meta: dict[str, Any]) -> None:
    """Parameters, optimizer (accumulators and LR schedule) and loss scaler back in place."""
    model.set_state_dict(arrays["model"])
    optimizer.set_state_dict(arrays["optimizer"])
    if scaler is not None and meta.get("scaler"):
        scaler.load_state_dict(meta["scaler"])
