"""Which configuration a local run ran with, so that `--only`/`--from` continue only a run of the same one.

A run records its configuration's identity in `last-run.json` (`configuration`: the task, the overlay, the
`--set` overrides and a digest of the resolved configuration) and the resolved configuration itself in its
workspace (`run-config.json`). `--only`/`--from` reuse the last run's workspace, so a different task or different
settings would write one configuration's files into another's run: `differences` names what differs, and the
executor refuses with the command that starts a new run instead (the step cache makes that cheap).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from paddle_mlops_core.config.placement import run_time_overrides

IDENTITY_KEY = "configuration"  # in the summary (last-run.json)
RESOLVED_FILE = "run-config.json"  # in the run's workspace
_SHOWN = 6  # differing keys named in a refusal at most


def resolved(cfg: BaseModel) -> dict[str, Any]:
    """The resolved configuration as JSON data (base, overlay, task and overrides merged)."""
    return cfg.model_dump(mode="json", by_alias=True)


def identity(cfg: BaseModel, task: str, env: str | None, overrides: list[str], parameters: dict[str, str]) -> dict:
    """What the summary records about the run's configuration; `parameters` are those its starter set (the
    tasks of a finetune-batch with their own overrides)."""
    text = json.dumps(resolved(cfg), sort_keys=True, ensure_ascii=False)
    return {
        "task": task,
        "env": env,
        "overrides": list(overrides),
        "parameters": dict(parameters),
        "digest": hashlib.sha256(text.encode("utf-8")).hexdigest(),
    }


def differences(previous: dict[str, Any], now: dict[str, Any], now_resolved: dict[str, Any]) -> list[str]:
    """What differs between the last run's configuration (its summary) and this one's, each as `what: last vs now`;
    empty when this command may continue that run."""
    before = previous.get(IDENTITY_KEY)
    if not isinstance(before, dict):  # a summary older than the record: judge by what it holds
        return _legacy_differences(previous, now)
    found = []
    if before.get("task") != now["task"]:
        found.append(f"task {before.get('task')} vs {now['task']}")
    if before.get("parameters") != now["parameters"]:
        found.append(f"run parameters {_short(before.get('parameters'))} vs {_short(now['parameters'])}")
    if before.get("digest") == now["digest"]:
        return found  # a --set restating what the files resolve to is the same configuration
    if before.get("env") != now["env"]:
        found.append(f"--env {before.get('env')} vs {now['env']}")
    found += _setting_differences(_settings(before.get("overrides") or []), _settings(now["overrides"]))
    if not found:  # same task and --set: the configuration files (or what they read) changed since
        found += _resolved_differences(previous, now_resolved)
    return found or ["the resolved configuration (its digest)"]


def record_resolved(run_dir: Path, cfg: BaseModel) -> None:
    """Keep the resolved configuration in the run's workspace: what a refusal compares settings against."""
    run_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(resolved(cfg), indent=2, sort_keys=True, ensure_ascii=False)
    (run_dir / RESOLVED_FILE).write_text(text, encoding="utf-8")


def _legacy_differences(previous: dict[str, Any], now: dict[str, Any]) -> list[str]:
    found = []
    task = previous.get("task")
    if task is not None and task != now["task"]:
        found.append(f"task {task} vs {now['task']}")
    recorded = (previous.get("parameters") or {}).get("overrides")
    try:
        before = _settings(json.loads(recorded)) if recorded else {}
    except (TypeError, ValueError):
        before = {}
    # It kept the run-time overrides only (the placement keys went into its compiled DAG).
    return found + _setting_differences(before, _settings(run_time_overrides(now["overrides"])))


def _settings(overrides: list[str]) -> dict[str, str]:
    """`--set` overrides as key -> value (the last of a key wins, as the loader applies them)."""
    return {key.strip(): value for key, _, value in (item.partition("=") for item in overrides)}


def _setting_differences(before: dict[str, str], now: dict[str, str]) -> list[str]:
    keys = sorted(key for key in before.keys() | now.keys() if before.get(key) != now.get(key))
    return [f"setting {key}={before.get(key, '(not set)')} vs {key}={now.get(key, '(not set)')}" for key in keys]


def _resolved_differences(previous: dict[str, Any], now_resolved: dict[str, Any]) -> list[str]:
    """The resolved keys that differ from those kept in the last run's workspace (none when it kept none)."""
    path = Path(str(previous.get("workspace") or "")) / RESOLVED_FILE
    try:
        before = _flat(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return []
    now = _flat(now_resolved)
    keys = sorted(key for key in before.keys() | now.keys() if before.get(key) != now.get(key))
    shown = [f"{key} {_short(before.get(key))} vs {_short(now.get(key))} (configuration files)" for key in keys]
    return shown[:_SHOWN] + ([f"and {len(keys) - _SHOWN} more keys"] if len(keys) > _SHOWN else [])


def _flat(doc: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(doc, dict):
        return {prefix: doc}
    found: dict[str, Any] = {}
    for key, value in doc.items():
        found.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return found


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."
