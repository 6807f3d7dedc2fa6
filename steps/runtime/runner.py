"""The one step runner: every `python -m steps.<name>` is a `Step` run by `Step.main`.

A step module declares its arguments, its outputs and a `run(cfg, args) -> outputs` function. Parsing
(`--config/--env/--task/--overrides/--git-sha`, so a step loads exactly the configuration the pipeline was submitted
with), logging, library-noise filtering, writing output parameters the way Argo reads them and mapping errors
to exit codes live here, once.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paddle_mlops_core.config import ConfigError, PipelineConfig, load_config
from paddle_mlops_core.config.placement import refuse_run_time_placement
from paddle_mlops_core.contracts import (  # noqa: F401 (home_dir re-exported)
    CACHE_OUTPUT,
    EXIT_FAILED,
    EXIT_FATAL,
    EXIT_OK,
    EXIT_TERMINATED,
    LAUNCH_CONTROL_ENV,
    LOG_FIELDS,
    LOG_FORMAT_ENV,
    LOG_FORMAT_JSON,
    OUTPUTS_FLAG,
    RERUN_ALL,
    home_dir,
    workflow_run_name,
)

log = logging.getLogger("steps")


class StepError(Exception):
    """A failure the user can act on: bad data, a missing model, a failed check. Exit code 2, not retried."""


class StepFailed(Exception):
    """A failure of the environment (a tool or server that failed): exit code 1, which the workflow retries."""


class StepStopped(Exception):
    """The step stopped on SIGTERM after saving its progress (training's checkpoint): exit code 143, retryable."""


@dataclass(frozen=True)
class Output:
    """An output parameter, `name` as the DAG declares it: written to `<--outputs-dir>/<name>`, where Argo reads
    it (`valueFrom.path` under contracts.OUTPUTS_DIR)."""

    name: str
    help: str


@dataclass(frozen=True)
class Finished:
    """What `run` returns when it ends with another exit code than 0 (rollout's rolled-back 3); otherwise `run`
    returns the outputs mapping alone."""

    outputs: Mapping[str, str] = field(default_factory=dict)
    exit_code: int = EXIT_OK


Run = Callable[..., "Mapping[str, str] | Finished | None"]


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    del parser


@dataclass(frozen=True)
class Step:
    """A step: its name (the DAG task name), module docstring, `run(cfg, args, **deps)`, arguments and outputs.

    `env_defaults` are set (when unset) before anything runs; `deps` passed to `main` reach `run` as keyword
    arguments (tests inject fakes of remote services that way).
    """

    name: str
    doc: str
    run: Run
    arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    outputs: tuple[Output, ...] = ()
    env_defaults: Mapping[str, str] = field(default_factory=dict)
    # Reuses its outputs from the step cache (steps/runtime/caching/reuse.py): takes --step-cache/--rerun, outputs
    # `cache`.
    cacheable: bool = False

    def declared_outputs(self) -> tuple[Output, ...]:
        if not self.cacheable:
            return self.outputs
        return (*self.outputs, Output(CACHE_OUTPUT, "JSON: whether the outputs were reused, their key and run"))

    def parser(self) -> argparse.ArgumentParser:
        module = self.name.replace("-", "_")
        parser = argparse.ArgumentParser(prog=f"python -m steps.{module}", description=self.doc.split("\n\n")[0])
        add_common_args(parser)
        self.arguments(parser)
        if self.cacheable:
            add_cache_args(parser)
        if self.declared_outputs():
            listed = "; ".join(f"{out.name}: {out.help}" for out in self.declared_outputs())
            parser.add_argument(
                OUTPUTS_FLAG, dest="outputs_dir", default=None, help=f"write the output parameters here ({listed})"
            )
        return parser

    def main(self, argv: Sequence[str] | None = None, **deps: Any) -> int:
        args = self.parser().parse_args(list(argv) if argv is not None else None)
        for key, value in self.env_defaults.items():
            os.environ.setdefault(key, value)
        setup_logging(self.name, args.task or "")
        try:
            cfg = config_from_args(args)
            set_log_fields(task=cfg.task)
            result = self.run(cfg, args, **deps)
        except ConfigError as exc:
            return _fail(f"[{self.name}] configuration error: {exc}", EXIT_FATAL)
        except StepError as exc:
            return _fail(f"[{self.name}] error: {exc}", EXIT_FATAL)
        except StepFailed as exc:
            return _fail(f"[{self.name}] failed: {exc}", EXIT_FAILED)
        except StepStopped as exc:
            return _fail(f"[{self.name}] stopped: {exc}", EXIT_TERMINATED)
        finished = result if isinstance(result, Finished) else Finished(result or {})
        self._write_outputs(args, finished.outputs)
        return finished.exit_code

    def _write_outputs(self, args: argparse.Namespace, outputs: Mapping[str, str]) -> None:
        undeclared = sorted(set(outputs) - {out.name for out in self.declared_outputs()})
        if undeclared:
            raise TypeError(f"step {self.name} returned outputs it does not declare: {', '.join(undeclared)}")
        if self.declared_outputs() and args.outputs_dir:
            for name, value in outputs.items():
                write_output(str(Path(args.outputs_dir) / name), value)


def _fail(message: str, code: int) -> int:
    print(message, file=sys.stderr)
    control = os.environ.get(LAUNCH_CONTROL_ENV)
    if code == EXIT_FATAL and control and Path(control).is_dir():
        # Under steps.runtime.training.launch: the launcher's own exit code would hide ours, so leave a mark it reads.
        (Path(control) / f"fatal.{os.getpid()}").write_text(message, encoding="utf-8")
    return code


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="pipeline YAML (default: configs/pipeline.yaml)")
    parser.add_argument("--env", default=None, help="environment overlay: local, dev or prod")
    parser.add_argument("--task", default=None, help="task overlay: configs/tasks/<task>.yaml (default: sentiment)")
    parser.add_argument("--overrides", default="[]", help='JSON list of "a.b=c" overrides, as the workflow passes them')
    parser.add_argument("--git-sha", default=os.environ.get("GIT_SHA", "unknown"), help="commit being built")


