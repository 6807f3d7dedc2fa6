"""Register a published model version in MLflow and point the `challenger` alias at it.

Never registers an unpublished model: the manifest must exist and hash to `--manifest-digest`.
"""

from __future__ import annotations

import argparse
import os
import sys

from paddle_mlops.config import PipelineConfig
from paddle_mlops.contracts import CHALLENGER
from steps.runtime import objectstore, registry, runner
from steps.runtime.runner import StepError


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-uri", required=True, help="published version prefix (upload's model-uri)")
    parser.add_argument("--manifest-digest", required=True, help="sha256 of the manifest (upload's manifest-digest)")
    parser.add_argument("--run-id", default="", help="MLflow run that produced the model")


def run(cfg: PipelineConfig, args: argparse.Namespace) -> dict[str, str]:
    endpoint = os.environ.get("S3_ENDPOINT_URL") or cfg.storage.endpoint_url
    raw = objectstore.read_manifest_bytes(args.model_uri, endpoint)
    if raw is None:
        raise StepError(f"{args.model_uri} is not published (no manifest.json); the upload step must succeed first")
    digest = objectstore.sha256_bytes(raw)
    if digest != args.manifest_digest:
        raise StepError(
            f"manifest of {args.model_uri} has sha256 {digest}, not the expected {args.manifest_digest}; "
            "it was republished or altered since upload, so it is not registered"
        )
    manifest = objectstore.read_manifest(args.model_uri, endpoint)
    tags = {
        "git_sha": str(manifest.get("git_sha") or args.git_sha),
        "manifest_digest": digest,
        "storage_uri": args.model_uri,
        "published_version": str(manifest["version"]),
        "data_stats": registry.compact_json(manifest.get("data_stats")),
        "metrics": registry.compact_json(manifest.get("metrics")),
    }
    client = registry.connect(cfg)
    name = cfg.mlflow.registered_model
    version = registry.register(cfg, args.model_uri, args.run_id or None, tags, client=client)
    registry.set_alias(name, CHALLENGER, version, client=client)
    print(f"registered {name} version {version} ({args.model_uri}) as '{CHALLENGER}'")
    return {"model-version": version}


STEP = runner.Step(
    "register",
    __doc__,
    run,
    _arguments,
    outputs=(runner.Output("model-version", "the registered model version"),),
)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
