"""A registered version's description: a short Markdown model card written from the published manifest, and the
short figures that replace whole JSON documents as version tags.

The long documents stay where they are: the manifest (`manifest.json` beside the published files) and the training
run's artifacts `evaluation/metrics.json` and `model-info/stats.json`; the card says where.
"""

from __future__ import annotations

from typing import Any

from paddle_mlops_core.contracts import mlflow_ui_url

# Where the training run keeps the long documents (steps/runtime/training/tracking.py MODEL_INFO, model_tracking).
METRICS_ARTIFACT = "evaluation/metrics.json"
STATS_ARTIFACT = "model-info/stats.json"
SPLITS = ("train", "dev", "test")


def _figure(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "n/a"


def run_link(tracking_uri: str, experiment_id: str | None, run_id: str) -> str:
    """The run as a Markdown link to the MLflow UI's model-training view when the tracking URI is a server, else its
    id (an embedded SQLite store has no page: `paddle-mlops ui` serves one)."""
    if tracking_uri.startswith(("http://", "https://")) and experiment_id:
        return f"[{run_id}]({mlflow_ui_url(tracking_uri, experiment_id, run_id)})"
    return f"`{run_id}`"


def render(manifest: dict[str, Any], run: str) -> str:
    """The card: task, data and split digests, the test metric against the baseline with its interval, the engine,
    the pretrained weights, the commit and the run (`run`: run_link's text)."""
    metrics = manifest.get("metrics") or {}
    stats = manifest.get("data_stats") or {}
    base = metrics.get("baseline") or {}
    metric = base.get("metric") or next((k for k in ("accuracy", "micro_f1") if k in metrics), "")
    engine = (metrics.get("engine") or {}).get("selected") or "paddle-fp32"
    pretrained = manifest.get("pretrained") or {}
    weights = pretrained.get("pretrained") or "none (trained from scratch)"
    if pretrained.get("pretrained_digest"):
        weights += f" (`{str(pretrained['pretrained_digest'])[:16]}`)"
    lines = [
        f"### {manifest.get('task', '?')} ({manifest.get('task_type', '?')})",
        "",
        "| | |",
        "|---|---|",
        f"| test {metric} | **{_figure(metrics.get(metric))}** on {metrics.get('examples', '?')} examples |",
    ]
    if base:
        lines.append(
            f"| baseline {base.get('kind', '?')} | {_figure(base.get('baseline'))}: difference "
            f"{_figure(base.get('difference'))} [{_figure(base.get('ci_low'))}, {_figure(base.get('ci_high'))}] "
            f"({round(float(base.get('confidence') or 0.95) * 100)} % CI; "
            f"{(base.get('test') or {}).get('name', 'paired test')} "
            f"p={_figure((base.get('test') or {}).get('p_value'))}) |"
        )
    digests = stats.get("sha256") or {}
    splits = stats.get("splits") or {}
    for split in SPLITS:
        digest = str(digests.get(f"{split}.jsonl") or "")
        rows = (splits.get(split) or {}).get("total", "?")
        if digest:
            lines.append(f"| {split} split | {rows} rows, sha256 `{digest[:16]}` |")
    lines += [
        f"| engine | {engine} |",
        f"| pretrained weights | {weights} |",
        f"| git SHA | `{str(manifest.get('git_sha') or '?')[:12]}` |",
        f"| training run | {run} |",
        "",
        f"The full test report and data statistics are the run's artifacts `{METRICS_ARTIFACT}` and "
        f"`{STATS_ARTIFACT}`, and the version's `manifest.json`.",
    ]
    return "\n".join(lines)


def short_tags(manifest: dict[str, Any]) -> dict[str, str]:
    """Short figures for the version's tags, in place of the whole `data_stats` and `metrics` documents."""
    metrics = manifest.get("metrics") or {}
    stats = manifest.get("data_stats") or {}
    tags: dict[str, str] = {}
    for split in SPLITS:
        digest = str((stats.get("sha256") or {}).get(f"{split}.jsonl") or "")
        if digest:
            tags[f"data.{split}_sha256"] = digest[:16]
        rows = ((stats.get("splits") or {}).get(split) or {}).get("total")
        if rows is not None:
            tags[f"data.{split}_rows"] = str(rows)
    if (engine := (metrics.get("engine") or {}).get("selected")) is not None:
        tags["engine"] = str(engine)
    if isinstance(metrics.get("examples"), int):
        tags["test_examples"] = str(metrics["examples"])
    return tags
