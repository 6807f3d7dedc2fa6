"""The code base stays lint-clean (ruff, configured in pyproject.toml) and keeps its three layers apart."""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The house (STYLE.md rule 1; README "Architecture"), floor by floor. Each rule names a folder and the imports
# it must not make; a banned prefix matches the module itself and everything below it ("paddle" bans "paddle.nn",
# not "paddlenlp"; "paddle_mlops" bans "paddle_mlops.cli", not "paddle_mlops_core").
# - Ground floor, `paddle_mlops_core/`: configuration, contracts, the supported versions. It imports no other
#   project package (nor hera or paddle): pipelines/ and steps/ both build on it, and the images copy it without
#   the CLI.
# - pipelines/ (Hera DAGs, never paddle) and steps/ (runtime code, never hera) stand side by side above it: each
#   takes only the ground floor of the project, never the other side nor the roof.
# - The roof, `paddle_mlops/` (CLI, compiler, local executor, preflight): it may import every floor below; no
#   floor below imports it, so no arrow runs back up.
LAYER_RULES: dict[str, tuple[str, ...]] = {
    "pipelines": ("paddle", "paddlenlp", "steps", "paddle_mlops"),
    "steps": ("hera", "pipelines", "paddle_mlops"),
    "paddle_mlops_core": ("hera", "paddle", "paddlenlp", "pipelines", "steps", "paddle_mlops"),
}
# The project's own packages, whose modules must not import each other in a circle.
PROJECT_PACKAGES = ("paddle_mlops_core", "paddle_mlops", "pipelines", "steps", "benchmarks")


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff_is_clean(command: list[str]) -> None:
    """Lint rules and formatting (line length 120, pyproject.toml [tool.ruff]), as `make lint` runs them."""
    ruff = Path(sys.executable).parent / "ruff"
    result = subprocess.run([str(ruff), *command], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_line_length_is_enforced() -> None:
    """E501 is not ignored: `ruff format` cannot wrap long strings and comments, the lint rule catches them."""
    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]
    assert ruff["line-length"] == 120
    assert "E501" not in ruff["lint"].get("ignore", []) and "E" in ruff["lint"]["select"]


