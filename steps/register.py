"""Register a published model version in MLflow with the validate step's verdict.

Never registers an unpublished model: the manifest must exist and hash to `--manifest-digest`. A model that
passed validation becomes `challenger`; a refused one is registered too, tagged with the reason, and no alias
points at it, so it is never served. Registering the same manifest again returns the same version (a retry or
a redeploy), with the new verdict. The version links to its training run and LoggedModel (evaluate's, named in
the manifest as `mlflow_model_id`) when they are on this tracking server, and its description is a Markdown model
card (steps/runtime/release/model_card.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import CHALLENGER
from steps.runtime import config_names, runner
from steps.runtime.release import model_card, registry
from steps.runtime.runner import StepError
from steps.runtime.storage import objectstore


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-uri", required=True, help="published version prefix (upload's model-uri)")
    parser.add_argument("--manifest-digest", required=True, help="sha256 of the manifest (upload's manifest-digest)")
    parser.add_argument("--run-id", default="", help="MLflow run that produced the model (if it is one of ours)")
    parser.add_argument("--verdict", default="passed", choices=("passed", "refused"), help="validate's verdict")
    parser.add_argument("--reason", default="", help="validate's reason")
    parser.add_argument("--metrics", default="{}", help="validate's metrics JSON (test metrics become tags)")


def validation_tags(args: argparse.Namespace) -> dict[str, str]:
    """The verdict, its reason and the test metrics (`test_<name>`, what the gate compares champions by)."""
    try:
        metrics = json.loads(args.metrics or "{}")
    except json.JSONDecodeError:
        raise StepError(f"--metrics is not JSON: {args.metrics[:200]!r}") from None
    tags = {registry.VALIDATION_VERDICT: args.verdict, registry.VALIDATION_REASON: args.reason[:4000]}
    for key, value in metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            tags[f"test_{key}"] = repr(float(value))
    base = metrics.get("baseline")
    if isinstance(base, dict) and isinstance(base.get("baseline"), (int, float)):
        # the cheap baseline validate judged the version against, on the same test split
        tags[f"baseline_test_{base['metric']}"] = repr(float(base["baseline"]))
        tags["baseline_difference"] = repr(float(base["difference"]))
    return tags


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
    } | model_card.short_tags(manifest)
    # pretrained, pretrained_digest, pretrained_paddlenlp_version (...): the weights it was fine-tuned from
    tags |= {k: str(v) for k, v in (manifest.get("pretrained") or {}).items()}
    client = registry.connect(cfg)
    name = config_names.registered_model(cfg)
    run_id = args.run_id if registry.known_run(args.run_id, client) else None
    if args.run_id and run_id is None:
        tags["source_run_id"] = args.run_id  # trained elsewhere: kept for the record, not linked
    model_id = str(manifest.get("mlflow_model_id") or "") or None
    if model_id and not registry.known_logged_model(model_id, client):
        tags["source_model_id"], model_id = model_id, None  # a LoggedModel of another tracking server
    experiment = client.get_run(run_id).info.experiment_id if run_id else None
    card = model_card.render(manifest, model_card.run_link(client.tracking_uri, experiment, args.run_id or "?"))
    version = registry.register(cfg, args.model_uri, run_id, tags, client=client, model_id=model_id, description=card)
    registry.set_tags(name, version, validation_tags(args), client=client)
    if args.verdict != "passed":
        print(f"registered {name} version {version} ({args.model_uri}) as REFUSED: {args.reason}")
        return {"model-version": version}
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
