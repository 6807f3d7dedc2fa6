"""A finetune-batch from the command line: `--task` names and `--set` overrides as the template's `tasks` list.

`--set a.b=c` applies to every task; `--set NAME:a.b=c` to task NAME only (a config key never holds a colon).
Each task must have a configuration (configs/tasks/NAME.yaml) that loads with its overrides, so a typo fails
here, before anything is submitted or trained.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from paddle_mlops_core.config import ConfigError, load_config
from paddle_mlops_core.config.placement import refuse_run_time_placement, run_time_overrides
from paddle_mlops_core.config.task_rules import missing_data


def task_overrides(tasks: Sequence[str], overrides: Sequence[str]) -> dict[str, list[str]]:
    """Each task's overrides: the shared ones, then its own (`NAME:a.b=c`), in the order given."""
    out: dict[str, list[str]] = {task: [] for task in tasks}
    for item in overrides:
        key = item.split("=", 1)[0]
        if ":" not in key:
            for task in tasks:
                out[task].append(item)
            continue
        task, _, rest = item.partition(":")
        if task not in out:
            raise ConfigError(f"--set {item!r} is for task {task!r}, which is not in this run ({', '.join(tasks)}).")
        out[task].append(rest)
    return out


def batch_items(
    tasks: Sequence[str],
    overrides: Sequence[str],
    config: str | os.PathLike[str] | None = None,
    env: str | None = None,
) -> list[dict[str, Any]]:
    """The `tasks` parameter of finetune-batch; every task's configuration is loaded (and checked) first."""
    if len(set(tasks)) != len(tasks):
        raise ConfigError(f"--task lists a task twice ({', '.join(tasks)}); each task runs once per batch.")
    # All branches run one compiled train template: a task of its own cannot have its own placement. Shared
    # placement keys are the compiled template's (the caller compiles with them or refuses them).
    refuse_run_time_placement([o.partition(":")[2] for o in overrides if ":" in o.split("=", 1)[0]], "--set NAME:")
    items = []
    for task, own in task_overrides(tasks, overrides).items():
        cfg = load_config(config, env, own, task=task)
        problem = missing_data(cfg)
        if problem:
            raise ConfigError(problem)
        items.append({"task": task, "overrides": run_time_overrides(own)})
    return items


def as_parameter(items: list[dict[str, Any]]) -> str:
    return json.dumps(items, ensure_ascii=False, separators=(",", ":"))
