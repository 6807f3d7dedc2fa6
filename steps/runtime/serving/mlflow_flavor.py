"""MLflow's `python_function` flavour of an exported model: the loader module an `MLmodel` names.

`MLmodel` (written by steps/runtime/serving/mlflow_model.py) says `loader_module: steps.runtime.serving.mlflow_flavor`
and no `data`, so `mlflow.pyfunc.load_model(<model dir>)` calls `_load_pyfunc(<model dir>)`, which opens the export
with `steps.runtime.weights.ernie.ExportedModel`: the tokenizer, the engine the export's `engine.json` ranks first
among those this node runs, and the task type's post-processing, exactly as the model server does.

`predict` takes what the model server's V1 `instances` hold, in the shapes batch scoring uses:
- a pandas DataFrame with a string column `text` (text-classification, token-classification) or `text_a` and
  `text_b` (text-matching); other columns are ignored, so a scored CSV can keep its ids;
- a list of texts, or for matching a list of `{"text_a", "text_b"}` objects or of `[text_a, text_b]` pairs;
- a dict of columns (`{"text": [...]}`, `{"text_a": [...], "text_b": [...]}`; a single string per column is one row).

It returns a pandas DataFrame, one row per input row in input order, whose columns are the keys of the model
server's V1 answer (`label` and `probabilities`, a `{label: probability}` object; or `entities`, a list of
`{type, text, start, end, score}` with character offsets into the text sent). So `df.join(model.predict(df))`
scores a table, and MLflow's scoring server (`POST /invocations`), which answers a DataFrame as
`{"predictions": df.to_dict(orient="records")}`, answers `{"predictions": [...]}` with the same objects as
`POST /v1/models/<name>:predict`. Unlike the server it sets no request limits (instances per call, characters per
text): batch scoring is what this is for; rows run in batches of `serving.max_batch_size` (its default), as the
server's batcher groups them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

from paddle_mlops_core.config.serving import ServingConfig
from paddle_mlops_core.config.tasks import TEXT_MATCHING, TOKEN_CLASSIFICATION
from steps.runtime.data import tasks
from steps.runtime.weights.ernie import ExportedModel

BATCH_SIZE = ServingConfig().max_batch_size


def input_columns(task_type: str) -> tuple[str, ...]:
    """The columns a task type's rows are sent with: its split rows' keys less the target (`text`, or the pair)."""
    task = tasks.for_type(task_type)
    return tuple(k for k in task.row_keys if k != task.target_key)


class ErniePyfunc:
    """What `mlflow.pyfunc.load_model` wraps: an `ExportedModel` answering rows as the model server's V1 does."""

    def __init__(self, model: ExportedModel) -> None:
        self.model = model
        self.columns = input_columns(model.task_type)

    def get_raw_model(self) -> ExportedModel:
        """The `ExportedModel` (MLflow's `PyFuncModel.get_raw_model`)."""
        return self.model

    def predict(self, model_input: Any, params: dict[str, Any] | None = None) -> pd.DataFrame:
        """One answer row per input row (module docstring); MlflowException for input of another shape."""
        instances = self.instances(model_input)
        answers: list[dict[str, Any]] = []
        for start in range(0, len(instances), BATCH_SIZE):
            answers += self.model.predict(instances[start : start + BATCH_SIZE])
        index = model_input.index if isinstance(model_input, pd.DataFrame) else None
        return pd.DataFrame.from_records(answers, index=index, columns=self._answer_columns())

    def _answer_columns(self) -> list[str]:
        """The V1 answer's keys (steps/runtime/serving/model_server/shapes.py), also for an empty input."""
        return ["entities"] if self.model.task_type == TOKEN_CLASSIFICATION else ["label", "probabilities"]

    def frame(self, instances: Sequence[Any]) -> pd.DataFrame:
        """V1 instances (texts, or pairs) as the DataFrame `predict` takes."""
        return pd.DataFrame([self._row(i, item) for i, item in enumerate(instances)], columns=list(self.columns))

    def instances(self, model_input: Any) -> list[Any]:
        """The V1 instances (texts, or `{"text_a", "text_b"}` pairs) of `model_input`."""
        rows = self._rows(model_input)
        for i, row in enumerate(rows):
            for column in self.columns:
                value = row.get(column)
                if not isinstance(value, str):
                    raise self._error(f"row {i} column {column!r} is {_shown(value)}, not a string")
        return [tasks.for_type(self.model.task_type).instance(dict(row)) for row in rows]

    def _rows(self, model_input: Any) -> list[Mapping[str, Any]]:
        if isinstance(model_input, pd.DataFrame):
            missing = [c for c in self.columns if c not in model_input.columns]
            if missing:
                raise self._error(f"the DataFrame has no column {', '.join(map(repr, missing))} "
                                  f"(its columns: {', '.join(map(str, model_input.columns)) or 'none'})")  # fmt: skip
            return model_input[list(self.columns)].to_dict(orient="records")  # type: ignore[return-value]
        if isinstance(model_input, Mapping):
            return self._columns(model_input)
        if isinstance(model_input, str):
            model_input = [model_input]
        if isinstance(model_input, (list, tuple, pd.Series)) or hasattr(model_input, "tolist"):
            return [self._row(i, item) for i, item in enumerate(list(model_input))]
        raise self._error(f"got a {type(model_input).__name__}")

    def _columns(self, data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        missing = [c for c in self.columns if c not in data]
        if missing:
            raise self._error(f"the input has no key {', '.join(map(repr, missing))} (its keys: "
                              f"{', '.join(map(str, data)) or 'none'})")  # fmt: skip
        columns = {c: [data[c]] if isinstance(data[c], str) else list(data[c]) for c in self.columns}
        lengths = {len(v) for v in columns.values()}
        if len(lengths) > 1:
            raise self._error(
                f"the columns have different lengths ({', '.join(f'{c}: {len(v)}' for c, v in columns.items())})"
            )
        return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]

    def _row(self, i: int, item: Any) -> Mapping[str, Any]:
        if self.model.task_type != TEXT_MATCHING:
            return {self.columns[0]: item}
        if isinstance(item, Mapping):
            return item
        if isinstance(item, (list, tuple)) and len(item) == 2:
            return dict(zip(self.columns, item, strict=True))
        raise self._error(f"row {i} is {_shown(item)}, not a pair")

    def _error(self, what: str) -> MlflowException:
        shape = (
            "a DataFrame with string columns 'text_a' and 'text_b', a list of {'text_a': ..., 'text_b': ...} "
            "objects or [text_a, text_b] pairs, or {'text_a': [...], 'text_b': [...]}"
            if self.model.task_type == TEXT_MATCHING
            else "a DataFrame with a string column 'text', a list of texts, or {'text': [...]}"
        )
        return MlflowException(
            f"{self.model.task_type} model {self.model.model_dir}: cannot score the input: {what}. Send {shape}.",
            error_code=INVALID_PARAMETER_VALUE,
        )


def _shown(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "missing"
    return f"a {type(value).__name__}"


def _load_pyfunc(path: str | os.PathLike[str]) -> ErniePyfunc:
    """MLflow's entry point: the model directory itself (MLmodel's python_function flavour has no `data`)."""
    return ErniePyfunc(ExportedModel(path))
