"""Publish the trained model to the object store (content-addressed objects, manifest last).

Publishing is the hand-over: the manifest's creation is the bucket notification that starts the `rollout`
workflow (validate, register, rollout), exactly as for a model published from anywhere else. The manifest
records the run, the commit, the data stats and the serving image built from the same commit.

Outputs: `model-uri` (the published version prefix) and `manifest-digest` (sha256 of the manifest bytes).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from steps.runtime import config_names, runner
from steps.runtime.caching import keys as cache_keys
from steps.runtime.caching import reuse
from steps.runtime.runner import StepError
from steps.runtime.storage import objectstore, workspace
from steps.runtime.storage.objectstore.backends import resolve_root
from steps.runtime.training import model_tracking

log = logging.getLogger("steps.upload")
PUBLISHED = "published.json"
UPLOAD = "upload"  # the workspace area of published.json, and its name in a cache entry


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", required=True, help="per-run workspace (directory or s3:// prefix)")
    parser.add_argument("--run-id", required=True, help="MLflow run of training/evaluation (names the version)")
    parser.add_argument(
        "--version", default=None, help="version name (default: <git-sha[:12]>-<run-id[:8]>-<files' sha256[:8]>)"
    )
    parser.add_argument(
        "--serve-image-digest",
        default="",
        help="serving image built from the same commit (build-image's serve-image-digest); the rollout serves it",
    )


def default_version(git_sha: str, run_id: str) -> str:
    """The default version's prefix; publish appends the files' digest. Deterministic, so a retried upload of the
    same run lands on the same version (idempotent), while `--from evaluate` re-measures the engine variants and
    may choose another one: that export is different content and gets a version of its own."""
    return f"{git_sha[:12]}-{run_id[:8]}"


def _read_json(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise StepError(f"{path} is not valid JSON ({exc}); rerun the step that writes it") from None


def pretrained_provenance(model_config: Any) -> dict[str, Any] | None:
    """The export's `pretrained*` fields (model_config.json), None for a model trained from scratch."""
    fields = {k: v for k, v in (model_config or {}).items() if k.startswith("pretrained") and v is not None}
    return fields or None


def cache_key(cfg: PipelineConfig, args: argparse.Namespace, model_dir: Path) -> cache_keys.Key:
    """What the publication depends on (docs/caching.md): this step's code, the files published, where and under
    which name, and the serving image recorded with them. The run, commit and metrics in the manifest are a record
    of who published first, not part of the key: the same files are published once."""
    return cache_keys.Key(
        STEP.name,
        {
            "code": cache_keys.code_digest("steps.upload"),
            "model": cache_keys.dir_digest(model_dir),
            "store": cache_keys.digest_json([resolve_root(cfg.storage.uri), cfg.mlflow.registered_model]),
            "serve_image": _serve_image(args),
        },
    )


def _still_published(outputs: dict[str, str], endpoint: str | None) -> bool:
    """Whether the version a cache entry names is still in the store with the manifest it published."""
    data = objectstore.read_manifest_bytes(outputs.get("model-uri", ""), endpoint) if outputs.get("model-uri") else None
    return data is not None and objectstore.sha256_bytes(data) == outputs.get("manifest-digest")


def _serve_image(args: argparse.Namespace) -> str | None:
    # A local run builds no image (build-image outputs a placeholder): only a real digest is recorded.
    return args.serve_image_digest if args.serve_image_digest.startswith("sha256:") else None


def run(cfg: PipelineConfig, args: argparse.Namespace) -> dict[str, str]:
    endpoint = os.environ.get("S3_ENDPOINT_URL") or cfg.storage.endpoint_url
    try:
        ws = workspace.stage_in(args.workspace, endpoint_url=endpoint)
    except FileNotFoundError as exc:
        raise StepError(f"workspace {args.workspace} is not readable ({exc}); run the earlier steps first") from None
    model_dir = ws / "model"
    if not model_dir.is_dir():
        raise StepError(f"{workspace.join(args.workspace, 'model')} does not exist; run the train step first")
    cached = reuse.begin(args, cache_key(cfg, args, model_dir), endpoint)
    if cached.entry is not None and not _still_published(cached.entry.outputs, endpoint):
        log.info("upload: %s is no longer in the store; publishing again", cached.entry.outputs.get("model-uri"))
        cached.entry = None
    restored = cached.restore({UPLOAD: workspace.join(args.workspace, UPLOAD)})
    if restored is not None:
        print(f"published before: {restored['model-uri']} (the same files; nothing sent)")
        return restored
    metadata = {
        "task": cfg.task,
        "task_type": cfg.model.task,
        "git_sha": args.git_sha,
        "run_id": args.run_id,
        "metrics": _read_json(ws / "eval" / "metrics.json"),
        "data_stats": _read_json(ws / "data" / "stats.json"),
        # Which pretrained weights the model was fine-tuned from (name, staged digest, PaddleNLP version).
        "pretrained": pretrained_provenance(_read_json(model_dir / "model_config.json")),
        "serve_image_digest": _serve_image(args),
        # evaluate's MLflow LoggedModel of this model: metadata that register links, not identity (the files are).
        "mlflow_model_id": model_tracking.read_record(ws / "eval"),
    }
    version = args.version or default_version(args.git_sha, args.run_id)
    result = objectstore.publish(
        model_dir,
        cfg.storage.uri,
        config_names.registered_model(cfg),
        version,
        metadata,
        endpoint_url=endpoint,
        progress=sys.stderr.isatty(),
        content_suffix=args.version is None,
    )
    print(
        f"published {result.model_uri}: {result.bytes_sent} bytes sent, {result.skipped} objects already stored, "
        f"manifest sha256 {result.manifest_digest}"
    )
    local = _record(args.workspace, endpoint, result.model_uri, result.manifest_digest)
    return cached.record({UPLOAD: local}, {"model-uri": result.model_uri, "manifest-digest": result.manifest_digest})


def _record(ws: str, endpoint: str | None, model_uri: str, digest: str) -> Path:
    """`<workspace>/upload/published.json`: what a finetune-batch summary reads back for this task; its local copy."""
    local = Path(tempfile.mkdtemp(prefix="upload-"))
    (local / PUBLISHED).write_text(json.dumps({"model_uri": model_uri, "manifest_digest": digest}), encoding="utf-8")
    workspace.stage_out(local, workspace.join(ws, UPLOAD), endpoint)
    return local


STEP = runner.Step(
    "upload",
    __doc__,
    run,
    _arguments,
    outputs=(
        runner.Output("model-uri", "the published model URI"),
        runner.Output("manifest-digest", "the manifest's sha256"),
    ),
    cacheable=True,
)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
