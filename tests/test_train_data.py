"""The train step's data path (#61 item 4): the split index, the bounded-memory sampler, rows read and encoded per
batch (setup reads and encodes none of the split), distillation's soft targets from prepare-data's teacher file."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from fixtures_ernie import common, prepared_workspace

from steps.runtime.data import split_index, tasks
from steps.runtime.runner import StepError
from steps.runtime.training import distillation
from steps.runtime.training.sampler import LengthGroupedBatchSampler
from steps.runtime.training.train_data import TrainData


def reference_batches(
    lengths: Sequence[int], batch_size: int, world: int, rank: int, seed: int, epoch: int, window: int, drop_last: bool
) -> list[list[int]]:
    """The sampler as it was before #61 (int64 permutation, a concatenated copy, a list of batches): the reference
    the bounded-memory one must equal batch for batch."""
    lengths_ = np.asarray(lengths)
    global_batch = batch_size * world
    rng = np.random.default_rng((seed, epoch))
    order = rng.permutation(len(lengths_))
    span = global_batch * window
    grouped = []
    for start in range(0, len(order), span):
        chunk = order[start : start + span]
        grouped.append(chunk[np.argsort(lengths_[chunk], kind="stable")])
    flat = np.concatenate(grouped) if grouped else order
    batches = [flat[i : i + global_batch] for i in range(0, len(flat), global_batch)]
    if drop_last and batches and len(batches[-1]) < global_batch:
        batches.pop()
    out = []
    for batch in [batches[i] for i in rng.permutation(len(batches))]:
        per_rank = -(-len(batch) // world)
        part = batch[rank * per_rank : (rank + 1) * per_rank]
        out.append((part if len(part) else batch[-1:]).tolist())
    return out


@pytest.mark.parametrize(
    ("n", "batch_size", "world", "window", "drop_last"),
    [
        (1000, 16, 1, 50, False),
        (1003, 8, 2, 3, False),
        (1003, 8, 2, 3, True),
        (37, 4, 3, 2, False),
        (0, 4, 1, 5, False),
    ],
)
def test_the_sampler_gives_the_batches_it_always_gave(
    n: int, batch_size: int, world: int, window: int, drop_last: bool
) -> None:
    lengths = np.random.default_rng(n).integers(1, 128, size=n).astype("int32")
    for rank in range(world):
        sampler = LengthGroupedBatchSampler(lengths, batch_size, world, rank, seed=7, window=window,
                                            drop_last=drop_last)  # fmt: skip
        for epoch in (0, 3):
            sampler.set_epoch(epoch)
            got = list(sampler)
            assert got == reference_batches(lengths, batch_size, world, rank, 7, epoch, window, drop_last)
            assert len(got) == len(sampler)


def test_the_sampler_holds_one_int32_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its batches are views into one int32 array of the rows, not copies (8 bytes a row with int32 lengths)."""
    sampler = LengthGroupedBatchSampler(np.ones(10_000, dtype="int32"), 64)
    batches = sampler.global_batches()
    base = batches[0].base
    assert batches[0].dtype == np.int32 and base is not None and base.nbytes == 4 * 10_000
    assert all(b.base is base for b in batches)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_workspace(tmp_path_factory.mktemp("train-data")) / "data"


def test_prepare_data_writes_an_index_of_every_split(data_dir: Path) -> None:
    task = tasks.for_type("text-classification")
    for split in ("train", "dev", "test"):
        path = data_dir / f"{split}.jsonl"
        rows = task.read_rows(path)
        offsets = np.load(data_dir / f"{split}.offsets.npy")
        lengths = np.load(data_dir / f"{split}.lengths.npy")
        assert offsets.dtype == np.int64 and lengths.dtype == np.uint16
        assert len(offsets) == len(rows) + 1 and offsets[-1] == path.stat().st_size
        assert lengths.tolist() == [len(r["text"]) for r in rows]
        reader = split_index.SplitRows(path, task.row_keys)
        assert reader.take(reversed(range(len(rows)))) == rows[::-1] and list(reader) == rows


