"""Shared test settings: no network, no GPU, quiet Paddle, a private MLflow store per test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# Nothing in the test suite may reach a model hub or a GPU.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PADDLENLP_OFFLINE", "1")
os.environ.setdefault("FLAGS_call_stack_level", "0")
os.environ.setdefault("GLOG_minloglevel", "2")


@pytest.fixture
def project_root() -> Path:
    return PROJECT_ROOT


@pytest.fixture
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PADDLE_MLOPS_HOME and MLflow in a temporary directory."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("PADDLE_MLOPS_HOME", str(home))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{home / 'mlflow.db'}")
    return home
