"""Which engine variant serves a model: every variant measured on the evaluation host, and the fastest served
whose gate metric is within `serving.max_metric_drop` of Paddle fp32 chosen — by measurement, not by faith.

evaluate calls `select` on the exported model: the variants' files are written beside the export
(steps/runtime/serving/engines), each variant this host can run answers the held-out test split (the task's gate metric)
and is timed in process at batch 1 and at `serving.max_batch_size` in interleaved rounds, so a slow spell of a shared
machine falls on all of them alike. Each variant the gate allows is then served through the real serving stack on a
loopback port (steps/runtime/serving/model_server/loopback.py) and driven by `serving.max_batch_size` concurrent
clients, also in interleaved rounds and bounded in time: the variants are ranked by those served texts/s, which the HTTP
work per request can reorder against the in-process figures (docs/benchmarks.md). The choice, the ranking the predictor
falls back along on a node that lacks a CPU feature, the whole table and which figure ranked it (`ranked_by`) go to
`engine.json` in the export: upload publishes it with the model, the predictor (ernie.ExportedModel) reads it, evaluate
logs it to MLflow. `serving.engine` pins a variant (still measured and gated); `serving.quantization: false` keeps int8
out. The statically quantised variant (openvino-int8) fixes its activations' ranges on a sample of the dev split, never
on the test split it is then judged on.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import ENGINE_FILE
from steps.runtime.data import tasks
from steps.runtime.data.tasks.base import ModelRows
from steps.runtime.runner import StepError
from steps.runtime.serving import cpu_quota
from steps.runtime.serving.engines import measure as timing
from steps.runtime.serving.engines.cpu import cpu_flags
from steps.runtime.serving.engines.runners import EngineUnavailable
from steps.runtime.serving.engines.variants import (
    GPU_VARIANTS,
    PADDLE_FP32,
    PADDLE_GPU_FP32,
    SPECS,
    VARIANTS,
    build_variants,
)

log = logging.getLogger("steps.engines")
ROUNDS = 3
# Before each variant's turn: the previous engine's worker threads spin after a call (Intel OpenMP 200 ms,
# ONNX Runtime's and OpenVINO's pools too) and would steal the CPUs from the next one.
SETTLE_S = 0.2
# The CPU features the variants care about, recorded with the measurements (where they were taken matters).
FEATURES = ("avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


@dataclass
class Measured:
    """One variant on the evaluation host: its gate metric and speed, or why it was not measured or not chosen."""

    variant: str
    status: str  # measured | allowed | refused | unavailable
    metric: float | None = None
    batch1_p50_ms: float | None = None
    batch1_texts_per_s: float | None = None
    batch_texts_per_s: float | None = None
    served_texts_per_s: float | None = None
    reason: str = ""


# What the ranking ranks by (engine.json's `ranked_by`): served texts/s, or in-process texts/s at the batch size where
# no served figure exists (benchmarks/engines.py's in-process selection, a variant the loopback serving failed).
RANKED_BY_SERVED = "served texts/s, max_batch_size clients over loopback HTTP"
RANKED_BY_IN_PROCESS = "in-process texts/s at max_batch_size"
SERVED_ROUNDS = 3
SERVED_BUDGET_S = 20.0  # the served rounds stop after this long (each variant gets one): a slow model on a slow node


def reference(cfg: PipelineConfig) -> str:
    """The variant the others are held against: Paddle fp32, on the GPU with `serving.use_gpu`."""
    return PADDLE_GPU_FP32 if cfg.serving.use_gpu else PADDLE_FP32


def candidates(cfg: PipelineConfig) -> list[str]:
    """The variants to measure: the device's (int8 only with `serving.quantization`), or the pinned one and the
    reference."""
    pinned = cfg.serving.engine
    if pinned != "auto":
        return list(dict.fromkeys([reference(cfg), pinned]))
    names = GPU_VARIANTS if cfg.serving.use_gpu else VARIANTS
    return [v for v in names if cfg.serving.quantization or SPECS[v].precision != "int8"]


def _open(cfg: PipelineConfig, model_dir: Path, names: list[str], threads: int) -> tuple[dict[str, Any], dict]:
    """The ExportedModel of every variant this host can run; the reason for each it cannot."""
    from steps.runtime.weights.ernie import ExportedModel  # paddle: loaded only when a model is opened

    opened, missing = {}, {}
    for name in names:
        try:
            opened[name] = ExportedModel(model_dir, cpu_threads=threads, engine=name, fall_back=False)
        except EngineUnavailable as exc:
            missing[name] = str(exc)
    return opened, missing


CALIBRATION_ROWS = 128  # dev rows the static int8 variant observes: enough for stable ranges, a few seconds to run


def _calibration(model: Any, data_dir: Path, size: int) -> list[timing.Batch]:
    """The first CALIBRATION_ROWS rows of the dev split (the train split where dev is empty), encoded and padded as
    the server would, in batches of `size`."""
    rows: list[dict[str, Any]] = []
    for split in ("dev", "train"):
        path = data_dir / f"{split}.jsonl"
        if path.is_file():
            rows = model.task.read_rows(path)[:CALIBRATION_ROWS]
        if rows:
            break
    encoded = _encoded(model, rows)
    step = max(size, 1)
    return [
        encoded.padded(range(start, min(start + step, len(encoded))), model.tokenizer.pad_token_id)
        for start in range(0, len(encoded), step)
    ]


def _encoded(model: Any, rows: list[dict[str, Any]]) -> ModelRows:
    """`rows` of a split as the model's task encodes them for the server."""
    return model.task.encode(model.tokenizer, [model.task.instance(r) for r in rows], model.max_seq_len)


