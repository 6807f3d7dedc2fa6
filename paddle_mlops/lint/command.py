"""The `paddle-mlops lint` command: its arguments, the text or JSON report, and the exit code."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict

from paddle_mlops.command_line import exit_status
from paddle_mlops.lint.documents import LintInputError
from paddle_mlops.lint.findings import Finding, lint_paths
from paddle_mlops_core.contracts import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE


def format_text(findings: Sequence[Finding]) -> str:
    if not findings:
        return "No findings."
    lines = [f"{f.file}: {f.document}: {f.container}: [{f.rule}] {f.message}\n    fix: {f.fix}" for f in findings]
    return "\n".join(lines) + f"\n{len(findings)} finding(s)."


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="paddle-mlops lint",
        description="Check every pod the manifests will create against the project's security and reliability rules.",
    )
    p.add_argument("paths", nargs="*", default=["argo/"], help="manifest files or directories (default argo/)")
    p.add_argument("--format", choices=["text", "json"], default="text", help="report format (default text)")
    p.add_argument(
        "--env",
        default=None,
        help="an environment whose configuration sets images.require_digest (prod) also requires every image to be "
        "pinned by a real digest",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    return exit_status(lambda: _report(args), [(LintInputError, EXIT_USAGE, "lint: {exc}")])


def _report(args: argparse.Namespace) -> int:
    findings = lint_paths(args.paths, args.env)
    if args.format == "json":
        print(json.dumps([asdict(f) for f in findings], indent=2, ensure_ascii=False))
    else:
        print(format_text(findings))
    return EXIT_FINDINGS if findings else EXIT_OK
