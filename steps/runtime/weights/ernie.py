"""ERNIE for the task types: build or load the model with the task's head, export it, and run the export.

Training (`steps/train.py`), evaluation (`steps/evaluate.py`) and the model server share this module and the
task types (steps/runtime/data/tasks/), so an instance is encoded and an answer decoded the same way everywhere.
`ExportedModel` needs only the exported directory (`inference.json` + `inference.pdiparams`, tokenizer files,
`label_map.json`, `model_config.json`, which names the task type).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np

from paddle_mlops_core.contracts import PRETRAINED_MOUNT, PRETRAINED_MOUNT_ENV, pvc_location
from steps.runtime.runner import StepError
from steps.runtime.serving import cpu_quota
from steps.runtime.storage import workspace

# Local and test runs must never reach a model hub; a configured directory is all we load.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import paddle  # noqa: E402
from paddlenlp.transformers import (  # noqa: E402
    ErnieConfig,
    ErnieForSequenceClassification,
    ErnieForTokenClassification,
    ErnieTokenizer,
)

from paddle_mlops_core.config.inputs import ModelConfig  # noqa: E402
from paddle_mlops_core.config.tasks import TEXT_CLASSIFICATION, TOKEN_CLASSIFICATION  # noqa: E402
from paddle_mlops_core.contracts import ENGINE_FILE, EXPORTED_FILES  # noqa: E402
from steps.runtime.data import tag_transitions, tasks  # noqa: E402
from steps.runtime.serving.engines.runners import EngineUnavailable, open_engine  # noqa: E402
from steps.runtime.serving.engines.variants import PADDLE_FP32, PADDLE_GPU_FP32, SPECS  # noqa: E402
from steps.runtime.weights import char_ngrams, crf_head, ernie_tokenizer, wide_scores  # noqa: E402

INPUT_NAMES = ("input_ids", "token_type_ids")
log = logging.getLogger("steps.engines")
ErnieHead: TypeAlias = ErnieForSequenceClassification | ErnieForTokenClassification


def head_class(task_type: str) -> type[ErnieHead]:
    """The PaddleNLP model a task type trains: one label per sequence (classification, matching) or per token."""
    return ErnieForTokenClassification if task_type == TOKEN_CLASSIFICATION else ErnieForSequenceClassification


def classifier_dropout(model_cfg: ModelConfig) -> float:
    """The dropout before the task's classifier: `model.classifier_dropout`, else `model.dropout`."""
    return model_cfg.dropout if model_cfg.classifier_dropout is None else model_cfg.classifier_dropout


def build_model(model_cfg: ModelConfig, vocab_size: int, num_labels: int, pad_token_id: int = 0) -> ErnieHead:
    """A small ERNIE of the task's head initialised from scratch (local runs and tests)."""
    config = ErnieConfig(
        vocab_size=vocab_size,
        hidden_size=model_cfg.hidden_size,
        num_hidden_layers=model_cfg.num_hidden_layers,
        num_attention_heads=model_cfg.num_attention_heads,
        intermediate_size=model_cfg.intermediate_size,
        max_position_embeddings=model_cfg.max_seq_len,
        hidden_dropout_prob=model_cfg.dropout,
        attention_probs_dropout_prob=model_cfg.dropout,
        classifier_dropout=classifier_dropout(model_cfg),
        type_vocab_size=2,
        pad_token_id=pad_token_id,
        num_labels=num_labels,
    )
    # Fixed parameter names (the optimizer state is keyed by them), however many models this process built.
    with paddle.utils.unique_name.guard():
        return _heads(
            char_ngrams.add_char_bigrams(head_class(model_cfg.task)(config), model_cfg), num_labels, model_cfg
        )


def _heads(model: ErnieHead, num_labels: int, model_cfg: ModelConfig) -> ErnieHead:
    """The model with the window's scores and the CRF head where `model.wide_scores` and `model.crf_head` ask for
    them."""
    if model_cfg.wide_scores:
        model = wide_scores.attach(model)
    return crf_head.attach(model, num_labels) if model_cfg.crf_head else model


