"""The argument and error conventions every step shares.

Each step module has `_parse_args(argv)`, `main(argv) -> int` and `if __name__ == "__main__"`.
Every step takes `--config/--env/--overrides` so that it loads exactly the configuration the
pipeline was submitted with (the workflow passes `--set` overrides as a JSON list).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from paddle_mlops.config import ConfigError, PipelineConfig, load_config

# Exit codes: one definition, shared with the retry expression pipelines/k8s.py writes into the
# templates (re-exported: every step reads them from here), and the local home the executor sets.
from paddle_mlops.contracts import (  # noqa: F401  (re-exported for the steps)
    EXIT_FAILED,
    EXIT_OK,
    EXIT_ROLLED_BACK,
    EXIT_USER_ERROR,
    FINAL_EXIT_CODES,
    home_dir,
)

log = logging.getLogger("steps")



class StepError(Exception):
    """A failure the user can act on: bad data, a missing model, a failed check. Exit code 2."""


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="pipeline YAML (default: configs/pipeline.yaml)")
    parser.add_argument("--env", default=None, help="environment overlay: local, dev or prod")
    parser.add_argument(
        "--overrides", default="[]", help='JSON list of "a.b=c" overrides, as the workflow passes them'
    )
    parser.add_argument("--git-sha", default=os.environ.get("GIT_SHA", "unknown"), help="commit being built")


def config_from_args(args: argparse.Namespace) -> PipelineConfig:
    try:
        overrides = json.loads(args.overrides or "[]")
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--overrides must be a JSON list of 'a.b=c' strings: {exc}") from None
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise ConfigError("--overrides must be a JSON list of 'a.b=c' strings")
    return load_config(args.config, args.env or None, overrides)


def write_output(path: str | None, value: str) -> None:
    """Write an output parameter the way Argo reads it (`valueFrom.path`)."""
    if not path:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(value, encoding="utf-8")


def setup_logging(step: str) -> None:
    """Plain lines for people; one JSON object per line when LOG_FORMAT=json (for a log stack)."""
    if logging.getLogger().handlers:
        return
    if os.environ.get("LOG_FORMAT") == "json":
        fields = {
            "workflow": os.environ.get("ARGO_WORKFLOW_NAME", os.environ.get("PADDLE_MLOPS_RUN", "")),
            "step": step,
            "rank": os.environ.get("PADDLE_TRAINER_ID", "0"),
            "git_sha": os.environ.get("GIT_SHA", ""),
        }

        class _Json(logging.Formatter):
            def format(self, record: logging.LogRecord) -> str:
                return json.dumps(
                    {"ts": self.formatTime(record), "level": record.levelname, "msg": record.getMessage(), **fields},
                    ensure_ascii=False,
                )

        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_Json())
        logging.basicConfig(level=logging.INFO, handlers=[handler])
    else:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)


def run_step(step: str, body: Callable[[], int]) -> int:
    """Run a step body; user errors become one clear line on stderr and exit code 2."""
    setup_logging(step)
    try:
        return body()
    except ConfigError as exc:
        print(f"[{step}] configuration error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except StepError as exc:
        print(f"[{step}] error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    return parser.parse_args(list(argv) if argv is not None else None)
