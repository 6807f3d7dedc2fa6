"""`paddle-mlops report`: plots and an HTML summary from a real (temporary, SQLite) MLflow run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from PIL import Image

from paddle_mlops import report as rpt
from paddle_mlops_core.contracts import EXIT_OK, EXIT_USER_ERROR
from steps.runtime import plots

HISTORY = [(1, 0.68, 0.62, 0.60), (2, 0.51, 0.75, 0.73), (3, 0.40, 0.83, 0.82)]
EVAL = {  # the shape steps/evaluate.py writes (labels come from per_class order)
    "accuracy": 0.83,
    "macro_f1": 0.82,
    "confusion_matrix": [[40, 8], [9, 43]],
    "per_class": {
        "negative": {"precision": 0.82, "recall": 0.83, "f1": 0.82, "support": 48},
        "positive": {"precision": 0.84, "recall": 0.83, "f1": 0.83, "support": 52},
    },
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, MlflowClient, str]:
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("report-test", artifact_location=(root / "artifacts").as_uri())
    return uri, client, experiment


def _run(store: tuple[str, MlflowClient, str], tmp_path: Path, with_plots: bool) -> str:
    _, client, experiment = store
    run = client.create_run(experiment, run_name="tiny-run")
    run_id = run.info.run_id
    client.log_param(run_id, "learning_rate", "0.0005")
    client.log_param(run_id, "epochs", "3")
    for epoch, loss, acc, f1 in HISTORY:
        client.log_metric(run_id, "train_loss", loss, step=epoch)
        client.log_metric(run_id, "dev_accuracy", acc, step=epoch)
        client.log_metric(run_id, "dev_macro_f1", f1, step=epoch)
    client.log_metric(run_id, "accuracy", 0.83)
    client.set_tag(run_id, "gate.passed", "true")
    client.set_tag(run_id, "gate.reason", "accuracy 0.83 >= threshold 0.80 <b>")
    eval_dir = tmp_path / "evaluation"
    eval_dir.mkdir()
    (eval_dir / "metrics.json").write_text(json.dumps(EVAL))
    client.log_artifact(run_id, str(eval_dir / "metrics.json"), artifact_path="evaluation")
    if with_plots:
        history = [{"epoch": e, "train_loss": lo, "dev_accuracy": a, "dev_macro_f1": f} for e, lo, a, f in HISTORY]
        curves = plots.plot_curves(history, tmp_path / "logged" / plots.CURVES_PNG)
        client.log_artifact(run_id, str(curves), artifact_path=plots.PLOTS_DIR)
    client.set_terminated(run_id, "FINISHED")
    return run_id


def _assert_images(out: Path) -> None:
    for name, size in (
        (plots.CURVES_PNG, plots.CURVES_SIZE),
        (plots.CONFUSION_PNG, plots.CONFUSION_SIZE),
        (plots.PER_CLASS_PNG, plots.PER_CLASS_SIZE),
    ):
        with Image.open(out / name) as image:
            assert image.format == "PNG" and image.size == size


def test_report_regenerates_plots_from_history_and_eval(store, tmp_path: Path) -> None:
    run_id = _run(store, tmp_path, with_plots=False)
    index = rpt.report(run_id, tmp_path / "out", tracking_uri=store[0])
    assert index == tmp_path / "out" / "index.html"
    _assert_images(index.parent)
    page = index.read_text(encoding="utf-8")
    for text in ("tiny-run", run_id, "learning_rate", "0.0005", "dev_accuracy", "gate.passed", "FINISHED"):
        assert text in page
    assert "&lt;b&gt;" in page and "<b>" not in page  # tag values are escaped
    for name in (plots.CURVES_PNG, plots.CONFUSION_PNG, plots.PER_CLASS_PNG):
        assert f'src="{name}"' in page
    assert sorted(p.name for p in index.parent.iterdir()) == sorted(
        ["index.html", plots.CURVES_PNG, plots.CONFUSION_PNG, plots.PER_CLASS_PNG]
    )


def test_report_downloads_logged_plots(store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = _run(store, tmp_path, with_plots=True)
    logged = (tmp_path / "logged" / plots.CURVES_PNG).read_bytes()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store[0])
    assert rpt.main([run_id, "--out", str(tmp_path / "out")]) == EXIT_OK
    assert (tmp_path / "out" / plots.CURVES_PNG).read_bytes() == logged  # downloaded, not redrawn
    _assert_images(tmp_path / "out")


def test_unknown_run_is_a_user_error(store, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = rpt.main(["0123456789abcdef", "--out", str(tmp_path / "out"), "--tracking-uri", store[0]])
    assert code == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "0123456789abcdef" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