def test_the_index_is_written_in_chunks_and_reads_the_same(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prepare-data holds CHUNK rows of the index at a time (the files grow chunk by chunk): the same arrays."""
    monkeypatch.setattr(split_index, "CHUNK", 3)
    for name in ("train.jsonl", "label_map.json"):
        (tmp_path / name).write_bytes((data_dir / name).read_bytes())
    split_index.write(tmp_path, lambda row: [row["text"]], splits=("train",))
    for kind in ("offsets", "lengths"):
        assert np.array_equal(np.load(tmp_path / f"train.{kind}.npy"), np.load(data_dir / f"train.{kind}.npy"))


def test_an_index_that_is_missing_or_stale_says_to_rerun_prepare_data(data_dir: Path, tmp_path: Path) -> None:
    shutil.copytree(data_dir, tmp_path / "data")
    train = tmp_path / "data" / "train.jsonl"
    with train.open("a", encoding="utf-8") as out:  # a row the index does not know
        out.write(json.dumps({"text": "新的一行", "label": 0}, ensure_ascii=False) + "\n")
    with pytest.raises(StepError, match=r"train.offsets.npy describes a file of \d+ bytes.*rerun prepare-data"):
        split_index.SplitRows(train, ("text", "label"))
    (tmp_path / "data" / "train.offsets.npy").unlink()
    with pytest.raises(StepError, match=r"no split index.*rerun prepare-data"):
        split_index.SplitRows(train, ("text", "label"))


def config(distill_weight: float = 0.0) -> Any:
    return SimpleNamespace(model=SimpleNamespace(max_seq_len=32),
                           training=SimpleNamespace(distill_weight=distill_weight))  # fmt: skip


def tokenizer(data_dir: Path) -> Any:
    from steps.runtime.weights import ernie

    return ernie.load_tokenizer(data_dir / "vocab.txt")


def test_a_batch_is_its_rows_encoded_now(data_dir: Path) -> None:
    task = tasks.for_type("text-classification")
    labels = {0: "negative", 1: "positive"}
    data = TrainData(config(), task, tokenizer(data_dir), data_dir, labels)
    rows = task.read_rows(data_dir / "train.jsonl")
    indices = [5, 0, 17]
    input_ids, token_type_ids, targets, _ = data.batch(indices)
    encoded, expected = task.encode_training(data.tokenizer, [rows[i] for i in indices], 32, labels)
    np.testing.assert_array_equal(input_ids, encoded.padded(range(3), data.tokenizer.pad_token_id)[0])
    assert targets.tolist() == expected and token_type_ids.shape == input_ids.shape
    assert data.lengths().tolist() == [min(32, len(r["text"])) for r in rows]
    with pytest.raises(StepError, match=r"train.jsonl has labels \[1\] missing from label_map.json"):
        TrainData(config(), task, data.tokenizer, data_dir, {0: "negative"}).batch(
            [i for i, r in enumerate(rows) if r["label"] == 1][:2]
        )


def test_distillation_reads_the_teacher_rows_of_each_batch(data_dir: Path, tmp_path: Path) -> None:
    shutil.copytree(data_dir, tmp_path / "data")
    task, labels = tasks.for_type("text-classification"), {0: "negative", 1: "positive"}
    with pytest.raises(StepError, match=r"teacher.npy does not exist.*rerun prepare-data"):
        TrainData(config(0.5), task, tokenizer(data_dir), tmp_path / "data", labels)
    rows = task.read_rows(data_dir / "train.jsonl")
    teacher = np.random.default_rng(0).dirichlet([1, 1], size=len(rows)).astype("float32")
    np.save(tmp_path / "data" / distillation.TEACHER, teacher)
    data = TrainData(config(0.5), task, tokenizer(data_dir), tmp_path / "data", labels)
    _, _, targets, _ = data.batch([3, 1])
    one_hot = np.eye(2)[[rows[3]["label"], rows[1]["label"]]]
    np.testing.assert_allclose(targets, 0.5 * teacher[[3, 1]] + 0.5 * one_hot, rtol=1e-6)
    np.save(tmp_path / "data" / distillation.TEACHER, teacher[:-1])
    with pytest.raises(StepError, match=r"not \(\d+, 2\) for the train split"):
        TrainData(config(0.5), task, data.tokenizer, tmp_path / "data", labels)


@pytest.mark.slow
def test_training_encodes_only_the_rows_it_trains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Setup reads and encodes none of the train split (before #61 every rank encoded all of it and counted its
    n-grams): 3 steps of 8 encode 24 train rows of 600, whatever the split's size."""
    from test_train import write_workspace

    from steps import train
    from steps.runtime.data.tasks.classification import SequenceLabels

    encoded: list[int] = []
    original = SequenceLabels.encode_training

    def counting(self: Any, tokenizer: Any, rows: Sequence[dict[str, Any]], *args: Any) -> Any:
        encoded.append(len(rows))
        return original(self, tokenizer, rows, *args)

    ws = write_workspace(tmp_path / "ws", n_train=600, n_dev=8, n_test=8)  # (its n-gram counts encode the split)
    monkeypatch.setattr(SequenceLabels, "encode_training", counting)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    args = [*common("training.max_steps=3", "training.batch_size=8", "model.baseline_product=0"), "--workspace",
            str(ws)]  # fmt: skip
    assert train.main(args) == 0
    assert encoded == [8, 8, 8]
