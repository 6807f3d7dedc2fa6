"""Checks the end-to-end tests share: the registered champion, loaded the way MLflow users load it, answers what
the model server answers (#62)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import httpx
import mlflow


def records(predictions: Any) -> list[dict[str, Any]]:
    """A pyfunc's predictions as the list of per-instance objects the V1 server answers."""
    if hasattr(predictions, "to_dict"):
        return predictions.to_dict(orient="records")
    return list(predictions)


def assert_same_answers(ours: list[dict[str, Any]], served: list[dict[str, Any]], tolerance: float = 1e-5) -> None:
    """Same labels (or entities) and probabilities (or scores) within `tolerance`."""
    assert len(ours) == len(served)
    for mine, theirs in zip(ours, served, strict=True):
        assert set(mine) == set(theirs), (mine, theirs)
        for key, value in theirs.items():
            _assert_close(mine[key], value, tolerance, key)


def _assert_close(mine: Any, theirs: Any, tolerance: float, where: str) -> None:
    if isinstance(theirs, float):
        assert math.isclose(float(mine), theirs, abs_tol=tolerance), (where, mine, theirs)
    elif isinstance(theirs, dict):
        assert set(mine) == set(theirs), where
        for key in theirs:
            _assert_close(mine[key], theirs[key], tolerance, f"{where}.{key}")
    elif isinstance(theirs, list):
        assert len(mine) == len(theirs), where
        for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            _assert_close(a, b, tolerance, f"{where}[{i}]")
    else:
        assert mine == theirs, (where, mine, theirs)


def champion_answers_like_the_server(
    workdir: Path, model: str, serving_url: str, instances: list[Any], frame: Any
) -> mlflow.pyfunc.PyFuncModel:
    """Load `models:/<model>@champion` from the run's tracking store and compare its predictions on `frame` with the
    served model's V1 answers to `instances`; returns the loaded model."""
    previous = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(f"sqlite:///{workdir / 'mlflow.db'}")
    try:
        loaded = mlflow.pyfunc.load_model(f"models:/{model}@champion")
    finally:
        mlflow.set_tracking_uri(previous or "")
    response = httpx.post(f"{serving_url}/v1/models/{model}:predict", json={"instances": instances}, timeout=60)
    assert response.status_code == 200, response.text
    assert_same_answers(records(loaded.predict(frame)), response.json()["predictions"])
    return loaded
