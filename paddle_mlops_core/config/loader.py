"""Load configuration: base YAML -> task overlay -> environment overlay -> `--set a.b=c` overrides -> validated.

The task overlay (`configs/tasks/<task>.yaml` beside the base file) says what the task is (its type, data, model
and gate); the environment overlay then says where it runs, so a stricter production gate holds for every task. An
environment overlay's `tasks.<task>` section says what differs for one task there (the local NER gate requires the
baseline where sentiment's only warns); it is the environment's file that says so, never the task's.

Every failure becomes a `ConfigError` whose message is one readable paragraph naming the file, the
field path and what is allowed; the CLI prints it and exits 2.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from paddle_mlops_core.config.models import PipelineConfig
from paddle_mlops_core.config.regions import RegionConfig
from paddle_mlops_core.config.tasks import DEFAULT_TASK, TASK_NAME_PATTERN
from paddle_mlops_core.config.teams import TeamConfig

M = TypeVar("M", bound=BaseModel)
# A file of a directory of named ones (configs/teams/, configs/regions/): keyed by its `name`.
Named = TypeVar("Named", TeamConfig, RegionConfig)

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class ConfigError(Exception):
    """A configuration problem the user can fix; the message says what, where and how."""


def default_config_path() -> Path:
    """`configs/pipeline.yaml` in the working directory, else the one in the project checkout."""
    here = Path("configs/pipeline.yaml")
    return here if here.exists() else PROJECT_ROOT / "configs" / "pipeline.yaml"


def read_yaml(path: Path) -> dict[str, Any]:
    """Read one YAML mapping; an empty file is an empty mapping."""
    if not path.is_file():
        raise ConfigError(f"Configuration file {path} does not exist. Check the path (or pass --config FILE).")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}{where} is not valid YAML: {problem}. Fix the syntax and run again.") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text. Save it as UTF-8 and run again.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of settings at the top level, not a {type(data).__name__}.")
    return data


def deep_merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """Merge `overlay` into `base`: mappings merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_override(item: str) -> tuple[list[str], Any]:
    """`training.epochs=2` -> (['training', 'epochs'], 2); the value is parsed as YAML."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip() or any(not part for part in key.split(".")):
        raise ConfigError(f"--set {item!r} is not of the form a.b.c=value (for example --set training.epochs=2).")
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    for item in overrides:
        path, value = parse_override(item)
        patch: dict[str, Any] = {path[-1]: value}
        for part in reversed(path[:-1]):
            patch = {part: patch}
        data = deep_merge(data, patch)
    return data


def _field_path(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + item)
    return "".join(parts) or "(top level)"


def _allowed(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The keys allowed at the parent of `loc`, for unknown-key errors."""
    current: Any = model
    for item in loc[:-1]:
        if isinstance(item, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or item not in fields:
            return []
        annotation = fields[item].annotation
        current = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
        if current is None:
            return []
    fields = getattr(current, "model_fields", {})
    return [f.alias or name for name, f in fields.items()]


# Keys that were renamed: the error names the new key instead of listing what is allowed.
RENAMED_KEYS = {
    "training.checkpoint_every": "training.checkpoint.every_steps (with training.checkpoint.every_seconds, "
    'epoch_end and keep; docs/training.md "Checkpoints and resume")',
}


def format_validation_error(exc: ValidationError, model: type[BaseModel], sources: str) -> str:
    """One paragraph: which file(s), which field, what is wrong, what is allowed."""
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = _field_path(loc)
        if err["type"] == "value_error" and not loc:
            # A rule across keys (model validators): its message names the keys itself.
            lines.append(str(err["msg"]).removeprefix("Value error, ").rstrip(".") + ".")
        elif err["type"] == "extra_forbidden" and path in RENAMED_KEYS:
            lines.append(f"'{path}' was replaced by {RENAMED_KEYS[path]}.")
        elif err["type"] == "extra_forbidden":
            allowed = _allowed(model, loc)
            hint = f" Allowed keys here: {', '.join(allowed)}." if allowed else ""
            lines.append(f"unknown key '{path}'.{hint}")
        else:
            got = err.get("input")
            shown = "" if isinstance(got, (dict, list)) else f" (got {got!r})"
            lines.append(f"'{path}': {err['msg']}{shown}.")
    return (
        f"Invalid configuration in {sources}: " + " ".join(lines) + " Fix the value in that file or the --set option."
    )


def validate(model: type[M], data: dict[str, Any], sources: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, model, sources)) from None