def imported_modules(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import in `source`, at any depth, relative ones resolved.

    `module` is the dotted name of the file being read; `from x import y` yields both `x` and `x.y`, since
    `y` may itself be a module (`from steps.runtime.weights import ernie`).
    """
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.append((node.lineno, base))
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names if alias.name != "*")
    return found


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def layer_violations(
    source: str, module: str, banned: tuple[str, ...], allowed: tuple[str, ...] = (), is_package: bool = False
) -> list[str]:
    """Imports in `source` that fall under a banned prefix and under no allowed one."""
    offenders = []
    for line, name in imported_modules(source, module, is_package):
        # A parent of an allowed module (`paddle_mlops` in `from paddle_mlops import config`) is allowed too.
        parent_of_allowed = any(a.startswith(name + ".") for a in allowed)
        if _within(name, banned) and not _within(name, allowed) and not parent_of_allowed:
            offenders.append(f"{module}:{line}: imports {name}")
    return offenders


def _python_files(target: str) -> list[Path]:
    path = ROOT / target
    return [path] if path.is_file() else sorted(path.rglob("*.py"))


def test_layers_do_not_mix() -> None:
    """pipelines/ never imports paddle, paddlenlp or steps; steps/ never imports hera or pipelines and takes
    only config and contracts from paddle_mlops; the shared config/contracts import neither side."""
    offenders = []
    for target, banned in LAYER_RULES.items():
        files = _python_files(target)
        assert files, f"layer rule names {target}, which holds no Python files"
        for path in files:
            rel = path.relative_to(ROOT).with_suffix("")
            is_package = rel.name == "__init__"
            module = ".".join(rel.parent.parts if is_package else rel.parts)
            source = path.read_text(encoding="utf-8")
            offenders += layer_violations(source, module, banned, (), is_package)
    assert offenders == [], "layer rule broken (STYLE.md rule 1):\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    ("source", "module", "caught"),
    [
        ("import hera.workflows\n", "steps.train", ["hera.workflows"]),
        ("def f():\n    from pipelines import k8s\n", "steps.runtime.training.ps", ["pipelines", "pipelines.k8s"]),
        ("from paddle_mlops import cli\n", "steps.train", ["paddle_mlops", "paddle_mlops.cli"]),
        (
            "from paddle_mlops.local.executor import run\n",
            "steps.train",
            ["paddle_mlops.local.executor", "paddle_mlops.local.executor.run"],
        ),
        ("from ....pipelines import templates\n", "steps.runtime.training.ps", ["pipelines", "pipelines.templates"]),
        (
            "from paddle_mlops_core.config import PipelineConfig\nfrom paddle_mlops_core import contracts\n",
            "steps.train",
            [],
        ),
        ("from paddle_mlops_core.contracts import SERVING_PORT\nimport paddlenlp\n", "steps.train", []),
        ("from .runner import StepError\n", "steps.runtime.training.ps", []),
    ],
    ids=[
        "hera",
        "pipelines-in-function",
        "cli",
        "local-executor",
        "relative-pipelines",
        "config-contracts",
        "contracts-paddlenlp",
        "relative-sibling",
    ],
)
def test_layer_checker_catches_crossings(source: str, module: str, caught: list[str]) -> None:
    found = layer_violations(source, module, LAYER_RULES["steps"])
    assert [entry.split("imports ")[1] for entry in found] == caught


def test_layer_checker_resolves_relative_imports_in_pipelines() -> None:
    rules = LAYER_RULES["pipelines"]
    assert layer_violations("from ..templates import x\n", "pipelines.platform.meta", rules) == []
    assert layer_violations("from ...steps import train\n", "pipelines.platform.meta", rules) == [
        "pipelines.platform.meta:1: imports steps",
        "pipelines.platform.meta:1: imports steps.train",
    ]
    assert layer_violations("from . import k8s\n", "pipelines", rules, is_package=True) == []
    assert layer_violations(
        "import paddle.nn as nn\nimport paddlenlp\nimport paddle_mlops.cli\n", "pipelines.k8s", rules
    ) == [
        "pipelines.k8s:1: imports paddle.nn",
        "pipelines.k8s:2: imports paddlenlp",
        "pipelines.k8s:3: imports paddle_mlops.cli",
    ]


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted name -> file of every module of the project's packages (a package is its `__init__.py`)."""
    found = {}
    for package in PROJECT_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            found[".".join(rel.parent.parts if rel.name == "__init__" else rel.parts)] = path
    return found


def import_graph(sources: dict[str, str], packages: set[str]) -> dict[str, set[str]]:
    """module -> the project modules it imports, at any depth (an import inside a function counts: it runs).

    `from x import y` points at the module `x.y` when there is one, else at `x`; so a package's `__init__` is
    an arrow only when a name is taken from it, as Python's import system reads it.
    """
    graph: dict[str, set[str]] = {}
    for module, source in sources.items():
        is_package = module in packages
        package = module.split(".") if is_package else module.split(".")[:-1]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                for alias in node.names:
                    targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in sources else base)
        graph[module] = {t for t in targets if t in sources and t != module}
    return graph


def first_circle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        return list(error.args[1])
    return None


def test_no_import_circle_among_project_modules() -> None:
    """No two project modules import each other, directly or round a loop, not even from inside a function
    (an import moved into a function to dodge a circle still runs the circle)."""
    modules = project_modules()
    packages = {name for name, path in modules.items() if path.name == "__init__.py"}
    graph = import_graph({name: path.read_text(encoding="utf-8") for name, path in modules.items()}, packages)
    assert len(graph) > 200, "the graph misses most of the project"
    circle = first_circle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle or [])


@pytest.mark.parametrize(
    ("sources", "circle"),
    [
        ({"a": "import b\n", "b": "from a import x\n"}, True),
        ({"a": "def f():\n    from b import y\n", "b": "import c\n", "c": "import a\n"}, True),
        ({"p": "from p import a\n", "p.a": "from . import b\n", "p.b": "x = 1\n"}, False),
        ({"p.a": "from p import b\n", "p.b": "from p.a import x\n"}, True),
        ({"a": "import b\n", "b": "import os\n"}, False),
    ],
    ids=["direct", "hidden-in-function", "package-hands-on", "submodules", "none"],
)
def test_circle_finder_sees_circles(sources: dict[str, str], circle: bool) -> None:
    packages = {"p"} & set(sources)
    assert (first_circle(import_graph(sources, packages)) is not None) is circle
