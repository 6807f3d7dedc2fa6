"""evaluate's MLflow 3 LoggedModel (steps/runtime/training/model_tracking.py): one external model per training run
and export, its test metrics and baseline comparison linked to it and to the test split's dataset input, found
again (not created twice) by a restored or retried evaluate.

MLflow 3.17 semantics read from its source: `mlflow/tracking/fluent.py` create_external_model (tag
`mlflow.model.isExternal`, READY at once), `mlflow/store/tracking/sqlalchemy_store.py` `_log_model_metrics` (a
metric with a model_id goes to the model's metrics with its dataset name and digest) and `log_outputs` (what the
run page lists as its logged models)."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest
from fixtures_ernie import common, make_exported_model, prepared_workspace

from steps import evaluate
from steps.runtime.training import model_tracking, tracking

MODEL_NAME = "ernie-sentiment"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A tiny workspace whose training run logged its splits as dataset inputs and its main parameters, in a
    module-wide SQLite MLflow."""
    ws = prepared_workspace(tmp_path_factory.mktemp("tracked"))
    make_exported_model(ws / "model")
    store = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{store / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.setenv("PADDLE_MLOPS_HOME", str(tmp_path_factory.mktemp("home")))
        mlflow.set_tracking_uri(uri)
        experiment = mlflow.create_experiment(MODEL_NAME, artifact_location=(store / "mlruns").as_uri())
        stats = json.loads((ws / "data" / "stats.json").read_text())
        with mlflow.start_run(experiment_id=experiment, tags={"task": "sentiment", "git_sha": "abc"}) as run:
            mlflow.log_params({"model.hidden_size": 32, "training.learning_rate": 0.001, "data.rows": 64})
            tracking.log_datasets(ws / "data", str(ws / "data"), stats)
        (ws / "model" / "training.json").write_text(json.dumps({"mlflow_run_id": run.info.run_id}))
        yield ws, run.info.run_id, experiment, mlflow.MlflowClient(uri)


def _evaluate(ws: Path, out: Path, *extra: str) -> dict:
    args = [*common("gate.threshold=0.0"), "--workspace", str(ws), "--outputs-dir", str(out), *extra]
    assert evaluate.main(args) == 0
    return json.loads((out / "metrics").read_text())


def _models(experiment: str) -> list:
    return mlflow.search_logged_models(experiment_ids=[experiment], output_format="list")


def test_the_trained_model_is_a_logged_model_with_its_test_metrics_on_the_test_split(trained, tmp_path) -> None:  # type: ignore[no-untyped-def]
    ws, run_id, experiment, client = trained
    cache = tmp_path / "cache"
    metrics = _evaluate(ws, tmp_path / "first", "--step-cache", str(cache))
    model_id = json.loads((ws / "eval" / model_tracking.RECORD).read_text())["model_id"]

    [model] = _models(experiment)
    assert model.model_id == model_id and model.source_run_id == run_id and model.name == MODEL_NAME
    assert model.model_type == "text-classification" and model.status.to_int() == 2  # READY
    assert model.tags["mlflow.model.isExternal"] == "true"  # its bytes are the published version
    assert model.params == {"model.hidden_size": "32", "training.learning_rate": "0.001"}
    test_input = next(i for i in client.get_run(run_id).inputs.dataset_inputs if i.dataset.name == "test")
    by_name = {m.key: m for m in model.metrics}
    accuracy = by_name["test_accuracy"]
    assert accuracy.value == pytest.approx(metrics["accuracy"])
    assert (accuracy.dataset_name, accuracy.dataset_digest) == ("test", test_input.dataset.digest)
    base = metrics["baseline"]
    assert by_name["baseline_difference"].value == pytest.approx(base["difference"])
    assert by_name["baseline_ci_low"].value == pytest.approx(base["ci_low"])
    assert by_name["baseline_test_accuracy"].dataset_name == "test"
    # The run lists it among its outputs (the run page's "Logged models"), and its metrics stay the run's too.
    run = client.get_run(run_id)
    assert [o.model_id for o in run.outputs.model_outputs] == [model_id]
    assert run.data.metrics["test_accuracy"] == pytest.approx(metrics["accuracy"])

    # A restored evaluate (the step cache's hit) and a retry that lost the record find the same model.
    restored = _evaluate(ws, tmp_path / "second", "--step-cache", str(cache))
    assert json.loads((tmp_path / "second" / "cache").read_text())["reused"] is True
    assert restored["accuracy"] == metrics["accuracy"]
    (ws / "eval" / model_tracking.RECORD).unlink()
    _evaluate(ws, tmp_path / "third")
    assert [m.model_id for m in _models(experiment)] == [model_id]
    assert json.loads((ws / "eval" / model_tracking.RECORD).read_text())["model_id"] == model_id
    assert len(client.get_run(run_id).outputs.model_outputs) == 1
