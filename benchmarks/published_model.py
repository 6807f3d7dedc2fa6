"""Published model benchmark (#62): a version as the export alone (before) against the export plus the MLflow model
files at its root (now), read back by MLflow through the published-file artifact repository.

For each size (a tiny export and one with a random `inference.pdiparams` of `--size-mib`), alternating over
`--rounds` so both layouts see the same machine load, into a fresh local store each time:
- bytes stored: every object under the store plus the manifest (what one version costs);
- publish: `objectstore.publish` of the directory (hashing, copy, verification, manifest last);
- load, before: `objectstore.fetch` of the version (what the model server does) and nothing else;
- load, now: the same fetch, and `mlflow.pyfunc.load_model("models:/<name>/<version>")` after `registry.register`
  (the registry's source is the published version: MLflow downloads it through the repository, no second copy).
The MLflow files come from `mlflow.pyfunc.save_model` of a trivial python model (a few KiB, like the flavour's).

    python -m benchmarks.published_model               # tiny + 100 MiB, 3 rounds (~1 minute on 2 cores)
    python -m benchmarks.published_model --quick       # tiny + 4 MiB, 1 round
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import benchmark_parser, parse_benchmark_args, write_results

MIB = 1024 * 1024
MODEL = "ernie-sentiment"


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = benchmark_parser("published_model", __doc__)
    parser.add_argument("--size-mib", type=int, default=None, help="params file of the large export (default 100)")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 3; 1 with --quick)")
    args = parse_benchmark_args(parser, argv, quick_help="smoke run: 4 MiB export, one round")
    args.size_mib = args.size_mib or (4 if args.quick else 100)
    args.rounds = args.rounds or (1 if args.quick else 3)
    if args.size_mib < 1 or args.rounds < 1:
        parser.error("--size-mib and --rounds must be at least 1")
    return args


def make_export(directory: Path, params_bytes: int) -> None:
    """Random bytes laid out like an export (weights, program, tokenizer and configuration files)."""
    directory.mkdir(parents=True)
    with open(directory / "inference.pdiparams", "wb") as fh:
        for start in range(0, params_bytes, MIB):
            fh.write(os.urandom(min(MIB, params_bytes - start)))
    (directory / "inference.json").write_bytes(os.urandom(64 * 1024))
    for name in ("vocab.txt", "tokenizer_config.json", "label_map.json", "model_config.json", "engine.json"):
        (directory / name).write_bytes(os.urandom(4 * 1024))


def add_mlflow_files(directory: Path) -> None:
    """MLmodel, requirements.txt, python_env.yaml, conda.yaml and the pickled model, at the export's root."""
    import mlflow

    from benchmarks.published_model_pyfunc import TextLength

    staging = directory.with_name(directory.name + "-mlflow")
    mlflow.pyfunc.save_model(staging, python_model=TextLength(), pip_requirements=[f"mlflow=={mlflow.__version__}"])
    for path in staging.iterdir():
        path.rename(directory / path.name)
    staging.rmdir()


def stored_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in store.rglob("*") if p.is_file())


def one_round(work: Path, params_bytes: int, with_mlflow: bool) -> dict[str, float]:
    """Publish and load one version in a fresh store; seconds and bytes."""
    import mlflow

    from paddle_mlops_core.config import load_config
    from steps.runtime.release import registry
    from steps.runtime.storage import objectstore

    export, store = work / "model", work / "store"
    make_export(export, params_bytes)
    if with_mlflow:
        add_mlflow_files(export)
    start = time.perf_counter()
    published = objectstore.publish(export, str(store), MODEL, "v1", {}, progress=False)
    publish_s = time.perf_counter() - start
    start = time.perf_counter()
    objectstore.fetch(published.model_uri, work / "fetched")
    result = {"bytes": float(stored_bytes(store)), "publish_s": publish_s, "fetch_s": time.perf_counter() - start}
    if with_mlflow:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{work}/mlflow.db"
        cfg = load_config(env="local")
        client = registry.connect(cfg)
        version = registry.register(
            cfg, published.model_uri, None, {"manifest_digest": published.manifest_digest}, client
        )
        start = time.perf_counter()
        model = mlflow.pyfunc.load_model(f"models:/{MODEL}/{version}")
        result["mlflow_load_s"] = time.perf_counter() - start
        assert model.predict(["好"]) == [1]
    return result


def measure(params_bytes: int, rounds: int) -> dict[str, dict[str, float]]:
    runs: dict[str, list[dict[str, float]]] = {"before": [], "now": []}
    for _ in range(rounds):
        for layout in ("before", "now"):
            with tempfile.TemporaryDirectory(prefix=f"bench-published-{layout}-") as work:
                runs[layout].append(one_round(Path(work), params_bytes, layout == "now"))
    return {
        layout: {key: statistics.median(r[key] for r in results) for key in results[0]}
        for layout, results in runs.items()
    }


def report(label: str, figures: dict[str, dict[str, float]]) -> list[str]:
    before, now = figures["before"], figures["now"]
    return [
        f"{label}:",
        f"  bytes stored per version: before {before['bytes']:,.0f}  now {now['bytes']:,.0f}  "
        f"(+{now['bytes'] - before['bytes']:,.0f}, ratio {now['bytes'] / before['bytes']:.4f})",
        f"  publish: before {before['publish_s'] * 1000:.1f} ms  now {now['publish_s'] * 1000:.1f} ms  "
        f"(ratio {now['publish_s'] / before['publish_s']:.2f})",
        f"  load, objectstore.fetch: before {before['fetch_s'] * 1000:.1f} ms  now {now['fetch_s'] * 1000:.1f} ms  "
        f"(ratio {now['fetch_s'] / before['fetch_s']:.2f})",
        f"  load, mlflow.pyfunc.load_model(models:/...): now {now['mlflow_load_s'] * 1000:.1f} ms  "
        f"(ratio to before's fetch {now['mlflow_load_s'] / before['fetch_s']:.2f})",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    # Run from a checkout, MLflow 3 also copies the uv project's pyproject.toml and uv.lock (~470 KB) into every
    # saved model (mlflow/utils/uv_utils.py `copy_uv_project_files`); the flavour's files do not include them.
    os.environ["MLFLOW_LOG_UV_FILES"] = "false"
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    results: dict[str, Any] = {"rounds": args.rounds, "cpus": os.cpu_count()}
    lines = [f"{args.rounds} round(s), medians; {os.cpu_count()} CPUs; local directory store"]
    for label, size in (
        ("tiny export (16 KiB params)", 16 * 1024),
        (f"{args.size_mib} MiB export", args.size_mib * MIB),
    ):
        figures = measure(size, args.rounds)
        results[label] = figures
        lines += report(label, figures)
    print("\n".join(lines))
    write_results(args.json_out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
