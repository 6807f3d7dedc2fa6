"""The train step's MLflow dataset inputs (steps/runtime/training/tracking.py `log_datasets`): rank 0 logs them before
its first step, so they must not read the splits whole (#61 item 4: per-rank memory independent of the corpus)."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest

from steps.runtime.data import tasks
from steps.runtime.training import tracking


def _split(path: Path, rows: int) -> None:
    lines = (json.dumps({"text": f"第{i}条评论很好", "label": i % 2}, ensure_ascii=False) + "\n" for i in range(rows))
    path.write_text("".join(lines), encoding="utf-8")


def test_dataset_inputs_are_logged_by_reference_without_reading_the_splits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    sizes = {"train": 5000, "dev": 700, "test": 300}
    for split, rows in sizes.items():
        _split(data / f"{split}.jsonl", rows)
    # A row past the schema sample that is not JSON: reading a split whole would fail on it.
    with (data / "train.jsonl").open("a", encoding="utf-8") as f:
        f.write("not json\n")
    stats = {"splits": {s: {"total": n} for s, n in sizes.items()}, "sha256": {f"{s}.jsonl": "ab" * 32 for s in sizes}}
    task = tasks.for_type("text-classification")
    monkeypatch.setattr(task, "read_rows", lambda path: pytest.fail(f"read {path} whole"))
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_experiment("datasets")
    with mlflow.start_run() as run:
        tracking.log_datasets(data, "s3://bucket/ws/data", stats, task)
    logged = mlflow.get_run(run.info.run_id).inputs.dataset_inputs
    by_name = {i.dataset.name: i for i in logged}
    assert set(by_name) == {"train", "dev", "test"}
    train = by_name["train"]
    tags = {t.key: t.value for t in train.tags}
    assert tags["rows"] == "5000" and tags["mlflow.data.context"] == "training"
    assert json.loads(train.dataset.profile) == {"num_rows": 5000}
    assert train.dataset.digest == "ab" * 8
    assert "s3://bucket/ws/data/train.jsonl" in train.dataset.source
    columns = {c["name"]: c["type"] for c in json.loads(train.dataset.schema)["mlflow_colspec"]}
    assert columns == {"text": "string", "label": "long"}
