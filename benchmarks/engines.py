"""Engine benchmark: every CPU engine variant of one exported ERNIE classifier, in process; the variant the
selection picks; and that variant served over HTTP against today's configuration (Paddle fp32), in one run.

The model is the one benchmarks/serving.py serves (ERNIE 3.0-medium-sized, random weights, exported by
`steps.runtime.weights.ernie.export`) and the texts are its 62-character texts, tokenised by the export's tokenizer.
`steps.runtime.serving.engines.build_variants` converts the export (the static int8 variant calibrated on 128 other
texts of mixed lengths), and each variant that this node can run is opened at the same thread count and
measured in process: batch-1 p50 latency and texts/s, and texts/s at batch 16.

The variants are measured in interleaved rounds: round r times every variant once (one batch-1 call,
one batch-16 call), the order rotated by r, and each variant's figures are the medians of its rounds, so
that a slow spell of a shared machine falls on all of them alike. A pause before each variant's turn
lets the previous engine's worker threads stop spinning (Intel OpenMP spins 200 ms after each parallel
region). Beside the speeds: the largest |logit difference| of each variant from Paddle fp32 on the same
inputs (batch 1, batch 16 and a padded batch of mixed lengths), absolute and as a fraction of the largest
|logit|.

The selection is the pipeline's (steps/runtime/serving/engine_selection.py `choose`): the fastest variant served (each
variant the gate allows served as evaluate serves it, steps/runtime/serving/model_server/loopback.py, 16 clients,
interleaved
rounds) whose metric is within `serving.max_metric_drop` (0.005) of Paddle fp32's; the in-process ranking at
batch 16 is printed beside it. The benchmark's model has random
weights, so its metric is agreement with Paddle fp32's labels on the benchmark texts (fp32: 1.0), the stand-in
for held-out accuracy. Then benchmarks/serving.py's measurements run twice on this export, once with the
selected variant and once with Paddle fp32 as the server is configured today (same threads): 16 keep-alive
clients against the variant's in-process batched limit, and batch-1 latency against the same variant in
process. The last lines:

    selected variant: NAME
    served / best in-process throughput: R     (target >= 0.95; in process at batch 16, the largest batch 16
                                                clients form, in the same rotating rounds; the clients:
                                                benchmarks/load.py's)
    served / best in-process throughput, aiohttp clients: R
    served / today's served throughput: R      (target >= 2.5)
    batch-1 p50 served / in-process: R
    batch-1 p50 served / floor: R              (target <= 1.02; the floor: a bare ASGI app around the same
                                                predictor under the same uvicorn, measured in the same rotation)

    python -m benchmarks.engines            # the medium model (~15 minutes on 2 cores)
    python -m benchmarks.engines --quick    # a smoke run on a tiny model
    python -m benchmarks.engines --in-process-only
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

# The steps' code is imported where it is used (benchmarks/__init__.py says why).
from benchmarks import serving
from benchmarks.common import benchmark_parser, parse_benchmark_args, write_results
from benchmarks.workload import MEDIUM, TINY, Shape, export_model, make_texts
from paddle_mlops_core.config import load_config
from paddle_mlops_core.config.serving import ServingConfig
from steps.runtime.serving.engines.cpu import cpu_flags
from steps.runtime.serving.engines.measure import Batch, interleaved
from steps.runtime.serving.engines.runners import Engine, EngineUnavailable, open_engine
from steps.runtime.serving.engines.variants import (
    BF16_FLAGS,
    GPU_VARIANTS,
    PADDLE_FP32,
    VNNI_FLAGS,
    build_variants,
    variant_spec,
)

MIB = 1024 * 1024


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = benchmark_parser("engines", __doc__)
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 20; 3 with --quick)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of every engine (default 2)")
    parser.add_argument("--batch", type=int, default=16, help="the batched measurement's batch size (default 16)")
    parser.add_argument(
        "--gpu", action="store_true", help="the GPU variants (CUDA fp32/fp16, TensorRT fp16) instead of the CPU ones"
    )
    parser.add_argument("--in-process-only", action="store_true", help="skip selection and the served measurements")
    parser.add_argument(
        "--served-rounds", type=int, default=None, help="throughput rounds of each served run (default 40)"
    )
    parser.add_argument(
        "--selection-rounds", type=int, default=None, help="served rounds per variant for the selection (default 10)"
    )
    parser.add_argument(
        "--pause", type=float, default=None, help="seconds before each variant's turn (default 0.25; 0 with --quick)"
    )
    args = parse_benchmark_args(parser, argv, quick_help="smoke run: tiny model, 3 rounds")
    if args.rounds is None:
        args.rounds = 3 if args.quick else 20
    if args.pause is None:
        args.pause = 0.0 if args.quick else 0.25
    if args.served_rounds is None:
        args.served_rounds = 3 if args.quick else 40
    if args.selection_rounds is None:
        args.selection_rounds = 2 if args.quick else 10
    if args.rounds < 1 or args.threads < 1 or args.batch < 1 or args.pause < 0:
        parser.error("--rounds, --threads and --batch must be at least 1, --pause at least 0")
    return args


def mixed_lengths(texts: Sequence[str]) -> list[str]:
    """`texts` cut to 1/8, 2/8, ... 8/8 of their length in turn (at least one character)."""
    return [text[: max(1, len(text) * (1 + i % 8) // 8)] for i, text in enumerate(texts)]


def tokenised_inputs(model_dir: Path, shape: Shape, batch: int) -> dict[str, Batch]:
    """Batch 1, batch `batch` and a padded batch of mixed lengths, tokenised by the export's tokenizer."""
    from steps.runtime.weights import ernie

    tokenizer = ernie.load_tokenizer(model_dir)
    texts = make_texts(batch, shape.seq_len - 2)
    ids = ernie.encode(tokenizer, texts, shape.seq_len)
    mixed = mixed_lengths(texts[:8])
    pad = tokenizer.pad_token_id
    return {
        "one": ernie.pad_batch(ids[:1], pad),
        "many": ernie.pad_batch(ids, pad),
        "mixed": ernie.pad_batch(ernie.encode(tokenizer, mixed, shape.seq_len), pad),
    }


