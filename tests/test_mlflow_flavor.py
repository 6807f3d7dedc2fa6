"""Every export is an MLflow model (#62 item 1): `mlflow.pyfunc.load_model` and MLflow's scoring server answer what
the model server answers, the signature says what it takes and returns, `mlflow.paddle` loads the export, bad input
gets a clear error, and requirements.txt pins the installed versions of what loading imports.

MLflow's side is read from its own source (mlflow 3.17, the locked version): mlflow/pyfunc/__init__.py `load_model`
passes `os.path.join(local_path, conf["data"])` to the loader module's `_load_pyfunc`, or the model directory itself
when the python_function conf has no `data` key (`data_path = ... if (DATA in conf) else local_path`), and prepends
the conf's `code` folder to sys.path; mlflow/paddle/__init__.py `load_model` reads the `paddle` flavour's
`pickled_model` and returns `paddle.jit.load(<model dir>/<pickled_model>)`; mlflow/pyfunc/scoring_server/__init__.py
answers `{"predictions": _get_jsonable_obj(raw, pandas_orient="records")}`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml
from fastapi.testclient import TestClient
from mlflow.exceptions import MlflowException
from mlflow.pyfunc import scoring_server
from mlflow.types import DataType

from paddle_mlops_core.config.serving import ServingConfig
from steps import evaluate
from steps.runtime.caching import keys
from steps.runtime.serving import mlflow_model
from steps.runtime.serving import model_server as serving
from tests.fixtures_ernie import make_exported_model
from tests.serving_fixtures import client, quiet_kserve  # noqa: F401 — quiet_kserve is autouse

NER_LABELS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG")
TEXTS = ("江泽民在北京会见安南", "花呗怎么还款", "花呗如何还钱", "国务院总理李鹏抵达上海")
SENTIMENT = "text-classification"
NER = "token-classification"
MATCHING = "text-matching"
TASKS = (SENTIMENT, NER, MATCHING)
# What a client sends per task (the V1 instances), a NER text longer than one window of 6 characters.
INSTANCES: dict[str, list[Any]] = {
    SENTIMENT: ["花呗怎么还款", "北京会见", "江泽民"],
    NER: ["国务院总理李鹏昨天抵达上海，江泽民在北京会见安南", "安南", "李鹏"],
    MATCHING: [{"text_a": "花呗怎么还款", "text_b": "花呗如何还钱"}, {"text_a": "北京", "text_b": "上海"}],
}


@functools.cache
def mlflow_export(task: str) -> Path:
    """A tiny random-weight export of `task` with the MLflow files written into it (as evaluate writes them)."""
    labels = NER_LABELS if task == NER else ("0", "1")
    directory = Path(tempfile.mkdtemp(prefix=f"mlflow-{task}-")) / "model"
    make_exported_model(directory, labels=labels, texts=TEXTS, max_seq_len=8, task=task)
    mlflow_model.write(directory, INSTANCES[task])
    return directory


def v1_answer(task: str, instances: list[Any]) -> list[dict[str, Any]]:
    """What the model server (ErnieModel, in process, over HTTP V1) answers for `instances`."""
    model = serving.ErnieModel("ernie", ServingConfig(), model_dir=str(mlflow_export(task)))
    model.load()
    app = serving.create_app([model], model.cfg.max_request_bytes)

    async def go() -> Any:
        async with client(app) as c:
            resp = await c.post("/v1/models/ernie:predict", json={"instances": instances})
            assert resp.status_code == 200, resp.text
            return resp.json()["predictions"]

    return asyncio.run(go())


def assert_same_answers(got: list[dict[str, Any]], served: list[dict[str, Any]]) -> None:
    """Same labels and entities, probabilities within 1e-5 (the issue's bar)."""
    assert len(got) == len(served)
    for mine, theirs in zip(got, served, strict=True):
        assert set(mine) == set(theirs)
        if "entities" in theirs:
            assert mine["entities"] == theirs["entities"]
            continue
        assert mine["label"] == theirs["label"]
        assert list(mine["probabilities"]) == list(theirs["probabilities"])
        for label, p in theirs["probabilities"].items():
            assert mine["probabilities"][label] == pytest.approx(p, abs=1e-5)


def frame(task: str) -> pd.DataFrame:
    """The instances as a table to batch-score, with an id column the model ignores."""
    rows = [x if isinstance(x, dict) else {"text": x} for x in INSTANCES[task]]
    return pd.DataFrame([{"id": i, **row} for i, row in enumerate(rows)])


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS)
def test_pyfunc_predicts_what_the_model_server_answers(task: str) -> None:
    served = v1_answer(task, INSTANCES[task])
    model = mlflow.pyfunc.load_model(str(mlflow_export(task)))  # the directory itself: MLmodel has no `data`
    table = frame(task)
    answers = model.predict(table)
    assert isinstance(answers, pd.DataFrame) and list(answers.index) == list(table.index)
    assert_same_answers(answers.to_dict(orient="records"), served)
    # batch scoring keeps the caller's columns beside the answers
    assert list(table.join(answers).columns[:2]) == ["id", table.columns[1]]
    # the V1 instances themselves, as the loader module takes them
    assert_same_answers(model._model_impl.predict(INSTANCES[task]).to_dict(orient="records"), served)
    if task == MATCHING:  # pairs as [text_a, text_b] lists, and columns
        pairs = [[p["text_a"], p["text_b"]] for p in INSTANCES[task]]
        assert_same_answers(model._model_impl.predict(pairs).to_dict(orient="records"), served)
        columns = {k: [p[k] for p in INSTANCES[task]] for k in ("text_a", "text_b")}
        assert_same_answers(model._model_impl.predict(columns).to_dict(orient="records"), served)
        assert_same_answers(model.predict(INSTANCES[task]).to_dict(orient="records"), served)
    else:
        assert_same_answers(model._model_impl.predict({"text": INSTANCES[task]}).to_dict(orient="records"), served)
    assert model.metadata.metadata["engine"] == "paddle-fp32" and model.metadata.metadata["task"] == task


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS)
def test_mlflows_scoring_server_answers_what_the_model_server_answers(task: str) -> None:
    """`mlflow models serve`'s app (mlflow/pyfunc/scoring_server/__init__.py `init`), in process."""
    served = v1_answer(task, INSTANCES[task])
    app = scoring_server.init(mlflow.pyfunc.load_model(str(mlflow_export(task))))
    records = frame(task).drop(columns="id").to_dict(orient="records")
    with TestClient(app) as http:
        for body in ({"instances": INSTANCES[task]}, {"dataframe_records": records}):
            resp = http.post("/invocations", json=body)
            assert resp.status_code == 200, resp.text
            assert set(resp.json()) == {"predictions"}
            assert_same_answers(resp.json()["predictions"], served)
        example = (mlflow_export(task) / "serving_input_example.json").read_text(encoding="utf-8")
        resp = http.post("/invocations", content=example, headers={"Content-Type": "application/json"})
        assert resp.status_code == 200 and len(resp.json()["predictions"]) == len(INSTANCES[task])


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS)
def test_the_signature_is_what_the_served_model_takes_and_returns(task: str) -> None:
    directory = mlflow_export(task)
    model = serving.ErnieModel("ernie", ServingConfig(), model_dir=str(directory))
    model.load()
    signature = mlflow.models.Model.load(str(directory)).signature
    assert signature is not None
    assert [c.name for c in signature.inputs.inputs] == [t["name"] for t in model.get_input_types()]
    assert {c.type for c in signature.inputs.inputs} == {DataType.string}
    outputs = {c.name: c.type for c in signature.outputs.inputs}
    assert list(outputs) == [t["name"] for t in model.get_output_types()]
    if task == NER:
        entity = outputs["entities"].to_dict()["items"]
        assert set(entity["properties"]) == {"type", "text", "start", "end", "score"}
    else:
        assert set(outputs["probabilities"].to_dict()["properties"]) == {"0", "1"}
    # the input example: real rows, as the model takes them
    example = json.loads((directory / "input_example.json").read_text(encoding="utf-8"))
    assert example["columns"] == [c.name for c in signature.inputs.inputs]
    sent = [x if isinstance(x, str) else [x["text_a"], x["text_b"]] for x in INSTANCES[task]]
    assert [row[0] if len(row) == 1 else row for row in example["data"]] == sent[: mlflow_model.EXAMPLE_ROWS]