def known_tasks(config_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """The tasks configured beside the base file (`tasks/<name>.yaml`), sorted."""
    base = Path(config_dir) if config_dir else default_config_path().parent
    return sorted(p.stem for p in (base / "tasks").glob("*.yaml"))


def _task_overlay(base_path: Path, task: str | None) -> tuple[str, dict[str, Any], list[str]]:
    """(task name, its overlay, the overlay's file as a source); the default task may have no file."""
    name = task or DEFAULT_TASK
    if not re.fullmatch(TASK_NAME_PATTERN.strip("^$"), name):
        raise ConfigError(f"task {name!r} is not a valid task name (lower case letters, digits and '-').")
    path = base_path.parent / "tasks" / f"{name}.yaml"
    if not path.is_file():
        if task is None or name == DEFAULT_TASK:
            return name, {}, []
        known = known_tasks(base_path.parent)
        raise ConfigError(
            f"Task '{name}' has no overlay file {path}. Known tasks: {', '.join(known) or 'none'}. "
            f"Add {path} (at least `model: {{task: <type>}}`) or pick a known task."
        )
    overlay = read_yaml(path)
    if "task" in overlay:
        raise ConfigError(f"{path} sets 'task'; a task's name is its file name. Remove the key.")
    return name, overlay, [str(path)]


def _env_overlay(env_path: Path, task: str) -> dict[str, Any]:
    """An environment overlay for one task: its settings, then those of its `tasks.<task>` section (what differs for
    that task in this environment, e.g. configs/env/local.yaml's `tasks.ner.gate.baseline: require`)."""
    overlay = read_yaml(env_path)
    per_task = overlay.pop("tasks", None)
    if per_task is None:
        return overlay
    example = "(for example tasks: {ner: {gate: {baseline: require}}})"
    if not isinstance(per_task, dict):
        raise ConfigError(
            f"{env_path}: 'tasks' must map task names to the settings that differ for them {example}, "
            f"not a {type(per_task).__name__}."
        )
    known = set(known_tasks(env_path.parent.parent)) | {DEFAULT_TASK}
    for key, value in per_task.items():
        if key not in known:
            raise ConfigError(
                f"{env_path}: 'tasks.{key}' names no configured task (known: {', '.join(sorted(known))}). Fix the "
                f"name, or add {env_path.parent.parent / 'tasks' / f'{key}.yaml'}."
            )
        if not isinstance(value, dict):
            raise ConfigError(
                f"{env_path}: 'tasks.{key}' must be a mapping of settings {example}, not a {type(value).__name__}."
            )
    return deep_merge(overlay, per_task.get(task) or {})


def load_config(
    path: str | os.PathLike[str] | None = None,
    env: str | None = None,
    overrides: Iterable[str] = (),
    task: str | None = None,
) -> PipelineConfig:
    """Base file, then `tasks/<task>.yaml` and `env/<env>.yaml` beside it, then `--set` overrides; validated."""
    base_path = Path(path) if path else default_config_path()
    data = read_yaml(base_path)
    sources = [str(base_path)]
    name, overlay, task_source = _task_overlay(base_path, task)
    data = deep_merge(data, overlay)
    sources += task_source
    if env:
        env_path = base_path.parent / "env" / f"{env}.yaml"
        if not env_path.is_file():
            known = sorted(p.stem for p in (base_path.parent / "env").glob("*.yaml"))
            raise ConfigError(
                f"Environment '{env}' has no overlay file {env_path}. Known environments: {', '.join(known) or 'none'}."
            )
        data = deep_merge(data, _env_overlay(env_path, name))
        sources.append(str(env_path))
    overrides = list(overrides)
    if any(parse_override(item)[0] == ["task"] for item in overrides):
        raise ConfigError("--set task=… does not choose a task; use --task NAME (or the `task` workflow parameter).")
    if overrides:
        data = apply_overrides(data, overrides)
        sources.append("--set " + " ".join(overrides))
    if "task" in data:
        raise ConfigError(
            f"'task' is set in {' + '.join(sources)}; a task is chosen with --task NAME (configs/tasks/NAME.yaml). "
            "Remove the key."
        )
    return validate(PipelineConfig, {**data, "task": name}, " + ".join(sources))


def load_task_configs(path: str | os.PathLike[str] | None = None, env: str | None = None) -> dict[str, PipelineConfig]:
    """Every configured task's configuration (tasks/*.yaml beside the base file), by task name."""
    base_path = Path(path) if path else default_config_path()
    return {name: load_config(base_path, env, task=name) for name in known_tasks(base_path.parent)}


def _load_dir(directory: Path, model: type[Named]) -> dict[str, Named]:
    out: dict[str, Named] = {}
    for file in sorted(directory.glob("*.yaml")):
        item = validate(model, read_yaml(file), str(file))
        out[item.name] = item
    return out


def load_teams(config_dir: str | os.PathLike[str] | None = None) -> dict[str, TeamConfig]:
    base = Path(config_dir) if config_dir else default_config_path().parent
    return _load_dir(base / "teams", TeamConfig)


def load_regions(config_dir: str | os.PathLike[str] | None = None) -> dict[str, RegionConfig]:
    base = Path(config_dir) if config_dir else default_config_path().parent
    return _load_dir(base / "regions", RegionConfig)