def calibration_batches(model_dir: Path, shape: Shape, n: int = 128, batch: int = 16) -> list[Batch]:
    """What the statically quantised variant observes: `n` benchmark texts of mixed lengths (not the measured
    ones), in batches of `batch`, as evaluate gives it `n` dev rows."""
    from steps.runtime.weights import ernie

    tokenizer = ernie.load_tokenizer(model_dir)
    texts = make_texts(n, shape.seq_len - 2, seed=2)
    ids = ernie.encode(tokenizer, mixed_lengths(texts), shape.seq_len)
    return [ernie.pad_batch(ids[i : i + batch], tokenizer.pad_token_id) for i in range(0, n, batch)]


def open_engines(model_dir: Path, names: Sequence[str], threads: int) -> tuple[dict[str, Engine], dict[str, str]]:
    """The variants this node can run, opened; the reason for each one it cannot."""
    engines: dict[str, Engine] = {}
    skipped: dict[str, str] = {}
    for name in names:
        try:
            engines[name] = open_engine(name, model_dir, threads)
        except EngineUnavailable as exc:
            skipped[name] = str(exc)
    return engines, skipped


def logit_differences(engines: dict[str, Engine], inputs: dict[str, Batch]) -> dict[str, tuple[float, float]]:
    """Per variant: the largest |logit - Paddle fp32 logit| over `inputs`, and that over the largest |logit|."""
    reference = {key: engines[PADDLE_FP32].run(*batch) for key, batch in inputs.items()}
    scale = max(float(np.abs(logits).max()) for logits in reference.values())
    out = {}
    for name, engine in engines.items():
        worst = max(float(np.abs(engine.run(*batch) - reference[key]).max()) for key, batch in inputs.items())
        out[name] = (worst, worst / scale)
    return out


def agreement(engines: dict[str, Engine], model_dir: Path, shape: Shape, n: int = 512) -> dict[str, float]:
    """Share of `n` benchmark texts each variant labels as Paddle fp32 does (the model's weights are random:
    agreement with the reference stands in for the held-out metric)."""
    from steps.runtime.weights import ernie

    tokenizer = ernie.load_tokenizer(model_dir)
    ids = ernie.encode(tokenizer, make_texts(n, shape.seq_len - 2, seed=1), shape.seq_len)
    batches = [ernie.pad_batch(ids[i : i + 16], tokenizer.pad_token_id) for i in range(0, n, 16)]
    labels = {name: np.concatenate([e.run(*b).argmax(axis=-1) for b in batches]) for name, e in engines.items()}
    return {name: float((found == labels[PADDLE_FP32]).mean()) for name, found in labels.items()}


def _table(results: dict[str, Any], served: bool) -> dict[str, Any]:
    from steps.runtime.serving.engine_selection import Measured

    return {
        name: Measured(
            name,
            "measured",
            metric=r["agreement"],
            batch_texts_per_s=r["batchN_texts_per_s"],
            served_texts_per_s=r.get("served_texts_per_s") if served else None,
        )
        for name, r in results["variants"].items()
    }