@pytest.mark.slow
def test_mlflow_paddle_loads_the_export(monkeypatch: pytest.MonkeyPatch) -> None:
    """The `paddle` flavour (mlflow/paddle/__init__.py `load_model`): the export's jit layer, same logits as served."""
    monkeypatch.setenv("MLFLOW_ALLOW_PICKLE_DESERIALIZATION", "true")  # paddle.jit.load may unpickle
    import paddle

    from steps.runtime.weights.ernie import ExportedModel

    directory = mlflow_export(SENTIMENT)
    layer = mlflow.paddle.load_model(str(directory))
    exported = ExportedModel(directory)
    ids = np.array([[1, 5, 6, 2]], dtype="int64")
    logits = layer(paddle.to_tensor(ids), paddle.to_tensor(np.zeros_like(ids)))
    assert np.allclose(np.asarray(logits), exported.logits(ids), atol=1e-5)
    conf = mlflow.models.Model.load(str(directory)).flavors["paddle"]
    assert conf["pickled_model"] == "inference" and conf["paddle_version"] == paddle.__version__


@pytest.mark.slow
def test_bad_input_gets_a_clear_error() -> None:
    model = mlflow.pyfunc.load_model(str(mlflow_export(SENTIMENT)))
    with pytest.raises(MlflowException, match=r"row 1 column 'text' is missing, not a string.*Send a DataFrame"):
        model.predict(pd.DataFrame({"text": ["好", None]}))
    with pytest.raises(MlflowException, match=r"missing inputs \['text'\]"):  # MLflow's signature check
        model.predict(pd.DataFrame({"review": ["好"]}))
    with pytest.raises(MlflowException, match=r"no key 'text'.*its keys: review"):
        model._model_impl.predict({"review": ["好"]})
    pairs = mlflow.pyfunc.load_model(str(mlflow_export(MATCHING)))
    with pytest.raises(MlflowException, match=r"row 0 is a list, not a pair.*\[text_a, text_b\] pairs"):
        pairs._model_impl.predict([["a", "b", "c"]])
    with pytest.raises(MlflowException, match=r"different lengths \(text_a: 2, text_b: 1\)"):
        pairs._model_impl.predict({"text_a": ["a", "b"], "text_b": ["c"]})
    with TestClient(scoring_server.init(model)) as http:
        resp = http.post("/invocations", json={"dataframe_records": [{"text": "好"}, {"text": None}]})
        assert resp.status_code == 400 and "row 1 column 'text' is missing" in resp.json()["message"]