def stage_pretrained(location: str, endpoint_url: str | None = None) -> Path:
    """A local directory holding the pretrained weights (an s3:// prefix is downloaded first; a
    pvc://CLAIM/path is read where the training pod mounts the claim)."""
    pvc = pvc_location(location)
    if pvc is not None:
        mount = Path(os.environ.get(PRETRAINED_MOUNT_ENV, PRETRAINED_MOUNT)) / pvc[0]
        if not mount.is_dir():
            raise StepError(
                f"model.pretrained {location}: the claim {pvc[0]!r} is not mounted at {mount}. It is mounted only in "
                "the cluster's training pods (TrainJob or PaddleJob); on this machine set model.pretrained to a "
                "directory or an s3:// prefix."
            )
        location = str(mount / pvc[1])
    try:
        directory = workspace.stage_in(location, endpoint_url=endpoint_url)
    except FileNotFoundError as exc:
        raise StepError(
            f"model.pretrained {location}: {exc}. Point it at a directory of PaddleNLP ERNIE weights."
        ) from None
    if not (directory / "config.json").is_file():
        raise StepError(
            f"model.pretrained {location} has no config.json; save the model with save_pretrained() into that location."
        )
    return directory


def load_pretrained(directory: Path, num_labels: int, model_cfg: ModelConfig) -> ErnieHead:
    """PaddleNLP's own loading path, from a local directory only (a hub name would be a download); the task's
    head is new, on the pretrained encoder (and a new bigram table, `model.char_ngram_buckets`, and CRF head,
    `model.crf_head`)."""
    with paddle.utils.unique_name.guard():
        model = head_class(model_cfg.task).from_pretrained(
            str(directory), num_labels=num_labels, classifier_dropout=classifier_dropout(model_cfg)
        )
        return _heads(char_ngrams.add_char_bigrams(model, model_cfg), num_labels, model_cfg)


def load_tokenizer(path: Path) -> ErnieTokenizer:
    """A `vocab.txt` file (character vocabulary) or a directory saved with `save_pretrained` (the one loader
    prepare-data's n-gram count uses too)."""
    return ernie_tokenizer.load_tokenizer(path)


def encode(tokenizer: ErnieTokenizer, texts: Sequence[str], max_seq_len: int) -> list[list[int]]:
    """Token ids with [CLS]/[SEP], truncated to `max_seq_len`; unpadded (batches pad to their longest)."""
    encoded = tokenizer(list(texts), max_length=max_seq_len, truncation=True, return_token_type_ids=False)
    return encoded["input_ids"]


