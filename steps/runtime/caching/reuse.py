"""How a cacheable step uses the step cache: look its key up, restore a hit into the workspace, record what it computed.

A step marked `cacheable` (steps/runtime/runner.py) takes `--step-cache URI` (empty: no cache) and `--rerun STEPS`
(`all`, or step names separated by commas: compute even on a hit, and record the new result) and declares the output
parameter `cache`, a JSON object the local executor reads to say `↺ <step> reused from run R (key K)`:
`{"reused": true|false, "key": K, "run": R}` (R: the run that computed the outputs; this one when not reused).
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from paddle_mlops_core.contracts import CACHE_OUTPUT, RERUN_ALL, TRAIN_KEY_FILE, workflow_run_name
from steps.runtime.caching.keys import Key
from steps.runtime.caching.store import Entry, StepCache
from steps.runtime.storage import workspace
from steps.runtime.storage.objectstore import IntegrityError

log = logging.getLogger("steps.cache")
TRAIN_STEP = "train"


def forced(step: str, rerun: str) -> bool:
    """Whether `--rerun` names `step` (or all steps)."""
    names = {name.strip() for name in rerun.split(",") if name.strip()}
    return RERUN_ALL in names or step in names


@dataclass
class Reuse:
    """One step's use of the cache in one run: its key, and the entry found under it (None: compute)."""

    key: Key
    cache: StepCache | None
    entry: Entry | None = None

    def restore(self, targets: Mapping[str, str]) -> dict[str, str] | None:
        """The hit's output parameters after its files are where `targets` says (name -> directory or s3:// prefix);
        None when there was no hit, or when the cached files no longer match their manifest (then the step computes,
        and records anew)."""
        if self.entry is None or self.cache is None:
            return None
        try:
            self.cache.restore(self.entry, targets)
        except (IntegrityError, FileNotFoundError) as exc:
            what = str(exc).split("; ")[0]  # the fetch's advice (republish) is not this step's
            log.warning("%s: the cached outputs are damaged (%s); computing them again", self.key.step, what)
            self.entry = None
            return None
        log.info("%s: reused the outputs of run %s (key %s) from %s", self.key.step, self.entry.run, self.key.short,
                 self.entry.uri)  # fmt: skip
        return {**self.entry.outputs, CACHE_OUTPUT: self.report(reused=True)}

    def record(self, sources: Mapping[str, Path], outputs: Mapping[str, str]) -> dict[str, str]:
        """Keep what the step computed (name -> local directory) under its key; `outputs` plus the `cache` report."""
        if self.cache is not None:
            self.cache.record(self.key, sources, outputs, workflow_run_name())
        return {**outputs, CACHE_OUTPUT: self.report(reused=False)}

    def report(self, reused: bool) -> str:
        run = self.entry.run if reused and self.entry else workflow_run_name()
        return json.dumps({"reused": reused, "key": self.key.digest, "run": run})


def begin(args: argparse.Namespace, key: Key, endpoint_url: str | None = None) -> Reuse:
    """Look `key` up in `--step-cache` (unless disabled or forced by `--rerun`) and say what will happen."""
    root = getattr(args, "step_cache", "") or ""
    if not root:
        return Reuse(key, None)
    cache = StepCache(root, endpoint_url)
    if forced(key.step, getattr(args, "rerun", "") or ""):
        log.info("%s: --rerun: computing (key %s)", key.step, key.short)
        return Reuse(key, cache)
    entry = cache.lookup(key)
    if entry is None:
        log.info("%s: no cached outputs for key %s%s; computing", key.step, key.short, _what_changed(cache, key))
    return Reuse(key, cache, entry)


def _what_changed(cache: StepCache, key: Key) -> str:
    """`` (changed since run R: a, b)`` against the newest entry of the step, when there is one."""
    try:
        latest = cache.latest(key.step)
    except Exception as exc:  # noqa: BLE001 - an explanation must never fail the step
        log.debug("no earlier entry to compare with: %s", exc)
        return ""
    if latest is None:
        return ""
    changed = key.changed(latest.manifest.get("key_parts") or {})
    return f" (changed since run {latest.run}: {', '.join(changed) or 'nothing recorded'})"


def _key_file(ws: str, endpoint_url: str | None) -> Key | None:
    """The train step's key that train-cache left in workspace `ws` (`contracts.TRAIN_KEY_FILE`); None when there is
    none or it is inconsistent."""
    found = workspace.read_json(workspace.join(ws, TRAIN_KEY_FILE), endpoint_url)
    if not isinstance(found, dict):
        return None
    key = Key(TRAIN_STEP, found.get("parts") or {})
    if key.digest != found.get("digest"):
        log.warning("%s does not hold a consistent key; the trained model is not cached", TRAIN_KEY_FILE)
        return None
    return key


def record_key_file(root: str, ws: str, sources: Mapping[str, Path], endpoint_url: str | None = None) -> None:
    """Record `sources` under the key another step computed and left in workspace `ws` (`contracts.TRAIN_KEY_FILE`:
    train-cache's key for the training job, which cannot compute it: on the cluster its code is its own image)."""
    key = _key_file(ws, endpoint_url) if root else None
    if key is not None:
        StepCache(root, endpoint_url).record(key, sources, {}, workflow_run_name())


def restore_key_file(
    root: str, rerun: str, ws: str, targets: Mapping[str, str], endpoint_url: str | None = None
) -> dict[str, str] | None:
    """Look up the key train-cache left in `ws` again and restore a hit into `targets`, as train-cache does: the
    train step asks once it may train (another run of the same inputs may have recorded the model meanwhile)."""
    key = _key_file(ws, endpoint_url) if root and not forced(TRAIN_STEP, rerun) else None
    if key is None:
        return None
    cache = StepCache(root, endpoint_url)
    return Reuse(key, cache, cache.lookup(key)).restore(targets)