def select(results: dict[str, Any], served: bool = True) -> tuple[str, list[str], str]:
    """(variant, ranking, why) by the pipeline's rule (`agreement` as the metric): by served texts/s where every
    allowed variant has that figure, else (or with `served` false) by in-process texts/s at the batch size."""
    from steps.runtime.serving.engine_selection import choose

    selected, ranking, why = choose(load_config(), _table(results, served))
    return selected, ranking, why.replace("accuracy", "agreement with fp32")


def served_selection(args: argparse.Namespace, shape: Shape, results: dict[str, Any]) -> None:
    """Every variant the gate allows served as evaluate serves it for the selection
    (steps/runtime/serving/model_server/loopback.py:
    the real serving stack on a loopback port, 16 aiohttp clients, interleaved rounds): `served_texts_per_s`."""
    from steps.runtime.serving.engine_selection import gate
    from steps.runtime.serving.model_server.loopback import served_speeds
    from steps.runtime.weights.ernie import ExportedModel

    model_dir = Path(results["model_dir"])
    allowed = gate(load_config(), _table(results, served=False))
    classifiers = {n: ExportedModel(model_dir, cpu_threads=args.threads, engine=n, fall_back=False) for n in allowed}
    cfg = ServingConfig.model_validate({"cpu_threads": args.threads})
    texts = make_texts(2 * cfg.max_batch_size, shape.seq_len - 2, seed=3)
    started = time.perf_counter()
    speeds = served_speeds(classifiers, cfg, texts, cfg.max_batch_size, args.selection_rounds, args.pause, 600)
    for name, speed in speeds.items():
        results["variants"][name]["served_texts_per_s"] = speed.texts_per_s
    print(
        f"served for the selection ({cfg.max_batch_size} clients, {args.selection_rounds} interleaved rounds, "
        f"{time.perf_counter() - started:.0f}s): "
        + ", ".join(f"{n} {s.texts_per_s or 0:.1f}" + (f" ({s.error})" if s.error else "") for n, s in speeds.items())
    )


def served(args: argparse.Namespace, shape: Shape, work: Path, model_dir: Path, engine: str) -> dict[str, Any]:
    """benchmarks/serving.py's measurements on this export, every contender running `engine`."""
    argv = ["--engine", engine, "--rounds", str(args.served_rounds), "--cpu-threads", str(args.threads)]
    sargs = serving._parse_args([*argv, *(["--quick"] if args.quick else [])])
    (work / engine).mkdir(parents=True, exist_ok=True)
    print(f"== served, {engine}", flush=True)
    return serving.measure(sargs, shape, work / engine, model_dir)


def _files_mib(model_dir: Path, name: str) -> float:
    return sum((model_dir / f).stat().st_size for f in variant_spec(name).files) / MIB


def benchmark(
    shape: Shape, work: Path, rounds: int, threads: int, batch: int, pause: float, gpu: bool = False
) -> dict[str, Any]:
    """Export, convert and measure every variant (the GPU ones with `gpu`); the results as a dict (`--json`)."""
    started = time.perf_counter()
    model_dir = export_model(shape, work / "model")
    exported = time.perf_counter()
    if gpu:  # the GPU variants run the export itself: nothing to build
        names, skipped = [PADDLE_FP32, *GPU_VARIANTS], {}
    else:
        built = build_variants(model_dir, calibration=calibration_batches(model_dir, shape))
        names, skipped = list(built), built.skipped
    converted = time.perf_counter()
    print(f"exported {shape.describe()} in {exported - started:.0f}s, variants built in {converted - exported:.0f}s")
    engines, unavailable = open_engines(model_dir, names, threads)
    if PADDLE_FP32 not in engines:
        raise RuntimeError(f"Paddle fp32, the reference, did not open: {unavailable.get(PADDLE_FP32)}")
    if gpu and not set(engines) - {PADDLE_FP32}:
        raise RuntimeError(f"no GPU variant opened: {unavailable}")
    inputs = tokenised_inputs(model_dir, shape, batch)
    differences = logit_differences(engines, inputs)
    agreed = agreement(engines, model_dir, shape)
    speeds = interleaved(engines, inputs["one"], inputs["many"], rounds, pause)
    results: dict[str, dict[str, float]] = {}
    for name, speed in speeds.items():
        results[name] = {
            "batch1_p50_ms": speed.batch1_p50_ms,
            "batch1_texts_per_s": speed.batch1_texts_per_s,
            "batchN_texts_per_s": speed.batchN_texts_per_s,
            "max_abs_logit_diff": differences[name][0],
            "max_rel_logit_diff": differences[name][1],
            "agreement": agreed[name],
            "files_mib": _files_mib(model_dir, name),
        }
    flags = cpu_flags()
    return {
        "model": shape.__dict__,
        "threads": threads,
        "batch": batch,
        "rounds": rounds,
        "cpus": os.cpu_count(),
        "cpu_features": sorted(flags.intersection((*BF16_FLAGS, *VNNI_FLAGS, "amx_int8"))),
        "build_s": converted - exported,
        "variants": results,
        "skipped": {**skipped, **unavailable},
        "model_dir": str(model_dir),
    }


