"""The serving benchmark's report: the contenders' figures and the ratios against the targets, printed and as
the `--json` results.

The ratios of record pair the rounds of one rotation (`Result.paired_ratio`); the ratios of the median rounds
and of all rounds together are printed beside them, to show how much the pairing matters on this machine.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from benchmarks.serving_contenders import Result
from benchmarks.workload import Shape


def report(args: argparse.Namespace, shape: Shape, results: dict[str, Result], rates: dict[int, float]) -> dict:
    """Print every contender's figures and the ratios; the results as a dict (`--json`)."""
    print_contenders(args, shape, results)
    figures = ratios(results)
    print_ratios(args, figures, results["in-process@batch"].name)
    return as_json(args, shape, results, rates) | figures


def print_contenders(args: argparse.Namespace, shape: Shape, results: dict[str, Result]) -> None:
    """The run's settings, then one line per contender: batch-1 latency and throughput, each where measured."""
    inproc, ours, base, floor = results["in-process"], results["ours"], results["baseline"], results["floor"]
    ours_aiohttp = results["ours-aiohttp"]
    print(
        f"model: {shape.describe()}; engine {args.engine or 'paddle-fp32'}; cpu_threads {args.cpu_threads}; "
        f"{os.cpu_count()} CPUs; {args.requests} requests x {args.rounds} rounds; {args.clients} clients"
    )
    for r in (inproc, ours, base):
        extra = f" ({r.note})" if r.note else f" ({args.clients} clients)"
        print(
            f"  {r.name:<12} batch-1 p50 {r.p50 * 1e3:7.2f} ms  p99 {r.pct(99) * 1e3:7.2f} ms  "
            f"throughput {r.throughput:7.2f} texts/s (all rounds together {r.total_throughput:6.2f}){extra}"
        )
    print(
        f"  {ours_aiohttp.name:<12} throughput {ours_aiohttp.throughput:7.2f} texts/s (all rounds together "
        f"{ours_aiohttp.total_throughput:6.2f}) ({ours_aiohttp.note})"
    )
    print(
        f"  {floor.name:<12} batch-1 p50 {floor.p50 * 1e3:7.2f} ms  p99 {floor.pct(99) * 1e3:7.2f} ms  "
        "(the bare ASGI app around the same predictor under the same uvicorn)"
    )


def ratios(results: dict[str, Result]) -> dict[str, float]:
    """Our server's and the baseline's figures over the in-process ones and over the floor's."""
    inproc, ours, base, floor = results["in-process"], results["ours"], results["baseline"], results["floor"]
    at_batch, ours_aiohttp = results["in-process@batch"], results["ours-aiohttp"]
    return {
        "floor_latency_ratio": ours.p50 / floor.p50,
        "floor_over_in_process_latency": floor.p50 / inproc.p50,
        "batch_throughput_ratio": ours.paired_ratio(at_batch),
        "aiohttp_batch_throughput_ratio": ours_aiohttp.paired_ratio(at_batch),
        "latency_ratio": ours.p50 / inproc.p50,
        "throughput_ratio": ours.paired_ratio(inproc),
        "baseline_latency_ratio": base.p50 / inproc.p50,
        "baseline_throughput_ratio": base.paired_ratio(inproc),
        "median_round_throughput_ratio": ours.throughput / inproc.throughput,
        "baseline_median_round_throughput_ratio": base.throughput / inproc.throughput,
        "total_throughput_ratio": ours.total_throughput / inproc.total_throughput,
        "baseline_total_throughput_ratio": base.total_throughput / inproc.total_throughput,
    }


def print_ratios(args: argparse.Namespace, figures: dict[str, float], at_batch_name: str) -> None:
    """The ratios, each with its target where it has one; `at_batch_name` is the in-process batch ours forms."""
    print(
        f"latency ratio: {figures['latency_ratio']:.3f}  (target <= 1.05; baseline "
        f"{figures['baseline_latency_ratio']:.3f})"
    )
    print(
        f"throughput ratio: {figures['throughput_ratio']:.3f}  (target >= 0.95; baseline "
        f"{figures['baseline_throughput_ratio']:.3f}; median over {args.rounds} rotations of round / in-process round)"
    )
    print(
        f"throughput ratio of the median rounds: {figures['median_round_throughput_ratio']:.3f}  "
        f"(baseline {figures['baseline_median_round_throughput_ratio']:.3f})"
    )
    print(
        f"throughput ratio of all rounds together: {figures['total_throughput_ratio']:.3f}  "
        f"(baseline {figures['baseline_total_throughput_ratio']:.3f})"
    )
    print(
        f"latency ratio against the floor: {figures['floor_latency_ratio']:.3f}  (target <= 1.02; floor / in-process "
        f"{figures['floor_over_in_process_latency']:.3f})"
    )
    print(
        f"throughput ratio against {at_batch_name}: {figures['batch_throughput_ratio']:.3f}  "
        "(target >= 0.95; the largest batch the clients form)"
    )
    print(
        f"the same with aiohttp clients: {figures['aiohttp_batch_throughput_ratio']:.3f}  "
        "(a client that costs the shared CPUs more per request)"
    )
    print(f"baseline latency ratio: {figures['baseline_latency_ratio']:.3f}")
    print(f"baseline throughput ratio: {figures['baseline_throughput_ratio']:.3f}")


def as_json(
    args: argparse.Namespace, shape: Shape, results: dict[str, Result], rates: dict[int, float]
) -> dict[str, Any]:
    """The run's settings and every contender's figures, as the `--json` file holds them (the ratios follow)."""
    inproc, ours, base, floor = results["in-process"], results["ours"], results["baseline"], results["floor"]
    ours_aiohttp = results["ours-aiohttp"]
    contenders = {
        r.name: {
            "p50_ms": r.p50 * 1e3,
            "p99_ms": r.pct(99) * 1e3,
            "texts_per_s": r.throughput,
            "all_rounds_texts_per_s": r.total_throughput,
            "note": r.note,
            "texts_per_s_by_round": r.per_round,
        }
        for r in (inproc, ours, base)
    }
    contenders[ours_aiohttp.name] = {
        "texts_per_s": ours_aiohttp.throughput,
        "all_rounds_texts_per_s": ours_aiohttp.total_throughput,
        "note": ours_aiohttp.note,
        "texts_per_s_by_round": ours_aiohttp.per_round,
    }
    contenders[floor.name] = {"p50_ms": floor.p50 * 1e3, "p99_ms": floor.pct(99) * 1e3}
    return {
        "model": shape.__dict__,
        "engine": args.engine or "paddle-fp32",
        "cpu_threads": args.cpu_threads,
        "cpus": os.cpu_count(),
        "requests": args.requests,
        "clients": args.clients,
        "in_process_by_batch": rates,
        "contenders": contenders,
    }
