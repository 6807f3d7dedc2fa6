"""Shared test settings: no network, no GPU, quiet Paddle, a private MLflow store per test."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from paddle_mlops_core.contracts import HOME_ENV, TRACKING_URI_ENV

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# Nothing in the test suite may reach a model hub or a GPU.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PADDLENLP_OFFLINE", "1")
os.environ.setdefault("FLAGS_call_stack_level", "0")
os.environ.setdefault("GLOG_minloglevel", "2")


@pytest.fixture(scope="session", autouse=True)
def session_stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The embedded home of fixtures wider than a test (module-scoped ones are set up before any per-test fixture):
    nothing lands in the checkout's `.paddle-mlops/` or `mlruns/`, nor in a tracking server the shell points at."""
    home = tmp_path_factory.mktemp("session-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(HOME_ENV, str(home))
        mp.delenv(TRACKING_URI_ENV, raising=False)
        yield home


@pytest.fixture(autouse=True)
def private_stores(
    session_stores: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test its own embedded home (object store, MLflow SQLite store and its artifacts), unless a wider
    fixture chose the stores its tests share (a module's MLflow with a finished run)."""
    if os.environ.get(HOME_ENV) != str(session_stores) or os.environ.get(TRACKING_URI_ENV):
        return Path(os.environ[HOME_ENV])
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv(HOME_ENV, str(home))
    return home


@pytest.fixture(autouse=True)
def import_path() -> Iterator[None]:
    """`sys.path` as it was before the test. Loading an MLflow model whose MLmodel has `code` puts that `code/` first on
    `sys.path` for the rest of the process (mlflow/utils/model_utils.py `_add_code_to_system_path`): left there, a
    later test's process started by multiprocessing's spawn imports `steps` from a test's deleted, partial copy."""
    before = list(sys.path)
    yield
    sys.path[:] = before


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
