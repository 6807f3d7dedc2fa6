"""What the `python -m benchmarks.X` scripts share: a parser with `--quick` and `--json`, and the JSON results file."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def benchmark_parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of `python -m benchmarks.<module>`, its help the module's docstring as written."""
    return argparse.ArgumentParser(
        prog=f"python -m benchmarks.{module}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def parse_benchmark_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, quick_help: str
) -> argparse.Namespace:
    """`argv` parsed after adding the flags every benchmark takes last: `--quick` and `--json`."""
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--json", dest="json_out", default=None, help="also write the results to this JSON file")
    return parser.parse_args(list(argv) if argv is not None else None)


def write_results(json_out: str | None, results: dict[str, Any]) -> None:
    """`results` to the `--json` file, when one was asked for."""
    if json_out:
        Path(json_out).write_text(json.dumps(results, indent=2), encoding="utf-8")
