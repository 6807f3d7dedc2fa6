"""Which training images may train everywhere: the record a passing canary leaves in the pipeline's store.

A training image no run has trained on yet (a new digest from build-image: a Paddle or CUDA upgrade, a new base
layer) first trains `training.canary_steps` steps on the run's prepared data in the first region the run may use;
only then is it recorded as allowed, and other regions pull and train on it (pipelines/training_canary.py). The
record is one small JSON object per image digest, `<storage.uri>/training-images/<sha256 hex>.json` (the store the
pipeline publishes models to, read by every step with the same credentials), written create-if-absent after the
canary succeeded: its evidence (region, workflow, commit, steps, when). A failed canary writes nothing, so the image
is allowed nowhere and every other region keeps training on the images allowed before.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from steps.runtime.runner import StepError
from steps.runtime.storage.objectstore.backends import Backend, open_backend, resolve_root

PREFIX = "training-images"
LOCAL_DIGEST = "local"  # build-image's output where nothing was built (a local run trains the installed project)
_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")


def _backend(cfg: PipelineConfig) -> Backend:
    return open_backend(resolve_root(cfg.storage.uri), cfg.storage.endpoint_url)


def record_key(digest: str) -> str:
    match = _DIGEST.match(digest)
    if not match:
        raise StepError(f"--image-digest {digest!r} is not sha256:<64 hex> (build-image's image-digest output)")
    return f"{PREFIX}/{match.group(1)}.json"


def record(cfg: PipelineConfig, digest: str) -> dict[str, Any] | None:
    """The allowance of the training image `digest`, None when no canary has passed on it."""
    raw = _backend(cfg).read(record_key(digest))
    return None if raw is None else json.loads(raw)


def allowed(cfg: PipelineConfig, digest: str) -> bool:
    """Whether runs may train on `digest` in every region (a local run's image always may)."""
    return digest in ("", LOCAL_DIGEST) or record(cfg, digest) is not None


def allow(cfg: PipelineConfig, digest: str, evidence: dict[str, Any]) -> dict[str, Any]:
    """Record `digest` as allowed with the canary's `evidence`; the first record stays (a rerun changes nothing)."""
    doc = {"image_digest": digest, "allowed_at": datetime.now(UTC).isoformat(timespec="seconds"), "canary": evidence}
    backend = _backend(cfg)
    key = record_key(digest)
    if backend.create_exclusive(key, json.dumps(doc, indent=2, sort_keys=True).encode("utf-8")):
        return doc
    return json.loads(backend.read(key) or b"{}")


def allowed_images(cfg: PipelineConfig) -> list[dict[str, Any]]:
    """Every allowed training image, oldest first."""
    backend = _backend(cfg)
    docs = [json.loads(backend.read(f"{PREFIX}/{name}") or b"{}") for name in backend.children(PREFIX)]
    return sorted((d for d in docs if d), key=lambda d: d.get("allowed_at", ""))
