"""Register a published model version in MLflow and point the `challenger` alias at it.

Never registers an unpublished model: the manifest must exist and hash to `--manifest-digest`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from paddle_mlops.contracts import CHALLENGER
from steps.runtime import objectstore, registry, stepargs
from steps.runtime.stepargs import StepError


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m steps.register", description=__doc__.splitlines()[0])
    stepargs.add_common_args(parser)
    parser.add_argument("--model-uri", required=True, help="published version prefix (upload's model-uri)")
    parser.add_argument("--manifest-digest", required=True, help="sha256 of the manifest (upload's manifest-digest)")
    parser.add_argument("--run-id", default="", help="MLflow run that produced the model")
    parser.add_argument("--workspace", default=None, help="per-run workspace (unused; kept for a uniform interface)")
    parser.add_argument("--version-out", default=None, help="file to write the registered model version to")
    return stepargs.parse(parser, argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)

    def body() -> int:
        cfg = stepargs.config_from_args(args)
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
        stepargs.write_output(args.version_out, version)
        return stepargs.EXIT_OK

    return stepargs.run_step("register", body)


if __name__ == "__main__":
    sys.exit(main())