def add_cache_args(parser: argparse.ArgumentParser) -> None:
    """A cacheable step's arguments (steps/runtime/caching/reuse.py reads them)."""
    parser.add_argument(
        "--step-cache", default="", metavar="URI",
        help="step cache root (a directory or s3:// prefix) to reuse outputs from and record them in; empty: none",
    )  # fmt: skip
    parser.add_argument(
        "--rerun", default="", metavar="STEPS",
        help=f"compute these steps even when the cache holds their outputs ('{RERUN_ALL}' or names, comma-separated)",
    )  # fmt: skip


def config_from_args(args: argparse.Namespace) -> PipelineConfig:
    try:
        overrides = json.loads(args.overrides or "[]")
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--overrides must be a JSON list of 'a.b=c' strings: {exc}") from None
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise ConfigError("--overrides must be a JSON list of 'a.b=c' strings")
    refuse_run_time_placement(overrides, "--overrides (the workflow parameter `overrides`)")
    return load_config(args.config, args.env or None, overrides, task=args.task or None)


def write_output(path: str | None, value: str) -> None:
    """Write an output parameter the way Argo reads it (`valueFrom.path`)."""
    if not path:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(value, encoding="utf-8")


def setup_logging(step: str, task: str = "") -> None:
    """Plain lines for people; one JSON object per line when LOG_FORMAT=json (for a log stack), with the fields
    contracts.LOG_FIELDS says (docs/observability.md "Logs")."""
    if logging.getLogger().handlers:
        return
    if os.environ.get(LOG_FORMAT_ENV) != LOG_FORMAT_JSON:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter(step, task))
    logging.basicConfig(level=logging.INFO, handlers=[handler])


def set_log_fields(**fields: str) -> None:
    """Name what a step learns once it runs (its task after the configuration loads, the training run's id) on every
    JSON line after this one."""
    unknown = set(fields) - set(LOG_FIELDS)
    if unknown:
        raise ValueError(f"not a log field: {', '.join(sorted(unknown))} (contracts.LOG_FIELDS)")
    for handler in logging.getLogger().handlers:
        if isinstance(handler.formatter, _JsonFormatter):
            handler.formatter.fields.update(fields)


class _JsonFormatter(logging.Formatter):
    def __init__(self, step: str, task: str = "") -> None:
        super().__init__()
        self.fields = {
            "workflow": workflow_run_name(),
            "step": step,
            "task": task,
            "run_id": "",
            # a training worker's global rank (paddle.distributed.launch sets it); 0 for every other step
            "rank": os.environ.get("PADDLE_TRAINER_ID", "0"),
            "git_sha": os.environ.get("GIT_SHA", ""),
        }

    def format(self, record: logging.LogRecord) -> str:
        line = {"ts": self.formatTime(record), "level": record.levelname, "msg": record.getMessage(), **self.fields}
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)
