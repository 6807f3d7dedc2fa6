"""Publish the trained model to the object store (content-addressed objects, manifest last).

Outputs: `model-uri` (the published version prefix) and `manifest-digest` (sha256 of the manifest
bytes), which the register step checks before it registers anything.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from steps.runtime import objectstore, stepargs, workspace
from steps.runtime.stepargs import StepError

log = logging.getLogger("steps.upload")


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m steps.upload", description=__doc__.splitlines()[0])
    stepargs.add_common_args(parser)
    parser.add_argument("--workspace", required=True, help="per-run workspace (directory or s3:// prefix)")
    parser.add_argument("--run-id", required=True, help="MLflow run of training/evaluation (names the version)")
    parser.add_argument("--model-uri-out", default=None, help="file to write the published model URI to")
    parser.add_argument("--digest-out", default=None, help="file to write the manifest digest to")
    parser.add_argument("--version", default=None, help="version name (default: <git-sha[:12]>-<run-id[:8]>)")
    return stepargs.parse(parser, argv)


def default_version(git_sha: str, run_id: str) -> str:
    """Deterministic, so a retried upload of the same run lands on the same version (idempotent)."""
    return f"{git_sha[:12]}-{run_id[:8]}"


def _read_json(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise StepError(f"{path} is not valid JSON ({exc}); rerun the step that writes it") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)

    def body() -> int:
        cfg = stepargs.config_from_args(args)
        endpoint = os.environ.get("S3_ENDPOINT_URL") or cfg.storage.endpoint_url
        try:
            ws = workspace.stage_in(args.workspace, endpoint_url=endpoint)
        except FileNotFoundError as exc:
            raise StepError(f"workspace {args.workspace} is not readable ({exc}); run the earlier steps first") from None
        model_dir = ws / "model"
        if not model_dir.is_dir():
            raise StepError(f"{workspace.join(args.workspace, 'model')} does not exist; run the train step first")
        metadata = {
            "git_sha": args.git_sha,
            "run_id": args.run_id,
            "metrics": _read_json(ws / "eval" / "metrics.json"),
            "data_stats": _read_json(ws / "data" / "stats.json"),
        }
        version = args.version or default_version(args.git_sha, args.run_id)
        result = objectstore.publish(
            model_dir,
            cfg.storage.uri,
            cfg.mlflow.registered_model,
            version,
            metadata,
            endpoint_url=endpoint,
            progress=sys.stderr.isatty(),
        )
        print(
            f"published {result.model_uri}: {result.bytes_sent} bytes sent, {result.skipped} objects already stored, "
            f"manifest sha256 {result.manifest_digest}"
        )
        stepargs.write_output(args.model_uri_out, result.model_uri)
        stepargs.write_output(args.digest_out, result.manifest_digest)
        return stepargs.EXIT_OK

    return stepargs.run_step("upload", body)


if __name__ == "__main__":
    sys.exit(main())