def report(results: dict[str, Any]) -> None:
    """The results as a table, with each variant's speed relative to Paddle fp32."""
    base = results["variants"][PADDLE_FP32]
    batch = results["batch"]
    print(
        f"{results['threads']} threads, {results['rounds']} interleaved rounds, {results['cpus']} CPUs "
        f"({', '.join(results['cpu_features']) or 'no bf16/VNNI'})"
    )
    print(
        f"  {'variant':<14} {'b1 p50 ms':>9} {'b1 texts/s':>10} {f'b{batch} texts/s':>12} {'x fp32':>6}"
        f" {'max|dlogit|':>11} {'rel':>6} {'agree':>6} {'MiB':>7}"
    )
    for name, r in results["variants"].items():
        print(
            f"  {name:<14} {r['batch1_p50_ms']:9.2f} {r['batch1_texts_per_s']:10.1f} {r['batchN_texts_per_s']:12.1f}"
            f" {r['batchN_texts_per_s'] / base['batchN_texts_per_s']:6.2f} {r['max_abs_logit_diff']:11.2e}"
            f" {r['max_rel_logit_diff']:6.3f} {r['agreement']:6.3f} {r['files_mib']:7.1f}"
        )
    for name, reason in results["skipped"].items():
        print(f"  {name:<14} skipped: {reason}")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    shape = TINY if args.quick else MEDIUM
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        try:
            results = benchmark(shape, Path(tmp), args.rounds, args.threads, args.batch, args.pause, args.gpu)
            report(results)
            if not (args.in_process_only or args.gpu):
                results |= serve_selected(args, shape, Path(tmp), results)
        except RuntimeError as exc:
            print(f"[benchmarks.engines] error: {exc}", file=sys.stderr)
            return 1
    write_results(args.json_out, results)
    return 0


def serve_selected(args: argparse.Namespace, shape: Shape, work: Path, results: dict[str, Any]) -> dict[str, Any]:
    """The selected variant served, and today's configuration (Paddle fp32) served, with the final ratios."""
    served_selection(args, shape, results)
    selected, ranking, why = select(results)
    in_process = select(results, served=False)
    print(f"selection: {selected}: {why}", flush=True)
    print(f"ranking served: {', '.join(ranking)}")
    print(f"ranking in process (batch {args.batch}): {', '.join(in_process[1])}", flush=True)
    model_dir = Path(results["model_dir"])
    runs = {
        name: served(args, shape, work / "served", model_dir, name) for name in dict.fromkeys([selected, PADDLE_FP32])
    }
    chosen, today = runs[selected], runs[PADDLE_FP32]
    ratios = {
        "served_over_best_in_process": chosen["batch_throughput_ratio"],
        "served_aiohttp_over_best_in_process": chosen["aiohttp_batch_throughput_ratio"],
        "served_over_today": chosen["contenders"]["ours"]["texts_per_s"] / today["contenders"]["ours"]["texts_per_s"],
        "latency_ratio": chosen["latency_ratio"],
        "floor_latency_ratio": chosen["floor_latency_ratio"],
    }
    print(f"today's configuration ({PADDLE_FP32}) served: {today['contenders']['ours']['texts_per_s']:.1f} texts/s")
    print(f"{selected} served: {chosen['contenders']['ours']['texts_per_s']:.1f} texts/s")
    print(f"selected variant: {selected}")
    print(f"served / best in-process throughput: {ratios['served_over_best_in_process']:.3f}")
    print(f"served / best in-process throughput, aiohttp clients: {ratios['served_aiohttp_over_best_in_process']:.3f}")
    print(f"served / today's served throughput: {ratios['served_over_today']:.3f}")
    print(f"batch-1 p50 served / in-process: {ratios['latency_ratio']:.3f}")
    print(f"batch-1 p50 served / floor: {ratios['floor_latency_ratio']:.3f}")
    return {
        "selected": selected,
        "selection_reason": why,
        "ranking_served": ranking,
        "ranking_in_process": in_process[1],
        "served": runs,
        **ratios,
    }


if __name__ == "__main__":
    sys.exit(main())
