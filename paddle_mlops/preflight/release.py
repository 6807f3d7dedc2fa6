"""Preflight's check of the release digests: with `images.require_digest` (prod) the install set is applied through
`images.digest_overlay` (overlays/prod), whose images: must pin every image the install set runs by tag, each by a
digest a release wrote (paddle_mlops/release_overlay.py), not the placeholder it ships with."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import yaml

from paddle_mlops import release_overlay
from paddle_mlops.cluster_requirements import Requirements
from paddle_mlops.preflight.cluster import KubernetesApi
from paddle_mlops.preflight.results import FINDING, OK, Result

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CHECK = "release-digests"


def check_release_digests(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    if req.digest_overlay is None:
        return
    overlay = Path(req.digest_overlay)
    overlay = overlay if overlay.is_absolute() else PROJECT_ROOT / overlay
    release = f"scripts/sign-images.sh --env prod --overlay {req.digest_overlay} after pushing the release images"
    try:
        doc = release_overlay.read(overlay)
    except (release_overlay.OverlayError, yaml.YAMLError) as exc:
        yield Result(CHECK, req.digest_overlay, FINDING, str(exc), "restore it from the repository, then " + release)
        return
    missing = sorted(set(req.tagged_images) - set(release_overlay.pins(doc)))
    if missing:
        message = f"does not pin {', '.join(missing)}, which the install set runs by tag"
        yield Result(CHECK, req.digest_overlay, FINDING, message, "paddle-mlops compile --check names the entries")
        return
    unreleased = release_overlay.placeholders(doc)
    if unreleased:
        message = f"{', '.join(unreleased)} still carry the placeholder digest: this overlay was never released"
        yield Result(CHECK, req.digest_overlay, FINDING, message, release + ", then commit the overlay")
        return
    yield Result(CHECK, req.digest_overlay, OK, f"pins all {len(req.tagged_images)} tagged images by digest")
