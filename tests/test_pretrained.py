"""model.pretrained: PaddleNLP's from_pretrained path, from a directory or an s3:// prefix, offline."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import pytest
from fixtures_ernie import common, tiny_ernie_config, train_args
from s3server import moto_s3_server
from test_train import write_workspace

from steps import train

pytestmark = pytest.mark.slow


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection off this machine (a model hub download) fails the test; moto on loopback is fine."""
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: object) -> None:
        host = address[0] if isinstance(address, tuple) else ""
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"network access to {address} during a test")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


@pytest.fixture
def tracking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")


def save_pretrained(ws: Path, directory: Path) -> dict[str, np.ndarray]:
    """A tiny ERNIE (hidden 32, one layer) and its tokenizer saved the way PaddleNLP publishes models."""
    from paddlenlp.transformers import ErnieModel

    from steps.runtime.weights import ernie

    tokenizer = ernie.load_tokenizer(ws / "data" / "vocab.txt")
    config = tiny_ernie_config(tokenizer, 64)
    model = ErnieModel(config)  # a backbone, as published: the classifier head is new at fine-tuning
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return {f"ernie.{k}": v.numpy() for k, v in model.state_dict().items()}


def train_pretrained(ws: Path, location: str, dump: Path, *overrides: str) -> dict:
    steps = ("training.max_steps=2", "training.learning_rate=0.00001")
    assert train.main(train_args(ws, dump, f"model.pretrained={location}", *steps, *overrides)) == 0
    return json.loads((ws / "model" / "model_config.json").read_text())


def assert_started_from(pretrained: dict[str, np.ndarray], dump: Path) -> None:
    trained = np.load(dump)
    assert "classifier.weight" in trained.files
    for name, value in pretrained.items():
        # two steps at lr 1e-5 move no weight further than ~2e-5 from where it was loaded
        np.testing.assert_allclose(trained[name], value, atol=1e-4, err_msg=name)


def test_pretrained_from_a_directory(offline: None, tracking: None, tmp_path: Path) -> None:
    from steps.runtime.weights.ernie import ExportedModel

    ws = write_workspace(tmp_path / "ws", n_train=32, n_dev=8, n_test=8)
    weights = save_pretrained(ws, tmp_path / "pretrained")
    config = train_pretrained(ws, str(tmp_path / "pretrained"), tmp_path / "dump.npz")
    assert (config["hidden_size"], config["pretrained"]) == (32, str(tmp_path / "pretrained"))
    assert_started_from(weights, tmp_path / "dump.npz")
    predictions = ExportedModel(ws / "model").predict(["手机很好"])
    assert predictions[0]["label"] in ("negative", "positive")


def test_pretrained_from_s3(offline: None, tracking: None, tmp_path: Path) -> None:
    from steps.runtime.storage import s3, workspace

    ws = write_workspace(tmp_path / "ws", n_train=32, n_dev=8, n_test=8)
    weights = save_pretrained(ws, tmp_path / "pretrained")
    with moto_s3_server() as endpoint:
        s3.client(endpoint).create_bucket(Bucket="models")
        workspace.stage_out(tmp_path / "pretrained", "s3://models/ernie-tiny", endpoint)
        train_pretrained(ws, "s3://models/ernie-tiny", tmp_path / "dump.npz", f"storage.endpoint_url={endpoint}")
    assert_started_from(weights, tmp_path / "dump.npz")


def test_pretrained_location_without_weights_is_a_user_error(
    offline: None, tracking: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = write_workspace(tmp_path / "ws", n_train=32, n_dev=8, n_test=8)
    (tmp_path / "empty").mkdir()
    args = [*common(f"model.pretrained={tmp_path / 'empty'}"), "--workspace", str(ws)]
    assert train.main(args) == 2
    assert "has no config.json" in capsys.readouterr().err


def test_pretrained_from_a_mounted_claim(
    offline: None, tracking: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pvc://CLAIM/path reads <mount>/CLAIM/path, where the training pods mount the claim read-only."""
    ws = write_workspace(tmp_path / "ws", n_train=32, n_dev=8, n_test=8)
    weights = save_pretrained(ws, tmp_path / "mnt" / "ernie-weights" / "tiny")
    monkeypatch.setenv("PADDLE_MLOPS_PRETRAINED_MOUNT", str(tmp_path / "mnt"))
    train_pretrained(ws, "pvc://ernie-weights/tiny", tmp_path / "dump.npz")
    assert_started_from(weights, tmp_path / "dump.npz")


def test_an_unmounted_claim_is_a_user_error(
    tracking: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = write_workspace(tmp_path / "ws", n_train=32, n_dev=8, n_test=8)
    monkeypatch.setenv("PADDLE_MLOPS_PRETRAINED_MOUNT", str(tmp_path / "nothing-here"))
    args = [*common("model.pretrained=pvc://ernie-weights/tiny"), "--workspace", str(ws)]
    assert train.main(args) == 2
    err = capsys.readouterr().err
    assert "not mounted" in err and "only in the cluster's training pods" in err
