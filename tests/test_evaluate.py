"""evaluate: metrics on the exported model, the gate vs threshold and vs the MLflow champion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures_ernie import CONFIG, TINY_OVERRIDES, common, make_exported_model, prepared_workspace

from paddle_mlops_core.contracts import CHAMPION
from steps import evaluate
from steps.runtime.data import split_index
from steps.runtime.release import gate
from steps.runtime.serving import engine_selection

MODEL_NAME = "ernie-sentiment"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """data/ from prepare-data on the tiny reviews, model/ a random-weight tiny export."""
    ws = prepared_workspace(tmp_path_factory.mktemp("evaluate"))
    make_exported_model(ws / "model")
    return ws


@pytest.fixture(scope="module")
def tracking(workspace: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One SQLite MLflow per module (creating its schema takes seconds) with a finished training run."""
    from mlflow import MlflowClient

    store = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{store / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        # storage.uri 'local' (the baseline's stored answers) is <home>/store: never the checkout's .paddle-mlops/
        mp.setenv("PADDLE_MLOPS_HOME", str(tmp_path_factory.mktemp("home")))
        mlflow_client = MlflowClient(uri)
        experiment = mlflow_client.create_experiment("ernie-sentiment", artifact_location=(store / "mlruns").as_uri())
        run = mlflow_client.create_run(experiment)
        mlflow_client.set_terminated(run.info.run_id)
        (workspace / "model" / "training.json").write_text(json.dumps({"mlflow_run_id": run.info.run_id}))
        yield mlflow_client


@pytest.fixture
def client(tracking):  # type: ignore[no-untyped-def]
    """The module's MLflow, with no registered model (so no champion) at the start of each test."""
    yield tracking
    if tracking.search_registered_models(f"name = '{MODEL_NAME}'"):
        tracking.delete_registered_model(MODEL_NAME)


def run_eval(ws: Path | str, out: Path, *overrides: str) -> tuple[int, dict, str, str]:
    rc = evaluate.main(
        [
            *common(*overrides),
            "--workspace",
            str(ws),
            "--outputs-dir",
            str(out),
        ]
    )
    return (
        rc,
        json.loads((out / "metrics").read_text()),
        (out / "gate-passed").read_text(),
        (out / "mlflow-run-id").read_text(),
    )


def register_champion(client, source: str, tag_value: float | None, run_metric: float | None = None) -> str:  # type: ignore[no-untyped-def]
    client.create_registered_model(MODEL_NAME)
    source_run = client.create_run(client.get_experiment_by_name("ernie-sentiment").experiment_id)
    if run_metric is not None:
        client.log_metric(source_run.info.run_id, "test_accuracy", run_metric)
    version = client.create_model_version(MODEL_NAME, source=source, run_id=source_run.info.run_id)
    if tag_value is not None:
        client.set_model_version_tag(MODEL_NAME, version.version, "test_accuracy", str(tag_value))
    client.set_registered_model_alias(MODEL_NAME, CHAMPION, version.version)
    return str(version.version)


def test_gate_passes_threshold_without_champion(workspace: Path, client, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    rc, metrics, gate, run_id = run_eval(workspace, tmp_path, "gate.threshold=0.0")
    assert rc == 0 and gate == "true"
    assert run_id == json.loads((workspace / "model" / "training.json").read_text())["mlflow_run_id"]
    test_rows = (workspace / "data" / "test.jsonl").read_text(encoding="utf-8").splitlines()
    assert metrics["examples"] == len(test_rows)
    assert 0 <= metrics["accuracy"] <= 1 and 0 <= metrics["macro_f1"] <= 1
    assert set(metrics["per_class"]) == {"negative", "positive"}
    assert sum(c["support"] for c in metrics["per_class"].values()) == len(test_rows)
    assert sum(map(sum, metrics["confusion_matrix"])) == len(test_rows)
    assert metrics["latency"]["batch_p50_ms"] > 0 and metrics["latency"]["example_p99_ms"] > 0
    assert metrics["gate"]["passed"] is True and metrics["gate"]["champion_version"] is None
    assert json.loads((workspace / "eval" / "metrics.json").read_text()) == metrics
    assert "gate PASSED" in capsys.readouterr().out

    run = client.get_run(run_id)
    assert run.data.metrics["test_accuracy"] == pytest.approx(metrics["accuracy"])
    assert "test_macro_f1" in run.data.metrics and "test_positive_f1" in run.data.metrics
    assert run.data.tags["gate.passed"] == "true" and "threshold" in run.data.tags["gate.reason"]
    # The baseline beside the model (local: gate.baseline warn): both figures, the difference and its interval.
    base = metrics["baseline"]
    assert base["kind"] == "tfidf-logreg" and base["metric"] == "accuracy" and base["model"] == metrics["accuracy"]
    assert base["difference"] == pytest.approx(base["model"] - base["baseline"])
    assert base["ci_low"] <= base["difference"] <= base["ci_high"] and base["test"]["name"] == "McNemar exact"
    assert run.data.metrics["baseline_test_accuracy"] == pytest.approx(base["baseline"])
    assert run.data.metrics["baseline_difference"] == pytest.approx(base["difference"])
    assert {"baseline_ci_low", "baseline_ci_high", "baseline_p_value"} <= set(run.data.metrics)
    assert run.data.tags["baseline.kind"] == "tfidf-logreg" and run.data.tags["gate.baseline"] == "warn"
    assert f"baseline tfidf-logreg {base['baseline']:.4f}" in metrics["gate"]["reason"]
    # The engine table in MLflow says which figure ranked it, and carries the served figure it ranked by.
    assert run.data.tags["engine.ranked_by"] == metrics["engine"]["ranked_by"] == engine_selection.RANKED_BY_SERVED
    selected = metrics["engine"]["selected"]
    assert run.data.metrics[f"engine_{selected}_served_texts_per_s"] > 0


def test_gate_fails_below_threshold_without_error(workspace: Path, client, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    rc, metrics, gate, _ = run_eval(workspace, tmp_path, "gate.threshold=1.0", "gate.metric=macro_f1")
    assert metrics["macro_f1"] < 1.0  # random weights
    assert rc == 0 and gate == "false" and metrics["gate"]["passed"] is False
    assert "gate FAILED: macro_f1" in capsys.readouterr().out


def test_gate_fails_against_a_better_champion(workspace: Path, client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    version = register_champion(client, str(workspace / "model"), tag_value=0.999)
    rc, metrics, gate, run_id = run_eval(workspace, tmp_path, "gate.threshold=0.0")
    assert rc == 0 and gate == "false"
    assert metrics["gate"]["champion_version"] == version and metrics["gate"]["champion_value"] == 0.999
    assert client.get_run(run_id).data.tags["gate.champion_version"] == version


def test_gate_passes_against_champion_metric_from_its_run(workspace: Path, client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    register_champion(client, str(workspace / "model"), tag_value=None, run_metric=0.0)
    rc, metrics, gate, _ = run_eval(workspace, tmp_path, "gate.threshold=0.0")
    assert rc == 0 and gate == "true" and metrics["gate"]["champion_value"] == 0.0
    assert f"champion v{metrics['gate']['champion_version']}" in metrics["gate"]["reason"]


@pytest.mark.parametrize(
    ("value", "champion", "passed"),
    [
        (0.85, None, True),
        (0.79, None, False),
        (0.85, ("3", 0.86), True),
        (0.85, ("3", 0.8601), False),
        (0.80, ("1", 0.70), True),
    ],
)
def test_decide(value: float, champion: tuple[str, float] | None, passed: bool) -> None:
    decision = gate.decide(value, "accuracy", 0.80, 0.01, champion)
    assert decision.passed is passed
    if champion:
        assert f"champion v{champion[0]}" in decision.reason


def test_missing_model_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert evaluate.main([*common(), "--workspace", str(tmp_path)]) == 2
    assert "run prepare-data and train" in capsys.readouterr().err


def test_exported_classifier_predicts_named_labels(workspace: Path) -> None:
    from steps.runtime.weights.ernie import ExportedModel

    classifier = ExportedModel(workspace / "model")
    out = classifier.predict(["手机很好", "快递很差，失望极了", ""])
    assert len(out) == 3
    for item in out:
        assert item["label"] in ("negative", "positive")
        assert sum(item["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
    from steps.runtime.data.tasks.base import pad

    rows = classifier.task.encode(classifier.tokenizer, ["好", "手机很好"], classifier.max_seq_len)
    ids, types = pad(rows.input_ids, classifier.tokenizer.pad_token_id), pad(rows.token_type_ids, 0)
    assert ids.shape == (2, 6) and ids.dtype.name == "int64" and not types.any()  # padded to the longest, not 32
    assert classifier.logits(ids, types).shape == (2, 2)


def test_report_averages_f1_over_every_known_class() -> None:
    from steps.runtime.data.scoring import classification_metrics, classification_report

    # Dev scoring averages over the classes it sees; the test report over every class the model knows.
    assert classification_metrics([0, 1], [0, 1]) == {"accuracy": 1.0, "macro_f1": 1.0}
    report = classification_report([0, 1], [0, 1], {0: "negative", 1: "positive", 2: "neutral"})
    assert report["accuracy"] == 1.0 and report["macro_f1"] == pytest.approx(2 / 3)
    assert report["per_class"]["neutral"]["support"] == 0 and report["confusion_matrix"][2] == [0, 0, 0]


def test_an_s3_workspace_gets_back_what_the_selection_wrote(  # type: ignore[no-untyped-def]
    workspace: Path, client, tmp_path: Path, monkeypatch
) -> None:
    """On the cluster the workspace is S3: evaluate stages the model in, builds the variants there, and must put
    back every file it wrote or rebuilt (upload publishes from the workspace), and no other."""
    import uuid

    from s3server import moto_s3_server

    from steps.runtime.serving.engines.variants import ONNX_FILE
    from steps.runtime.storage import s3
    from steps.runtime.storage import workspace as ws_io

    with moto_s3_server() as endpoint:
        monkeypatch.setenv("S3_ENDPOINT_URL", endpoint)
        bucket = f"runs-{uuid.uuid4().hex[:10]}"
        cli = s3.client()
        cli.create_bucket(Bucket=bucket)
        local = tmp_path / "ws"
        for part in ("data", "model"):
            ws_io.stage_out(workspace / part, f"s3://{bucket}/run/{part}")
        # A stale ONNX file from an earlier evaluate with other tools: the selection rebuilds it.
        cli.put_object(Bucket=bucket, Key=f"run/model/{ONNX_FILE}", Body=b"stale")
        keys_before = {o["Key"]: o["ETag"] for o in cli.list_objects_v2(Bucket=bucket)["Contents"]}
        rc, metrics, _, _ = run_eval(f"s3://{bucket}/run", tmp_path / "out", "gate.threshold=0.0")
        assert rc == 0
        after = {o["Key"]: o["ETag"] for o in cli.list_objects_v2(Bucket=bucket)["Contents"]}
        selected = metrics["engine"]["selected"]
        assert "run/model/engine.json" in after
        assert after[f"run/model/{ONNX_FILE}"] != keys_before[f"run/model/{ONNX_FILE}"]  # the rebuilt file
        assert cli.get_object(Bucket=bucket, Key=f"run/model/{ONNX_FILE}")["Body"].read() != b"stale"
        assert "run/model/model.int8.onnx" in after and "run/model/variants.json" in after
        # and the MLflow model files beside the export (#62): the published version is an MLflow model directory
        assert {"run/model/MLmodel", "run/model/requirements.txt", "run/model/input_example.json"} <= set(after)
        assert "run/model/code/steps/runtime/serving/mlflow_flavor.py" in after
        # The export itself was only read.
        for name in ("inference.json", "inference.pdiparams", "label_map.json"):
            assert after[f"run/model/{name}"] == keys_before[f"run/model/{name}"]
        stage = ws_io.stage_in(f"s3://{bucket}/run/model", local / "model")
        assert json.loads((stage / "engine.json").read_text())["selected"] == selected
        import mlflow

        assert mlflow.pyfunc.load_model(str(stage)).metadata.metadata["engine"] == selected

        # Rerun with int8 forbidden: the int8 variants' files go from the workspace too, or upload would publish
        # them beside a model that says it has none.
        rc, metrics, _, _ = run_eval(
            f"s3://{bucket}/run", tmp_path / "out2", "gate.threshold=0.0", "serving.quantization=false"
        )
        assert rc == 0 and "int8" not in metrics["engine"]["selected"]
        keys = {o["Key"] for o in cli.list_objects_v2(Bucket=bucket)["Contents"]}
        assert "run/model/model.int8.onnx" not in keys
        assert not [k for k in keys if k.startswith("run/model/openvino-int8/")]
        assert f"run/model/{ONNX_FILE}" in keys and "run/model/inference.pdiparams" in keys


def test_a_model_trained_on_shuffled_labels_is_refused_by_the_production_baseline_gate(  # type: ignore[no-untyped-def]
    tmp_path: Path, client, capsys
) -> None:
    """Today's gate (a threshold) lets a broken fine-tune through; production's baseline gate refuses it, naming the
    model's figure and the baseline's. A failed gate is a result (exit 0, `gate-passed` false, nothing published)."""
    import random

    from steps import train

    ws = prepared_workspace(tmp_path / "broken")
    for split in ("train", "dev"):
        path = ws / "data" / f"{split}.jsonl"
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        shuffled = [r["label"] for r in rows]
        random.Random(7).shuffle(shuffled)
        path.write_text("".join(json.dumps({**r, "label": y}) + "\n" for r, y in zip(rows, shuffled, strict=True)))
    split_index.write(ws / "data", lambda row: [row["text"]])  # the rewritten splits' index, as prepare-data writes it
    assert train.main([*common("training.epochs=4"), "--workspace", str(ws)]) == 0
    prod = ["--config", CONFIG, "--env", "prod", "--overrides", json.dumps([
        *TINY_OVERRIDES, "model.pretrained=null", f"storage.uri={tmp_path / 'store'}", "storage.endpoint_url=null",
        "gate.threshold=0.3",  # low enough for the broken model: the threshold alone passes it
    ])]  # fmt: skip
    out = tmp_path / "out"
    assert evaluate.main([*prod, "--workspace", str(ws), "--outputs-dir", str(out)]) == 0
    metrics = json.loads((out / "metrics").read_text())
    gate_ = metrics["gate"]
    assert (out / "gate-passed").read_text() == "false" and gate_["passed"] is False
    assert gate_["baseline_mode"] == "require" and gate_["baseline_margin"] == pytest.approx(0.03)
    assert gate_["baseline_passed"] is False and metrics["accuracy"] >= 0.3  # refused by the baseline alone
    model, base = metrics["accuracy"], metrics["baseline"]["baseline"]
    assert model < base + 0.03
    expected = f"accuracy {model:.4f} ≥ threshold 0.3000, < baseline tfidf-logreg {base:.4f} + margin 0.0300"
    assert gate_["reason"].startswith(expected)
    assert f"gate FAILED: {expected}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("value", "baseline", "mode", "margin", "passed", "relation"),
    [
        (0.90, 0.85, "require", 0.03, True, "≥"),
        (0.87, 0.85, "require", 0.03, False, "<"),  # beats the baseline, not by the margin
        (0.85, 0.85, "require", 0.0, True, "≥"),  # a zero margin: at least the baseline (MLflow's relative change 0)
        (0.84, 0.85, "require", 0.0, False, "<"),
        (0.84, 0.85, "warn", 0.0, True, "<"),  # reported, not enforced
    ],
)
def test_decide_against_the_baseline_with_mlflow_validation(
    value: float, baseline: float, mode: str, margin: float, passed: bool, relation: str
) -> None:
    rule = gate.BaselineRule(mode, "tfidf-logreg", baseline, margin)
    decision = gate.decide(value, "accuracy", 0.80, 0.01, None, rule)
    assert decision.passed is passed and decision.baseline_value == baseline
    assert f"{relation} baseline tfidf-logreg {baseline:.4f}" in decision.reason


class _NoChampion:
    def get_model_version_by_alias(self, name: str, alias: str) -> None:
        from mlflow.exceptions import MlflowException

        raise MlflowException(f"no {alias} for {name}")


@pytest.mark.parametrize(
    ("task", "metrics", "passed", "reason"),
    [
        # configs/env/local.yaml's tasks.ner section: the local NER model must reach the CRF (margin 0)
        ("ner", {"micro_f1": 0.9450, "baseline": {"kind": "crf", "baseline": 0.9497}}, False, "< baseline crf 0.9497"),
        ("ner", {"micro_f1": 0.9584, "baseline": {"kind": "crf", "baseline": 0.9497}}, True, "≥ baseline crf 0.9497"),
        # ... while the local sentiment gate only warns below TF-IDF
        (
            "sentiment",
            {"accuracy": 0.8464, "baseline": {"kind": "tfidf-logreg", "baseline": 0.8560}},
            True,
            "< baseline tfidf-logreg 0.8560",
        ),
    ],
)
def test_the_local_gate_requires_the_baseline_for_ner_only(task: str, metrics: dict, passed: bool, reason: str) -> None:
    from paddle_mlops_core.config import load_config

    decision = gate.judge(load_config(CONFIG, "local", task=task), metrics, _NoChampion())
    assert decision.passed is passed and reason in decision.reason, decision.reason


def test_mlflow_validation_is_what_the_gate_asks() -> None:
    """mlflow 3.17 mlflow/models/evaluation/validation.py: min_absolute_change must be positive and compares
    candidate >= baseline + change with Decimal; a relative change of 0 is candidate >= baseline."""
    from mlflow.models import MetricThreshold
    from mlflow.models.evaluation.validation import MetricThresholdClassException

    with pytest.raises(MetricThresholdClassException, match="positive"):
        MetricThreshold(min_absolute_change=0.0, greater_is_better=True)
    at_margin = MetricThreshold(min_absolute_change=0.03, greater_is_better=True)
    assert gate.mlflow_passes("accuracy", 0.88, at_margin, 0.85)
    assert not gate.mlflow_passes("accuracy", 0.8799, at_margin, 0.85)
    assert gate.mlflow_passes("accuracy", 0.85, MetricThreshold(min_relative_change=0.0, greater_is_better=True), 0.85)
    assert not gate.mlflow_passes("accuracy", 0.79, MetricThreshold(threshold=0.8, greater_is_better=True))
