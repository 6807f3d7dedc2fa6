"""validate: check a published model before any traffic moves to it (the rollout template's first step).

A model reaches the rollout from a bucket notification (its `manifest.json` was created: MinIO → Argo Events,
or the local run's own notification), or from a person (`--model-uri`). In order:

1. the model the notification names (bucket and key → model URI, in this pipeline's store only);
2. a model already validated is a `duplicate` (a replayed or redelivered notification) and nothing more
   happens, unless `--redeploy`;
3. the manifest: present, and the very object the notification announced (the store's ETag of the manifest
   read equals the event's eTag: an overwritten manifest has another one, whatever the encryption or upload);
4. every object: downloaded and checked against the manifest's size and sha256;
5. the model: loads with Paddle Inference and answers the smoke requests with a label and a distribution;
6. the gate of train-deploy: the task's held-out test split (prepared again from the configured data; the split
   is a function of the text, so it is the same rows) scored, the threshold, the baseline and the champion
   comparison. The baseline's answers come from the store under the content key of the splits validate has just
   prepared (what evaluate stored for the same data), or are fitted again: never from the manifest, which a
   publisher writes.

A verdict is an output, not an error: `passed`, `refused` (the register step records the reason; the model is
never served) or `duplicate`. Exit 2 only when there is nothing to judge (no manifest, not this store) or the
platform's own test data cannot be prepared.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from steps.runtime import config_names, runner
from steps.runtime.data import evaluation, tasks
from steps.runtime.data.baselines import BaselineError
from steps.runtime.release import gate as gate_rules
from steps.runtime.release import registry
from steps.runtime.release.health import check_predictions
from steps.runtime.release.rollout_outcome import RolloutFailed
from steps.runtime.runner import StepError
from steps.runtime.storage import objectstore
from steps.runtime.storage.objectstore import manifest as manifests
from steps.runtime.storage.objectstore import notifications
from steps.runtime.storage.objectstore.backends import resolve_root

log = logging.getLogger("steps.validate")

PASSED, REFUSED, DUPLICATE = "passed", "refused", "duplicate"


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-uri", default="", help="published model prefix (<store>/<model>/<version>)")
    parser.add_argument("--event-bucket", default="", help="bucket of the notification (instead of --model-uri)")
    parser.add_argument("--event-key", default="", help="object key of the notification (a manifest.json)")
    parser.add_argument("--event-etag", default="", help="eTag of the manifest the notification announced")
    parser.add_argument("--image-digest", default="", help="serving image digest (default: the manifest's)")
    parser.add_argument(
        "--redeploy", default="false", choices=("true", "false"), help="judge and roll out a model validated before"
    )


def model_uri(cfg: PipelineConfig, args: argparse.Namespace) -> str:
    """The model to judge: --model-uri, else the one the notification names."""
    root = resolve_root(cfg.storage.uri)
    if args.model_uri:
        uri = args.model_uri.rstrip("/").removesuffix(f"/{manifests.MANIFEST}")
        _, model, version = manifests.split_model_uri(uri)
        notifications.check_name("model name", model)
        notifications.check_name("version", version)
    elif args.event_key:
        uri = notifications.model_uri_for(root, args.event_bucket, args.event_key)
    else:
        raise StepError("give --model-uri, or --event-bucket and --event-key of a manifest.json notification")
    store, model, _ = manifests.split_model_uri(uri)
    if model != cfg.mlflow.registered_model:
        raise StepError(f"{uri} is a version of {model!r}; this pipeline serves {cfg.mlflow.registered_model!r}")
    if store.rstrip("/") != root.rstrip("/"):
        raise StepError(f"{uri} is not in this pipeline's store {root}: publish it there (paddle-mlops publish)")
    return uri


def already_validated(cfg: PipelineConfig, client: Any, digest: str) -> str | None:
    """The registered version of this manifest if an earlier validation judged it, else None."""
    name = config_names.registered_model(cfg)
    version = registry.find_version_by_digest(name, digest, client)
    if version is None:
        return None
    tags = client.get_model_version(name, version).tags or {}
    return version if tags.get(registry.VALIDATION_VERDICT) else None


def _check_manifest(raw: bytes, stored: str, uri: str, announced: str) -> dict[str, Any]:
    """The parsed manifest, refused when it is not the object the notification announced."""
    announced, stored = announced.strip('"').lower(), stored.strip('"').lower()
    if announced and announced != stored:
        raise StepError(
            f"{uri}/{manifests.MANIFEST} was altered after it was published: the notification announced "
            f"eTag {announced}, the stored manifest has eTag {stored}"
        )
    found = manifests.parse(raw, uri)
    if not isinstance(found.get("files"), list) or not found["files"]:
        raise StepError(f"{uri}/{manifests.MANIFEST} lists no files")
    return found


def _load_and_smoke(cfg: PipelineConfig, model_dir: Path) -> None:
    from steps.runtime.weights.ernie import ExportedModel  # paddle: loaded only when a model is opened

    try:
        model = ExportedModel(model_dir, cpu_threads=cfg.serving.cpu_threads, use_gpu=cfg.serving.use_gpu)
        if model.task_type != cfg.model.task:
            raise StepError(f"the model is a {model.task_type} model; task '{cfg.task}' serves {cfg.model.task}")
        instances = cfg.smoke_payload()
        check_predictions({"predictions": model.predict(instances)}, instances)
    except (StepError, RolloutFailed):
        raise
    except Exception as exc:  # Paddle raises many types for a model it cannot run; the verdict needs the reason
        raise StepError(f"the model does not load or run with Paddle Inference: {type(exc).__name__}: {exc}") from None


def _check_labels(model_dir: Path, data_dir: Path) -> None:
    ours = json.loads((data_dir / "label_map.json").read_text(encoding="utf-8"))
    theirs = json.loads((model_dir / "label_map.json").read_text(encoding="utf-8"))
    if ours != theirs:
        raise StepError(f"the model's labels {theirs} are not the task's labels {ours}")


def judge(
    cfg: PipelineConfig, uri: str, manifest: tuple[bytes, str], announced: str, data_dir: Path, client: Any
) -> dict[str, Any]:
    """Manifest, objects, load and smoke, test-set gate: the metrics with `gate`, or StepError with the reason."""
    published = _check_manifest(*manifest, uri, announced)
    with tempfile.TemporaryDirectory(prefix="validate-") as tmp:
        # The files of the manifest just checked, not of a second read (which could be another manifest).
        model_dir = objectstore.fetch(uri, Path(tmp) / "model", cfg.storage.endpoint_url, published=published)
        _load_and_smoke(cfg, model_dir)
        _check_labels(model_dir, data_dir)
        metrics = evaluation.with_baseline(cfg, evaluation.score(cfg, model_dir, data_dir), data_dir).metrics
    decision = gate_rules.judge(cfg, metrics, client)
    _compare_claims(metrics, published)
    stats = json.loads((data_dir / "stats.json").read_text(encoding="utf-8"))
    claimed = ((published.get("data_stats") or {}).get("sha256") or {}).get("test.jsonl")
    metrics["test_split"] = {"sha256": stats["sha256"]["test.jsonl"], "model_reported": claimed}
    return metrics | {"gate": asdict(decision)}


def _compare_claims(metrics: dict[str, Any], published: dict[str, Any]) -> None:
    """Say when the manifest's baseline figure (evaluate's) differs from the one judged here: other splits or
    baseline code (`baseline.key` differs), or a manifest not written by evaluate."""
    ours = metrics.get("baseline")
    theirs = ((published.get("metrics") or {}) if isinstance(published.get("metrics"), dict) else {}).get("baseline")
    if not ours or not isinstance(theirs, dict):
        return
    ours["manifest_baseline"] = theirs.get("baseline")
    if theirs.get("key") != ours["key"] or theirs.get("baseline") != ours["baseline"]:
        log.warning("the manifest's baseline %s %s (key %s) is not the one judged here, %.4f (key %s)",
                    theirs.get("metric"), theirs.get("baseline"), str(theirs.get("key"))[:12], ours["baseline"],
                    ours["key"][:12])  # fmt: skip


def _outputs(uri: str, digest: str, published: dict[str, Any], image_digest: str) -> dict[str, str]:
    return {
        "registered-version": "",
        "model-uri": uri,
        "manifest-digest": digest,
        "run-id": str(published.get("run_id") or ""),
        "image-digest": image_digest or str(published.get("serve_image_digest") or ""),
        "git-sha": str(published.get("git_sha") or "unknown"),
    }


def run(cfg: PipelineConfig, args: argparse.Namespace) -> dict[str, str]:
    uri = model_uri(cfg, args)
    tagged = objectstore.read_manifest_tagged(uri, cfg.storage.endpoint_url)  # S3_ENDPOINT_URL wins (s3.client)
    if tagged is None:
        raise StepError(f"{uri} is not published (no {manifests.MANIFEST}): nothing to validate or roll out")
    raw = tagged[0]
    digest = objectstore.sha256_bytes(raw)
    try:
        published = json.loads(raw)
    except json.JSONDecodeError:
        published = {}
    outputs = _outputs(uri, digest, published if isinstance(published, dict) else {}, args.image_digest)
    client = registry.connect(cfg)
    earlier = None if args.redeploy == "true" else already_validated(cfg, client, digest)
    if earlier is not None:
        reason = f"{uri} (manifest sha256 {digest}) was validated before as version {earlier}: event dropped"
        print(f"duplicate: {reason}")
        return outputs | {"verdict": DUPLICATE, "reason": reason, "metrics": "{}", "registered-version": earlier}
    with tempfile.TemporaryDirectory(prefix="validate-data-") as tmp:
        data_dir = Path(tmp)
        tasks.prepare(cfg, data_dir)  # the platform's test set: a failure here is not the model's
        try:
            metrics = judge(cfg, uri, tagged, args.event_etag, data_dir, client)
        except BaselineError:
            raise  # the platform's own comparison failed: nothing to say about the model (exit 2)
        except (StepError, RolloutFailed) as exc:
            print(f"REFUSED {uri}: {exc}", file=sys.stderr)
            return outputs | {"verdict": REFUSED, "reason": str(exc), "metrics": "{}"}
    gate = metrics["gate"]
    verdict = PASSED if gate["passed"] else REFUSED
    reason = gate["reason"] + _split_note(metrics["test_split"])
    print(f"{verdict.upper()} {uri}: {reason}")
    text = json.dumps(metrics, ensure_ascii=False)
    return outputs | {"verdict": verdict, "reason": reason, "metrics": text}


def _split_note(split: dict[str, str | None]) -> str:
    """Said with the verdict when the model was evaluated on another test split than the one scored here
    (trained with other data settings: submit `rollout` with the same `-p overrides` to judge it on its own)."""
    if not split.get("model_reported") or split["model_reported"] == split["sha256"]:
        return ""
    log.warning("the model was evaluated on test split %s; validate scored the configured one, %s",
                split["model_reported"], split["sha256"])  # fmt: skip
    configured = split["sha256"] or ""
    return f" (scored on the configured test split {configured[:12]}, not the one the model reports)"


STEP = runner.Step(
    "validate",
    __doc__,
    run,
    _arguments,
    outputs=(
        runner.Output("verdict", "passed | refused | duplicate"),
        runner.Output("reason", "why, in one line"),
        runner.Output("model-uri", "the published model judged"),
        runner.Output("manifest-digest", "sha256 of its manifest"),
        runner.Output("metrics", "test metrics and the gate decision, JSON ('{}' when not scored)"),
        runner.Output("run-id", "the MLflow run the manifest names (empty for a model trained elsewhere)"),
        runner.Output("image-digest", "--image-digest, else the serving image digest the manifest names, else empty"),
        runner.Output("git-sha", "the commit the manifest names"),
        runner.Output("registered-version", "a duplicate's registered version (judged before), else empty"),
    ),
)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
