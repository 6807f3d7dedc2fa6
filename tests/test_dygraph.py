"""Dense transpose kernels while training on CPU (steps/runtime/training/dygraph.py).

Upstream: Paddle 3.3 paddle/phi/kernels/cpu/strided_copy_kernel.cc copies a strided view one element at a time
(a division and a modulo per dimension per element); with FLAGS_use_stride_kernel off a transpose runs the dense
kernel and returns a contiguous tensor. These tests pin what the trainer relies on: the flag is off while it
trains on CPU and as before afterwards, a user's environment setting wins, and training gives the same numbers.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest
from fixtures_ernie import common, prepared_workspace

from steps.runtime.training import dygraph

FLAG = dygraph.STRIDE_FLAG


def stride_flag() -> bool:
    import paddle

    return bool(paddle.get_flags([FLAG])[FLAG])


def test_the_flag_is_off_inside_and_as_before_after(monkeypatch: pytest.MonkeyPatch) -> None:
    import paddle

    monkeypatch.delenv(FLAG, raising=False)
    assert stride_flag() is True  # Paddle's default
    with dygraph.dense_kernels_on_cpu(use_gpu=False) as changed:
        assert changed is True and stride_flag() is False
        x = paddle.arange(24, dtype="float32").reshape([2, 3, 4])
        # the transpose is a dense copy now, not a view of x
        assert x.transpose([0, 2, 1]).is_contiguous()
    assert stride_flag() is True
    with pytest.raises(RuntimeError), dygraph.dense_kernels_on_cpu(use_gpu=False):
        raise RuntimeError("training failed")
    assert stride_flag() is True


def test_a_gpu_or_the_users_environment_keeps_paddles_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FLAG, raising=False)
    with dygraph.dense_kernels_on_cpu(use_gpu=True) as changed:
        assert changed is False and stride_flag() is True
    monkeypatch.setenv(FLAG, "1")
    with dygraph.dense_kernels_on_cpu(use_gpu=False) as changed:
        assert changed is False and stride_flag() is True


def _train_steps(dense: bool, steps: int = 4) -> tuple[list[float], dict[str, np.ndarray]]:
    """A few AdamW steps of a small ERNIE on random batches of varying length; the losses and the parameters."""
    import paddle
    import paddle.nn.functional as F

    from paddle_mlops_core.config.inputs import ModelConfig
    from steps.runtime.weights import ernie

    paddle.seed(7)
    model = ernie.build_model(ModelConfig(hidden_size=32, num_hidden_layers=2, intermediate_size=64), 300, 2)
    optimizer = paddle.optimizer.AdamW(learning_rate=1e-3, parameters=model.parameters())
    rng = np.random.default_rng(0)
    losses = []
    with dygraph.dense_kernels_on_cpu(use_gpu=False) if dense else nullcontext():
        assert stride_flag() is (not dense)
        for _ in range(steps):
            length = int(rng.integers(5, 40))
            ids = paddle.to_tensor(rng.integers(1, 300, (8, length)).astype("int64"))
            labels = paddle.to_tensor(rng.integers(0, 2, (8,)).astype("int64"))
            loss = F.cross_entropy(model(ids, token_type_ids=paddle.zeros_like(ids)), labels).mean()
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
            losses.append(float(loss))
    return losses, {k: v.numpy() for k, v in model.state_dict().items()}


def test_training_with_dense_kernels_gives_the_same_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FLAG, raising=False)
    strided_losses, strided = _train_steps(dense=False)
    dense_losses, dense = _train_steps(dense=True)
    assert dense_losses == strided_losses
    assert strided.keys() == dense.keys()
    for name in strided:
        np.testing.assert_array_equal(dense[name], strided[name], err_msg=name)


@pytest.mark.slow
def test_the_trainer_trains_on_cpu_with_dense_kernels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from steps import train
    from steps.runtime.training import optimization

    monkeypatch.delenv(FLAG, raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    ws = prepared_workspace(tmp_path)
    seen: list[bool] = []
    step_gradients = optimization.step_gradients

    def recording(*args: object, **kwargs: object) -> object:
        seen.append(stride_flag())
        return step_gradients(*args, **kwargs)

    monkeypatch.setattr(optimization, "step_gradients", recording)
    assert train.main([*common("training.max_steps=3"), "--workspace", str(ws)]) == 0
    assert seen == [False, False, False]
    assert stride_flag() is True  # as it was, for whatever this process runs next
    assert json.loads((ws / "model" / "training.json").read_text())["global_steps"] == 3