METRIC_BATCH_ROWS = 64  # the metric pass runs rows in batches of similar length: no serving path to mirror here


def _metrics(cfg: PipelineConfig, models: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, float]:
    """Each variant's gate metric on `rows`: the rows encoded once, then every variant's answers scored."""
    first = next(iter(models.values()))
    task = first.task
    instances = [task.instance(r) for r in rows]
    encoded = task.encode(first.tokenizer, instances, first.max_seq_len)
    out = {}
    for name, model in models.items():
        logits = tasks.run_rows(model.logits, encoded, METRIC_BATCH_ROWS, first.tokenizer.pad_token_id)
        answers = task.results(instances, encoded, logits, model.labels, model.transitions)
        report = task.scores(rows, answers, model.labels)
        out[name] = float(report[cfg.gate.metric])
    return out


def _batches(model: Any, rows: list[dict[str, Any]], size: int) -> tuple[timing.Batch, timing.Batch]:
    """A batch of one and a batch of `size` model rows from the test split, as the server would run them."""
    encoded = _encoded(model, rows[: max(size, 1)])

    def batch(n: int) -> timing.Batch:
        return encoded.padded([i % len(encoded) for i in range(n)], model.tokenizer.pad_token_id)

    return batch(1), batch(size)


def gate(cfg: PipelineConfig, table: dict[str, Measured]) -> list[str]:
    """Mark each measured row allowed or refused (its metric at most `max_metric_drop` below Paddle fp32's; a row
    already unavailable stays so); the allowed variants."""
    base = reference(cfg)
    reference_metric = table[base].metric
    assert reference_metric is not None, f"{base} always runs"
    floor = reference_metric - cfg.serving.max_metric_drop
    for row in table.values():
        if row.metric is None or row.status == "unavailable":
            continue
        if row.metric >= floor:
            row.status = "allowed"
        else:
            row.status, row.reason = "refused", f"{cfg.gate.metric} {row.metric:.4f} < {floor:.4f}"
    return [name for name, row in table.items() if row.status == "allowed"]


def ranked_by(table: dict[str, Measured]) -> str:
    """Served texts/s when every allowed variant has that figure, else in-process texts/s at the batch size."""
    allowed = [r for r in table.values() if r.status == "allowed"]
    return RANKED_BY_SERVED if allowed and all(r.served_texts_per_s for r in allowed) else RANKED_BY_IN_PROCESS


def choose(cfg: PipelineConfig, table: dict[str, Measured]) -> tuple[str, list[str], str]:
    """(the variant to serve, the ranking to fall back along, why): the fastest (served where every allowed variant
    was served, `ranked_by`) whose metric is at most `max_metric_drop` below Paddle fp32's; a pinned variant when it
    could be measured."""
    base = reference(cfg)
    gate(cfg, table)
    served = ranked_by(table) == RANKED_BY_SERVED

    def speed(row: Measured) -> float:
        return (row.served_texts_per_s if served else row.batch_texts_per_s) or 0.0

    allowed = sorted((r for r in table.values() if r.status == "allowed"), key=lambda r: -speed(r))
    ranking = [r.variant for r in allowed] + ([base] if table[base].status != "allowed" else [])
    pinned = cfg.serving.engine
    if pinned != "auto" and table.get(pinned) and table[pinned].metric is not None:
        why = f"pinned by serving.engine ({cfg.gate.metric} {table[pinned].metric:.4f})"
        return pinned, [pinned, *[r for r in ranking if r != pinned]], why
    best = table[ranking[0]]
    how = (
        f"fastest served ({speed(best):.1f} texts/s, {cfg.serving.max_batch_size} clients)"
        if served
        else f"fastest at batch {cfg.serving.max_batch_size} ({speed(best):.1f} texts/s)"
    )
    reference_metric = table[base].metric
    why = (
        f"{how} with {cfg.gate.metric} {best.metric:.4f} within {cfg.serving.max_metric_drop} of {base}'s "
        f"{reference_metric:.4f}"
    )
    return best.variant, ranking, why


