"""The prometheus_client metrics a module or package declares, read from its source without importing it."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from paddle_mlops_core import contracts

ROOT = Path(__file__).resolve().parents[1]
KINDS = {"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "Summary": "summary"}


@dataclass(frozen=True)
class DeclaredMetric:
    name: str
    kind: str  # counter, gauge, histogram or summary
    labels: tuple[str, ...]  # the label names (third positional argument)


def module_sources(module: str) -> list[Path]:
    """The source of a dotted module of this project, or of every module below it if it is a package."""
    path = ROOT.joinpath(*module.split("."))
    return sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]


def declared_metrics(module: str) -> list[DeclaredMetric]:
    """Every `Counter(name, help, [labels])`-style construction in `module` whose name is known."""
    trees = [ast.parse(source.read_text(encoding="utf-8")) for source in module_sources(module)]
    return [metric for tree in trees for metric in _declared_in(tree)]


def _declared_in(tree: ast.Module) -> list[DeclaredMetric]:
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        name = metric_name(node.args[0])
        if func in KINDS and name:
            labels = tuple(ast.literal_eval(e) for e in node.args[2].elts) if len(node.args) >= 3 else ()
            found.append(DeclaredMetric(name, KINDS[func], labels))
    return found


def metric_name(node: ast.expr) -> str | None:
    """A metric's name argument: a string literal, or a name from paddle_mlops_core.contracts (bare or qualified)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")  # NAME or contracts.NAME
    value = getattr(contracts, name, None) if name.isupper() else None
    return value if isinstance(value, str) else None
