"""Roll a registered model version out to serving, check it, and promote it or roll it back.

`serving.target: local` — start `python -m steps.serve` as a background process on loopback, wait
for readiness, send smoke requests, move the MLflow alias `champion`, and only then stop the
previous server. A failed check stops the *new* server; the previous one keeps serving. With `--champion
--ensure-served` (a local run whose model was published before, or refused) it keeps the champion served: a no-op
when its server runs, else (after `paddle-mlops serve stop`) it starts it again; `champion` does not move.

`serving.target: kserve` — region by region: apply the new revision as a canary, wait for Ready,
smoke-test it, watch its error rate and p99 latency for `canary_window_seconds`, then promote it to
100%. A failure in any region rolls back that region and every region already changed; `champion`
moves only after all regions succeeded.

Exit code 0 when promoted, 3 when rolled back (a verdict: Argo does not retry it; the outcome file
says `rolled-back`), 2 on bad input, 1 on an error a retry may clear.

This module is the command line; the targets live in steps/runtime/serving/local_server.py and
steps/runtime/release/kserve_rollout.py, the checks in steps/runtime/release/health.py, the registry side in
steps/runtime/release/champion.py.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from paddle_mlops_core.config.loader import load_regions
from paddle_mlops_core.config.models import PipelineConfig
from paddle_mlops_core.config.regions import RegionConfig
from paddle_mlops_core.contracts import EXIT_ROLLED_BACK
from steps.runtime import runner
from steps.runtime.release import inference_service as isvc
from steps.runtime.release.champion import SERVED_IMAGE, MlflowRegistry, Registry, record
from steps.runtime.release.health import HttpProbe
from steps.runtime.release.kserve_rollout import KServeRollout, kubernetes_api, kubernetes_apps_api
from steps.runtime.release.rollout_outcome import ALREADY_SERVED, PROMOTED, Outcome, RolloutFailed
from steps.runtime.runner import StepError, StepFailed
from steps.runtime.serving.local_server import ensure_local, rollout_local
from steps.runtime.storage.region_stores import replicate_to


def _common_args(args: argparse.Namespace) -> list[str]:
    out = ["--overrides", args.overrides or "[]", "--git-sha", args.git_sha]
    if args.config:
        out += ["--config", str(Path(args.config).resolve())]
    if args.env:
        out += ["--env", args.env]
    if args.task:
        out += ["--task", args.task]
    return out


def resolve_regions(cfg: PipelineConfig, names: Sequence[str], config_dir: Path | None) -> list[RegionConfig]:
    known = load_regions(config_dir)
    missing = [n for n in names if n not in known]
    if missing:
        raise StepError(
            f"unknown region(s) {', '.join(missing)}; known regions: {', '.join(sorted(known)) or 'none'} "
            "(configs/regions/)"
        )
    return [known[n] for n in names]


def _arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--model-version", help="MLflow model version to serve (register step's output)")
    what.add_argument(
        "--champion",
        action="store_true",
        help="the version `champion` points at, again: a serving-image-only rollout (image-rollout)",
    )
    parser.add_argument(
        "--ensure-served",
        action="store_true",
        help="with --champion, serving.target=local: keep the champion served (a run that rolls nothing out) — a "
        "no-op when its server runs, else it is started again; `champion` does not move",
    )
    parser.add_argument("--model-uri", default=None, help="its published prefix (upload step's model-uri)")
    parser.add_argument("--region", default=None, help="the run's region when serving.regions is empty")
    parser.add_argument(
        "--regions", default="", help="comma-separated regions in rollout order (default: serving.regions, --region)"
    )
    parser.add_argument(
        "--image-digest",
        default=None,
        help="serving image digest (sha256:…, build-image's serve-image-digest); KServe serves the image by it. "
        "Empty: the digest the champion is served on",
    )


def what_to_serve(args: argparse.Namespace, reg: Registry) -> tuple[str, str]:
    """(model version, model URI): the given ones, or the champion's for an image-only rollout."""
    if not args.champion:
        if not args.model_uri:
            raise StepError("--model-version needs --model-uri (the upload step's model-uri output)")
        return args.model_version, args.model_uri
    champion = reg.champion()
    if champion is None:
        raise StepError("no model version is 'champion' yet: roll a model out first (train-deploy or rollout)")
    return champion