def _served(
    cfg: PipelineConfig, models: dict[str, Any], rows: list[dict[str, Any]], table: dict[str, Measured]
) -> None:
    """Every allowed variant served over loopback HTTP (test rows as the requests): `served_texts_per_s` in `table`;
    a variant whose answers failed when served is unavailable (never served), and says why."""
    from steps.runtime.serving.model_server.loopback import served_speeds  # kserve: loaded only to serve over loopback

    allowed = {name: models[name] for name in gate(cfg, table) if name in models}
    clients = cfg.serving.max_batch_size
    instances = [models[reference(cfg)].task.instance(r) for r in rows[: 2 * clients]]
    speeds = served_speeds(allowed, cfg.serving, instances, clients, SERVED_ROUNDS, SETTLE_S, SERVED_BUDGET_S)
    for name, speed in speeds.items():
        table[name].served_texts_per_s = speed.texts_per_s
        if speed.error:
            table[name].status, table[name].reason = "unavailable", f"failed when served: {speed.error}"
            log.warning("%s failed when served: %s", name, speed.error)


def select(cfg: PipelineConfig, model_dir: Path, data_dir: Path) -> dict[str, Any]:
    """Build the variants beside the export in `model_dir`, measure them on `data_dir`'s test split, write and
    return the `engine.json` record."""
    task = tasks.for_config(cfg)
    rows = task.read_rows(data_dir / "test.jsonl")
    threads = cfg.serving.cpu_threads or cpu_quota.default_threads()
    size = cfg.serving.max_batch_size
    base = reference(cfg)
    opened, missing = _open(cfg, model_dir, [base], threads)  # runs the export itself: no conversion needed
    if base not in opened:
        raise StepError(f"{base}, the reference engine, does not run here: {missing.get(base)}")
    int8 = cfg.serving.quantization
    calibration = _calibration(opened[base], data_dir, size) if int8 else None
    built = build_variants(model_dir, calibration=calibration, int8=int8)
    # The GPU variants, like the Paddle CPU ones, run the export itself; build_variants converts for the CPU only.
    wanted = candidates(cfg)
    names = [n for n in wanted if n in built or n in GPU_VARIANTS]
    skipped = {n: why for n, why in built.skipped.items() if n in wanted}
    table = {n: Measured(n, "unavailable", reason=f"not built: {why}") for n, why in skipped.items()}
    more, missing = _open(cfg, model_dir, [n for n in names if n != base], threads)
    opened |= more
    models = {n: opened[n] for n in names if n in opened}
    table |= {n: Measured(n, "unavailable", reason=why) for n, why in missing.items()}
    one, many = _batches(models[base], rows, size)
    metrics = _metrics(cfg, models, rows)
    speeds = timing.interleaved({n: m.engine for n, m in models.items()}, one, many, ROUNDS, SETTLE_S)
    for name, speed in speeds.items():
        table[name] = Measured(name, "measured", metrics[name], speed.batch1_p50_ms, speed.batch1_texts_per_s,
                               speed.batchN_texts_per_s)  # fmt: skip
    _served(cfg, models, rows, table)
    selected, ranking, why = choose(cfg, table)
    flags = cpu_flags()
    record = {
        "selected": selected,
        "reason": why,
        "ranking": ranking,
        "ranked_by": ranked_by(table),
        "metric": cfg.gate.metric,
        "max_metric_drop": cfg.serving.max_metric_drop,
        "batch_size": size,
        "threads": threads,
        "host_cpu_features": sorted(f for f in FEATURES if f in flags),
        "variants": {n: asdict(table[n]) for n in (*VARIANTS, *GPU_VARIANTS) if n in table},
    }
    (model_dir / ENGINE_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    log.info("engine %s: %s", selected, why)
    return record


def table_lines(record: dict[str, Any]) -> list[str]:
    """The variants table as text lines (the evaluate log, last-run.json's readers), and what ranked them."""
    lines = [
        f"{'variant':<14} {'status':<12} {record['metric']:>9} {'b1 p50 ms':>10} {'b1 /s':>8} {'batch /s':>9}"
        f" {'served /s':>10}"
    ]
    for name, row in record["variants"].items():
        cells = [row["metric"], row["batch1_p50_ms"], row["batch1_texts_per_s"], row["batch_texts_per_s"]]
        cells.append(row.get("served_texts_per_s"))
        shown = ["-" if c is None else f"{c:.4f}" if i == 0 else f"{c:.1f}" for i, c in enumerate(cells)]
        mark = "*" if name == record["selected"] else " "
        lines.append(
            f"{mark}{name:<13} {row['status']:<12} {shown[0]:>9} {shown[1]:>10} {shown[2]:>8} {shown[3]:>9}"
            f" {shown[4]:>10}"
        )
    lines.append(f"ranked by {record.get('ranked_by', RANKED_BY_IN_PROCESS)}")
    return lines


__all__ = [
    "ENGINE_FILE",
    "RANKED_BY_IN_PROCESS",
    "RANKED_BY_SERVED",
    "Measured",
    "candidates",
    "choose",
    "gate",
    "ranked_by",
    "select",
    "table_lines",
]
