"""training-image: is the run's training image allowed to train everywhere, or does it need its canary first?

`--check` (after build-image) outputs `allowed`: true when a canary passed on this digest before (or nothing was
built: a local run). `--allow` (after the canary TrainJob succeeded in `--canary-region`, the first region the run
may be admitted in) records the digest as allowed, with the canary's evidence
(steps/runtime/release/training_images.py).
A digest that is not sha256:<hex> is a user error (exit 2).
"""

from __future__ import annotations

import argparse
import sys

from paddle_mlops_core.config import PipelineConfig
from steps.runtime import runner
from steps.runtime.release import training_images


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--image-digest", required=True, help="the training image's digest (build-image output)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--check", action="store_true", help="say whether it is allowed (outputs allowed)")
    action.add_argument("--allow", action="store_true", help="record it as allowed: its canary passed")
    parser.add_argument("--canary-region", required=True, help="the region its canary runs in")
    parser.add_argument("--workflow-name", default="", help="the workflow whose canary passed (with --allow)")


def run(cfg: PipelineConfig, args: argparse.Namespace) -> runner.Finished:
    digest, region = args.image_digest, args.canary_region
    if args.allow:
        evidence = {
            "region": region,
            "workflow": args.workflow_name,
            "git_sha": args.git_sha,
            "steps": cfg.training.canary_steps,
        }
        doc = training_images.allow(cfg, digest, evidence)
        print(f"training image {digest} allowed in every region: its canary passed in {doc['canary']['region']}")
        return runner.Finished({"allowed": "true"})
    allowed = training_images.allowed(cfg, digest)
    if allowed:
        print(f"training image {digest or 'local'}: allowed in every region")
    else:
        print(f"training image {digest} is new: a {cfg.training.canary_steps}-step canary in {region} comes first")
    return runner.Finished({"allowed": str(allowed).lower()})


STEP = runner.Step(
    "training-image",
    __doc__,
    run,
    _arguments,
    outputs=(runner.Output("allowed", "true | false: may the image train in every region now"),),
)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