@pytest.mark.slow
def test_requirements_pin_the_installed_versions_of_what_loading_imports(tmp_path: Path) -> None:
    directory = mlflow_export(SENTIMENT)
    pins = dict(line.split("==") for line in (directory / "requirements.txt").read_text().splitlines())
    assert pins == {dist: metadata.version(dist) for dist in pins}
    assert {"paddlepaddle", "paddlenlp", "numpy", "pandas", "mlflow", "pydantic"} <= set(pins)
    # not the dev environment, nor engines the ranking does not need (this export has no engine.json)
    assert not {"pytest", "ruff", "mypy", "hera", "kubernetes", "onnxruntime", "openvino", "mlflow-skinny"} & set(pins)
    conda = yaml.safe_load((directory / "conda.yaml").read_text())
    assert conda["dependencies"][-1]["pip"] == (directory / "requirements.txt").read_text().splitlines()
    # an export whose ranking serves ONNX Runtime first needs it
    ranked = tmp_path / "model"
    ranked.mkdir()
    (ranked / "engine.json").write_text(json.dumps({"ranking": ["onnx-int8", "paddle-fp32"]}))
    assert f"onnxruntime=={metadata.version('onnxruntime')}" in mlflow_model.requirements(ranked)


@pytest.mark.slow
def test_the_model_loads_from_its_directory_without_this_checkout(tmp_path: Path) -> None:
    """`code/` holds the loader's import closure: a process that cannot import the project (its editable install
    hidden, run from elsewhere, no PYTHONPATH) loads the model and answers as the server does."""
    directory = mlflow_export(SENTIMENT)
    closure = {p.relative_to(keys.PROJECT_ROOT).as_posix() for p in keys.module_closure(mlflow_model.LOADER_MODULE)}
    bundled = {p.relative_to(directory / "code").as_posix() for p in (directory / "code").rglob("*") if p.is_file()}
    assert bundled == closure
    script = (
        "import sys, json\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in getattr(f, '__module__', '')]\n"
        "import mlflow\n"
        f"m = mlflow.pyfunc.load_model({str(directory)!r})\n"
        "import steps; assert steps.__file__.startswith(" + repr(str(directory / "code")) + "), steps.__file__\n"
        f"print(json.dumps(m._model_impl.predict({INSTANCES[SENTIMENT]!r}).to_dict(orient='records')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-I", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_answers(json.loads(done.stdout.strip().splitlines()[-1]), v1_answer(SENTIMENT, INSTANCES[SENTIMENT]))


@pytest.mark.slow
def test_writing_again_writes_the_same_bytes_and_evaluate_keys_leave_them_out(tmp_path: Path) -> None:
    """Same export, same files (a re-publish sends nothing); evaluate's key does not see them."""
    directory = make_exported_model(tmp_path / "model")
    before = keys.dir_digest(directory, exclude=evaluate.selection_files())
    written = mlflow_model.write(directory, INSTANCES[SENTIMENT])
    assert set(written) == set(mlflow_model.FILES) <= evaluate.selection_files()
    first = keys.dir_digest(directory)
    assert mlflow_model.write(directory, INSTANCES[SENTIMENT]) == written
    assert keys.dir_digest(directory) == first
    assert keys.dir_digest(directory, exclude=evaluate.selection_files()) == before
