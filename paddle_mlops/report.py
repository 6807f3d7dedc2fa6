"""`paddle-mlops report RUN_ID`: one MLflow run as a folder of plots and an `index.html` summary.

Plots logged by the run (PNG artifacts under `plots/`) are downloaded as they are; any that are
missing are drawn again from what the run recorded: the per-epoch metric history
(`train_loss` and every `dev_*` metric of the task: `dev_accuracy`, `dev_macro_f1`; `dev_micro_f1`, … for NER) and
an evaluation `metrics.json` artifact (`per_class`, `confusion_matrix` + `labels`; NER reports have no matrix).
"""

from __future__ import annotations

import argparse
import html
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from paddle_mlops_core import contracts
from paddle_mlops_core.contracts import EXIT_USER_ERROR
from steps.runtime import plots

# Per-epoch series: the train loss and every dev metric of the task (accuracy, macro_f1; micro_f1, precision, …).
TRAIN_LOSS = "train_loss"
DEV_PREFIX = "dev_"


class ReportError(Exception):
    """The run cannot be reported (unknown id, unreachable tracking server)."""


def _artifacts(client: MlflowClient, run_id: str, path: str | None = None) -> list[str]:
    """Every artifact file path of the run, recursively."""
    found: list[str] = []
    for info in client.list_artifacts(run_id, path):
        if info.is_dir:
            found.extend(_artifacts(client, run_id, info.path))
        else:
            found.append(info.path)
    return found


def _history(client: MlflowClient, run_id: str) -> list[dict[str, float]]:
    by_epoch: dict[int, dict[str, float]] = {}
    logged = client.get_run(run_id).data.metrics
    for key in [TRAIN_LOSS, *sorted(k for k in logged if k.startswith(DEV_PREFIX))]:
        for metric in client.get_metric_history(run_id, key):
            by_epoch.setdefault(metric.step, {"epoch": metric.step})[key] = metric.value
    return [by_epoch[e] for e in sorted(by_epoch)]


def _eval_metrics(client: MlflowClient, run_id: str, files: list[str], scratch: Path) -> dict[str, Any]:
    """The evaluation's metrics.json if the run logged one (prefer one under eval/)."""
    candidates = sorted((f for f in files if f.endswith("metrics.json")), key=lambda f: not f.startswith("eval"))
    if not candidates:
        return {}
    local = client.download_artifacts(run_id, candidates[0], str(scratch))
    try:
        data = json.loads(Path(local).read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def _collect_plots(client: MlflowClient, run_id: str, files: list[str], out: Path, scratch: Path) -> list[Path]:
    images: dict[str, Path] = {}
    for artifact in files:
        if artifact.lower().endswith(".png"):
            local = Path(client.download_artifacts(run_id, artifact, str(scratch)))
            target = out / Path(artifact).name
            target.write_bytes(local.read_bytes())
            images[target.name] = target
    if plots.CURVES_PNG not in images:
        history = _history(client, run_id)
        if history:
            images[plots.CURVES_PNG] = plots.plot_curves(history, out / plots.CURVES_PNG)
    evaluation = _eval_metrics(client, run_id, files, scratch)
    matrix, labels = evaluation.get("confusion_matrix"), evaluation.get("labels")
    per_class = evaluation.get("per_class")
    if plots.CONFUSION_PNG not in images and matrix and labels is None and isinstance(per_class, dict):
        labels = list(per_class)
    if plots.CONFUSION_PNG not in images and matrix and labels:
        images[plots.CONFUSION_PNG] = plots.plot_confusion_matrix(matrix, labels, out / plots.CONFUSION_PNG)
    if plots.PER_CLASS_PNG not in images and isinstance(per_class, dict) and per_class:
        images[plots.PER_CLASS_PNG] = plots.plot_per_class(per_class, out / plots.PER_CLASS_PNG)
    return sorted(images.values())


def _table(title: str, rows: dict[str, Any]) -> str:
    if not rows:
        return f"<h2>{html.escape(title)}</h2><p>none recorded</p>"
    body = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_fmt(v))}</td></tr>" for k, v in sorted(rows.items())
    )
    return f"<h2>{html.escape(title)}</h2><table>{body}</table>"


def _fmt(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _html(run: Any, images: list[Path]) -> str:
    info, data = run.info, run.data
    gate = {k: v for k, v in data.tags.items() if "gate" in k.lower()}
    figures = "".join(
        f'<figure><img src="{html.escape(p.name)}" alt="{html.escape(p.stem)}"><figcaption>{html.escape(p.stem)}'
        "</figcaption></figure>"
        for p in images
    )
    title = f"Run {info.run_name or info.run_id}"
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "th,td{border:1px solid #ccc;padding:2px 8px;text-align:left}figure{display:inline-block}</style>"
        f"</head><body><h1>{html.escape(title)}</h1>"
        f"<p>run id <code>{html.escape(info.run_id)}</code>, status {html.escape(str(info.status))}</p>"
        + _table("Gate", gate)
        + _table("Final metrics", dict(data.metrics))
        + _table("Parameters", dict(data.params))
        + f"<h2>Plots</h2>{figures or '<p>none</p>'}</body></html>\n"
    )


def report(run_id: str, out_dir: str | Path, tracking_uri: str | None = None) -> Path:
    """Write `out_dir/index.html` and the run's plots; return the path of index.html."""
    client = MlflowClient(tracking_uri=tracking_uri or contracts.tracking_uri())
    try:
        run = client.get_run(run_id)
        files = _artifacts(client, run_id)
    except MlflowException as exc:
        raise ReportError(f"MLflow run {run_id!r} not found or unreadable: {exc.message}") from None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Downloads land in a scratch folder: the report folder holds only what index.html shows.
    with tempfile.TemporaryDirectory(prefix="report-") as scratch:
        images = _collect_plots(client, run_id, files, out, Path(scratch))
    index = out / "index.html"
    index.write_text(_html(run, images), encoding="utf-8")
    return index


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="paddle-mlops report", description=__doc__.splitlines()[0])
    parser.add_argument("run_id", help="MLflow run id (the evaluate step's mlflow-run-id output)")
    parser.add_argument("--out", default=None, help="output folder (default: reports/<run id>)")
    parser.add_argument(
        "--tracking-uri", default=None, help="MLflow tracking URI (default: MLFLOW_TRACKING_URI or the local store)"
    )
    return parser.parse_args(list(argv) if argv is not None else None)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        index = report(args.run_id, args.out or Path("reports") / args.run_id, args.tracking_uri)
    except ReportError as exc:
        print(f"[report] error: {exc}; list runs with `mlflow runs list` or check --tracking-uri.", file=sys.stderr)
        return EXIT_USER_ERROR
    print(index)
    return 0


if __name__ == "__main__":
    sys.exit(main())
