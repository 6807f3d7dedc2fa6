"""The trivial python model benchmarks/published_model.py saves as the MLflow files: text -> its length.

A module of its own so that the pickled model refers to an importable class, not to `__main__`."""

from __future__ import annotations

from typing import Any

import mlflow


class TextLength(mlflow.pyfunc.PythonModel):
    def predict(self, context: Any, model_input: Any, params: Any = None) -> list[int]:
        return [len(str(text)) for text in list(model_input)]