def serving_image(cfg: PipelineConfig, digest: str | None) -> str:
    """The configured serving repository pinned by `digest`; a tag is never deployed to KServe."""
    if not digest or not digest.startswith("sha256:"):
        raise StepError(
            f"--image-digest {digest!r} is not an image digest: KServe serves the serving image by digest only. "
            "Pass build-image's serve-image-digest output (sha256:…) or the digest of a pushed serving image; "
            "a model published without one is served on the champion's image, and there is no champion served "
            "by digest yet (a local `paddle-mlops run` builds no image: use serving.target=local there)."
        )
    return isvc.pin_image(cfg.images.serve, digest)


def image_digest(args: argparse.Namespace, reg: Registry) -> str | None:
    """--image-digest, else (a model published without one) the digest the champion is served on."""
    if args.image_digest or args.champion:
        return args.image_digest
    return reg.served_image_digest()


def _kserve(
    cfg: PipelineConfig, args: argparse.Namespace, version: str, uri: str, digest: str | None, api: Any, probe: Any
) -> Outcome:
    names = [n.strip() for n in args.regions.split(",") if n.strip()] or list(cfg.serving.regions)
    config_dir = Path(args.config).resolve().parent if args.config else None
    regions = resolve_regions(cfg, names or [args.region or cfg.cluster.region], config_dir)
    image = serving_image(cfg, digest)
    custom = api or kubernetes_api()  # loads the cluster configuration the apps client then uses
    raw = cfg.serving.deployment_mode == "RawDeployment"
    apps = api if api is not None else (kubernetes_apps_api() if raw else None)
    machine = KServeRollout(cfg, custom, probe or HttpProbe(), apps=apps)
    # Each region's predictors read the model from the region's own store: copy it there first (nothing is changed
    # in any region until every copy is complete; a failed copy is an error a retry may clear, not a verdict).
    return machine.run(regions, uri, version, image, replicate_to(cfg, uri, regions))


def run(
    cfg: PipelineConfig,
    args: argparse.Namespace,
    registry: Registry | None = None,
    api: Any = None,
    probe: Any = None,
) -> runner.Finished:
    """`registry`, `api` and `probe` stand in for MLflow, the Kubernetes API and HTTP in tests."""
    reg = registry or MlflowRegistry(cfg)
    if args.ensure_served:
        return ensure_served(cfg, args, reg, probe)
    version, uri = what_to_serve(args, reg)
    if cfg.serving.target == "local":
        outcome = rollout_local(cfg, uri, version, runner.home_dir(), reg, _common_args(args), probe)
    else:
        digest = image_digest(args, reg)
        outcome = _kserve(cfg, args, version, uri, digest, api, probe)
        if outcome.outcome == PROMOTED:
            reg.promote(version)
            reg.tag(version, SERVED_IMAGE, str(digest))
    image_only = args.image_digest if args.champion else None
    record(reg, version, outcome, image_only)
    outputs = {"outcome": outcome.outcome, "serving-url": outcome.url}
    what = f"serving image {image_only} for model version {version}" if image_only else f"model version {version}"
    if outcome.outcome != PROMOTED:
        kept = "image" if image_only else "version"
        print(
            f"rolled back {what}: {outcome.reason}. The previous {kept} keeps serving and 'champion' is unchanged.",
            file=sys.stderr,
        )
        return runner.Finished(outputs, EXIT_ROLLED_BACK)
    print(f"{what} promoted; serving at {outcome.url}")
    return runner.Finished(outputs)


def ensure_served(cfg: PipelineConfig, args: argparse.Namespace, reg: Registry, probe: Any = None) -> runner.Finished:
    """`--champion --ensure-served`: the champion's local server running (started again when it is not), nothing
    registered, tagged or promoted."""
    if not args.champion or cfg.serving.target != "local":
        raise StepError(
            "--ensure-served needs --champion and serving.target=local (a local run's rollout workflow passes both; "
            "on a cluster the InferenceService keeps serving the champion)"
        )
    champion = reg.champion()
    if champion is None:
        print("no model version is 'champion' yet: nothing to serve")
        return runner.Finished({"outcome": "", "serving-url": ""})
    version, uri = champion
    try:
        outcome = ensure_local(cfg, uri, version, runner.home_dir(), _common_args(args), probe)
    except RolloutFailed as exc:
        raise StepFailed(f"the champion, model version {version}, could not be served again: {exc}") from exc
    said = "already serving" if outcome.outcome == ALREADY_SERVED else "started again; serving"
    print(f"champion model version {version} {said} at {outcome.url} ('champion' unchanged)")
    return runner.Finished({"outcome": outcome.outcome, "serving-url": outcome.url})


STEP = runner.Step(
    "rollout",
    __doc__,
    run,
    _arguments,
    outputs=(
        runner.Output("serving-url", "the serving URL"),
        runner.Output("outcome", "promoted | rolled-back"),
    ),
)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