def pad_batch(ids: Sequence[Sequence[int]], pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """int64 `input_ids` padded to the longest row, and zero `token_type_ids` (single-segment inputs)."""
    width = max(len(row) for row in ids)
    input_ids = np.full((len(ids), width), pad_id, dtype="int64")
    for i, row in enumerate(ids):
        input_ids[i, : len(row)] = row
    return input_ids, np.zeros_like(input_ids)


def export(
    model: ErnieHead,
    tokenizer: ErnieTokenizer,
    label_map: dict[int, str],
    model_cfg: ModelConfig,
    out_dir: Path,
    provenance: dict[str, Any] | None = None,
) -> Path:
    """Static-graph export for Paddle Inference plus everything needed to tokenise and name labels; `provenance`
    (the pretrained weights' name, digest and PaddleNLP version) goes into `model_config.json`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model.eval()
    spec = [paddle.static.InputSpec([None, None], "int64", name) for name in INPUT_NAMES]
    static = paddle.jit.to_static(model, input_spec=spec, full_graph=True)
    paddle.jit.save(static, str(out_dir / "inference"))
    tokenizer.save_pretrained(str(out_dir))
    (out_dir / "label_map.json").write_text(
        json.dumps({str(i): n for i, n in sorted(label_map.items())}, ensure_ascii=False, indent=2), encoding="utf-8"
    )
    config = model.config
    (out_dir / "model_config.json").write_text(
        json.dumps(
            {
                "task": model_cfg.task,
                "architecture": type(model).__name__,
                "max_seq_len": model_cfg.max_seq_len,
                "num_labels": len(label_map),
                "vocab_size": config.vocab_size,
                "hidden_size": config.hidden_size,
                "num_hidden_layers": config.num_hidden_layers,
                "num_attention_heads": config.num_attention_heads,
                "intermediate_size": config.intermediate_size,
                "pad_token_id": tokenizer.pad_token_id,
                "char_ngram_buckets": model_cfg.char_ngram_buckets,
                "char_ngram_dim": model_cfg.char_ngram_dim,
                "char_ngram_min_count": model_cfg.char_ngram_min_count,
                "char_ngram_sides": model_cfg.char_ngram_sides,
                "char_ngram_trigrams": model_cfg.char_ngram_trigrams,
                "wide_scores": model_cfg.wide_scores,
                "crf_head": model_cfg.crf_head,
                "inputs": list(INPUT_NAMES),
                "pretrained": model_cfg.pretrained,
                **(provenance or {}),
            },
            indent=2,
        ),
        encoding="utf-8",
    )
    return out_dir


def engine_record(model_dir: Path) -> dict[str, Any]:
    """The export's `engine.json` (which variant serves, the ranking to fall back along), {} when it has none."""
    try:
        record = json.loads((Path(model_dir) / ENGINE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


class ExportedModel:
    """An exported model, run by one of its engine variants, answering its task's instances.

    The engine is `engine` when given, else the first of the export's `engine.json` ranking (evaluate's
    measured choice, steps/runtime/serving/engine_selection.py) that this node can run: a variant whose CPU feature,
    package or files are missing is passed over, with the reason logged and kept in `fallback`, down to Paddle
    fp32, which always runs. Without an `engine.json` it is Paddle fp32 (on a GPU with `use_gpu`).
    Thread-safe: calls are serialised by a lock (an engine is not re-entrant). Batches are padded to their
    longest row, not to `max_seq_len`.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        cpu_threads: int | None = None,
        use_gpu: bool = False,
        engine: str | None = None,
        fall_back: bool = True,
    ) -> None:
        """`cpu_threads`: math threads; None sizes them to this container's CPU quota. `fall_back=False`: the
        requested engine or EngineUnavailable (the selection measuring each variant)."""
        self.model_dir = Path(model_dir)
        self.cpu_threads = cpu_threads or cpu_quota.default_threads()
        for name in EXPORTED_FILES:
            if not (self.model_dir / name).is_file():
                raise StepError(f"{self.model_dir} has no {name}; it is not a model exported by the train step.")
        self.model_config = json.loads((self.model_dir / "model_config.json").read_text(encoding="utf-8"))
        # Exports from before task types were sequence classifiers.
        self.task_type = str(self.model_config.get("task") or TEXT_CLASSIFICATION)
        self.task = tasks.for_type(self.task_type)
        self.labels = {
            int(k): v for k, v in json.loads((self.model_dir / "label_map.json").read_text(encoding="utf-8")).items()
        }
        self.max_seq_len = int(self.model_config["max_seq_len"])
        self.transitions = tag_transitions.read(self.model_dir, self.labels)
        self.tokenizer = ErnieTokenizer.from_pretrained(str(self.model_dir))
        self.engine, self.engine_name, self.fallback = self._open_engine(engine, use_gpu, fall_back)
        self._lock = threading.Lock()

    def _open_engine(self, requested: str | None, use_gpu: bool, fall_back: bool) -> tuple[Any, str, str]:
        """(engine, its variant, why the ones before it in the ranking were passed over)."""
        default = PADDLE_GPU_FP32 if use_gpu else PADDLE_FP32
        if requested:
            order = [requested]
        else:
            ranking = [v for v in engine_record(self.model_dir).get("ranking", []) if v in SPECS]
            order = [v for v in ranking if (SPECS[v].device == "gpu") == use_gpu] or [default]
        if fall_back and default not in order:
            order.append(default)
        passed: list[str] = []
        for name in order:
            try:
                engine = open_engine(name, self.model_dir, self.cpu_threads)
            except EngineUnavailable as exc:
                if not fall_back:
                    raise
                passed.append(f"{name}: {exc}")
                continue
            if passed:
                log.warning("serving %s instead of %s: %s", name, order[0], "; ".join(passed))
            return engine, name, "; ".join(passed)
        raise StepError(f"no engine of {self.model_dir} runs here: {'; '.join(passed)}")

    @property
    def platform(self) -> str:
        """Open Inference Protocol `platform` of the engine in use: framework and format, then the variant
        (`onnxruntime_onnx:onnx-int8`), since the metadata response has no other field for it."""
        framework = {"onnxruntime": "onnxruntime_onnx", "openvino": "openvino_ir"}.get(
            SPECS[self.engine_name].engine, "paddle_inference"
        )
        return f"{framework}:{self.engine_name}"

    @property
    def precision(self) -> str:
        """The engine in use's precision: fp32, bf16, fp16 or int8."""
        return SPECS[self.engine_name].precision

    def logits(self, input_ids: np.ndarray, token_type_ids: np.ndarray | None = None) -> np.ndarray:
        """Logits (`[batch, labels]`, or `[batch, width, labels]` per token) for padded int64 inputs."""
        if token_type_ids is None:
            token_type_ids = np.zeros_like(input_ids)
        with self._lock:
            return self.engine.run(input_ids, token_type_ids)

    def predict(self, instances: Sequence[tasks.Instance]) -> list[dict]:
        """One answer per instance in the task's shape (a label with probabilities; entities with offsets)."""
        if not instances:
            return []
        rows = self.task.encode(self.tokenizer, instances, self.max_seq_len)
        logits = tasks.run_rows(self.logits, rows, max(len(rows), 1), self.tokenizer.pad_token_id)
        return self.task.results(instances, rows, logits, self.labels, self.transitions)
