"""The baseline's answers in the object store, keyed by everything that can change them: the three splits' sha256
(from the `stats.json` of the data area just prepared, never a model's claim), the kind, its code, its settings and the
library versions. Written once (create-if-absent), so evaluate and validate of one dataset judge against one figure."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from paddle_mlops_core.config import PipelineConfig
from steps.runtime.caching import keys as cache_keys
from steps.runtime.data.baselines.fitted import KINDS, Fitted
from steps.runtime.storage.objectstore.backends import open_backend, resolve_root

log = logging.getLogger("steps.baseline")
PREFIX = "baselines"
LIBRARIES = ("scikit-learn", "scipy", "python-crfsuite")


def key(cfg: PipelineConfig, data_dir: Path) -> tuple[str, dict[str, str]]:
    """The content key of this configuration's baseline on `data_dir`, and the library versions in it."""
    stats = json.loads((data_dir / "stats.json").read_text(encoding="utf-8"))
    versions = {name: _version(name) for name in LIBRARIES}
    material = {
        "kind": KINDS[cfg.model.task],
        # the baselines' own code, digested (steps/runtime/caching/keys.py): the package imports every kind's module
        # (text, pairs, crf), so a change to their features or fitting is never answered from what the old code
        # stored, with no version number to remember to bump (tests/test_code_keys.py)
        "code": cache_keys.code_digest("steps.runtime.data.baselines"),
        "splits": stats["sha256"],
        "crf_iterations": cfg.baseline.crf_iterations,
        "versions": versions,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest(), versions


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def _object_key(cfg: PipelineConfig, key: str) -> str:
    return f"{PREFIX}/{cfg.model.task}/{key}.json"


def read(cfg: PipelineConfig, key: str) -> Fitted | None:
    """The stored baseline of `key`, None when there is none (or it is unreadable: then it is fitted again)."""
    try:
        raw = open_backend(resolve_root(cfg.storage.uri), cfg.storage.endpoint_url).read(_object_key(cfg, key))
        if raw is None:
            return None
        fitted = Fitted(**json.loads(raw))
    except Exception as exc:  # a cache: any failure to read it means fitting again, said in the log
        log.warning("stored baseline %s unreadable (%s); fitting it again", key[:12], exc)
        return None
    fitted.cached = True
    return fitted


def write(cfg: PipelineConfig, fitted: Fitted) -> None:
    """Store the answers under their key (no-op when another run stored them first)."""
    doc = asdict(fitted) | {"cached": False}
    try:
        backend = open_backend(resolve_root(cfg.storage.uri), cfg.storage.endpoint_url)
        backend.create_exclusive(_object_key(cfg, fitted.key), json.dumps(doc, ensure_ascii=False).encode())
    except Exception as exc:  # storing is an optimisation; the run goes on with the answers it has
        log.warning("could not store the baseline's answers (%s); validate will fit it again", exc)
