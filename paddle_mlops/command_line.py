"""What the `paddle-mlops` commands share on the command line: the configuration options (--config,
--env, --set) and the way an error a user can act on ends a command, as one line on stderr and a
distinct exit code (paddle_mlops_core.contracts) instead of a traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

# (exception type, exit code, message template formatted with `exc`), matched in order.
UserErrors = Sequence[tuple[type[BaseException], int, str]]


def add_config_args(p: argparse.ArgumentParser, default_env: str | None = None, several_tasks: bool = False) -> None:
    """--config, --env, --task (repeatable with `several_tasks`: `args.tasks`) and repeatable --set, as
    `paddle_mlops_core.config.load_config` takes them."""
    p.add_argument("--config", type=Path, default=None, help="pipeline YAML (default: configs/pipeline.yaml)")
    p.add_argument(
        "--env",
        default=default_env,
        help=f"environment overlay from configs/env/ (local, dev, prod; default: {default_env or 'none'})",
    )
    if several_tasks:
        p.add_argument(
            "--task",
            dest="tasks",
            action="append",
            default=[],
            metavar="NAME",
            help="the task: configs/tasks/NAME.yaml (sentiment, ner, text-matching, …; default: sentiment); "
            "repeat it for a finetune-batch of several tasks",
        )
    else:
        p.add_argument(
            "--task",
            default=None,
            metavar="NAME",
            help="the task: configs/tasks/NAME.yaml (sentiment, ner, text-matching, …; default: sentiment)",
        )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="A.B=VALUE",
        help="override one setting, e.g. --set training.epochs=1 (repeatable)"
        + ("; --set NAME:a.b=c sets it for task NAME only" if several_tasks else ""),
    )


def exit_status(action: Callable[[], int], errors: UserErrors) -> int:
    """`action()`'s exit code; when it raises one of `errors`' types, that entry's message on stderr
    and its exit code."""
    try:
        return action()
    except tuple(kind for kind, _, _ in errors) as exc:
        code, template = next((code, template) for kind, code, template in errors if isinstance(exc, kind))
        print(template.format(exc=exc), file=sys.stderr)
        return code
