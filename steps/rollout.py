"""Roll a registered model version out to serving, check it, and promote it or roll it back.

`serving.target: local` — start `python -m steps.serve` as a background process on loopback, wait
for readiness, send smoke requests, move the MLflow alias `champion`, and only then stop the
previous server. A failed check stops the *new* server; the previous one keeps serving.

`serving.target: kserve` — region by region: apply the new revision as a canary, wait for Ready,
smoke-test it, watch its error rate and p99 latency for `canary_window_seconds`, then promote it to
100%. A failure in any region rolls back that region and every region already changed; `champion`
moves only after all regions succeeded.

Exit code 0 when promoted, 3 when rolled back (a verdict: Argo does not retry it; the outcome file
says `rolled-back`), 2 on bad input, 1 on an error a retry may clear.

This module is the command line; the targets live in steps/runtime/local_server.py and
steps/runtime/kserve_rollout.py, the checks in steps/runtime/health.py, the registry side in
steps/runtime/champion.py.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from paddle_mlops.config.loader import load_regions
from paddle_mlops.config.models import PipelineConfig, RegionConfig
from paddle_mlops.contracts import EXIT_ROLLED_BACK
from steps.runtime import inference_service as isvc
from steps.runtime import runner
from steps.runtime.champion import MlflowRegistry, Registry, record
from steps.runtime.health import HttpProbe
from steps.runtime.kserve_rollout import KServeRollout, kubernetes_api
from steps.runtime.local_server import rollout_local
from steps.runtime.rollout_outcome import PROMOTED
from steps.runtime.runner import StepError


def _common_args(args: argparse.Namespace) -> list[str]:
    out = ["--overrides", args.overrides or "[]", "--git-sha", args.git_sha]
    if args.config:
        out += ["--config", str(Path(args.config).resolve())]
    if args.env:
        out += ["--env", args.env]
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
    parser.add_argument("--model-uri", required=True, help="published model version (upload step's model-uri)")
    parser.add_argument("--model-version", required=True, help="MLflow model version (register step's output)")
    parser.add_argument("--region", default=None, help="the run's region when serving.regions is empty")
    parser.add_argument("--image-digest", default=None, help="serve image digest from build-image (pins the image)")


def run(
    cfg: PipelineConfig,
    args: argparse.Namespace,
    registry: Registry | None = None,
    api: Any = None,
    probe: Any = None,
) -> runner.Finished:
    """`registry`, `api` and `probe` stand in for MLflow, the Kubernetes API and HTTP in tests."""
    reg = registry or MlflowRegistry(cfg)
    if cfg.serving.target == "local":
        outcome = rollout_local(
            cfg, args.model_uri, args.model_version, runner.home_dir(), reg, _common_args(args), probe
        )
    else:
        names = list(cfg.serving.regions) or [args.region or cfg.cluster.region]
        config_dir = Path(args.config).resolve().parent if args.config else None
        regions = resolve_regions(cfg, names, config_dir)
        image = isvc.pin_image(cfg.images.serve, args.image_digest)
        machine = KServeRollout(cfg, api or kubernetes_api(), probe or HttpProbe())
        outcome = machine.run(regions, args.model_uri, args.model_version, image)
        if outcome.outcome == PROMOTED:
            reg.promote(args.model_version)
    record(reg, args.model_version, outcome)
    outputs = {"outcome": outcome.outcome, "serving-url": outcome.url}
    if outcome.outcome != PROMOTED:
        print(
            f"[rollout] rolled back model version {args.model_version}: {outcome.reason}. "
            "The previous version keeps serving and 'champion' is unchanged.",
            file=sys.stderr,
        )
        return runner.Finished(outputs, EXIT_ROLLED_BACK)
    print(f"[rollout] model version {args.model_version} promoted; serving at {outcome.url}")
    return runner.Finished(outputs)


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
